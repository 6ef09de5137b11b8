"""backend.analysis.fill_mask on real (tiny, random) models: mask normalisation, several models, clear refusals."""

from __future__ import annotations

import json

import pytest
import torch

from backend.__main__ import main as cli
from backend.analysis.fill_mask import check_text, fill_mask, normalise_mask
from backend.core.errors import DetourError
from tests.conftest import TINY_BERT, bundled_tokenizer


@pytest.fixture(scope="module")
def angle_mask_model(tmp_path_factory):
    """A tiny model whose tokenizer's mask token is ``<mask>`` (RoBERTa style)."""
    from backend.engine.models import build_from_scratch

    tok = bundled_tokenizer()
    tok.add_special_tokens({"mask_token": "<mask>"})
    torch.manual_seed(1)
    model = build_from_scratch(TINY_BERT, tok)
    out = tmp_path_factory.mktemp("angle_mask")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def test_both_mask_spellings_work_for_both_tokenizers(tiny_modernbert_dir, angle_mask_model):
    for text in ("The protein [MASK] the receptor.", "The protein <mask> the receptor.", "The protein [mask] x."):
        res = fill_mask([str(tiny_modernbert_dir), str(angle_mask_model)], text, top_k=3)
        assert [r["model"] for r in res] == [str(tiny_modernbert_dir), str(angle_mask_model)]
        assert res[0]["mask_token"] == "[MASK]" and "[MASK]" in res[0]["masked_text"]
        assert res[1]["mask_token"] == "<mask>" and "<mask>" in res[1]["masked_text"]
        for r in res:
            probs = [p["prob"] for p in r["predictions"]]
            assert len(probs) == 3 and probs == sorted(probs, reverse=True)
            assert all(0 < p <= 1 for p in probs) and sum(probs) <= 1 + 1e-6
            assert all(isinstance(p["token"], str) for p in r["predictions"])


def test_refusals_before_loading():
    with pytest.raises(DetourError, match="no mask token"):
        check_text("No mask here.")
    with pytest.raises(DetourError, match="found 2 mask tokens"):
        check_text("[MASK] and <mask>")
    with pytest.raises(DetourError, match="empty"):
        check_text("   ")
    with pytest.raises(DetourError, match="no mask token"):
        fill_mask(["/definitely/not/loaded"], "plain text")
    assert normalise_mask("a [MASK] b", "<mask>") == "a <mask> b"


def test_bad_model_is_a_clear_error(tmp_path):
    with pytest.raises(DetourError, match="no such path|not a model"):
        fill_mask([str(tmp_path / "nope")], "The [MASK].")


def test_cli_json(tiny_bert_dir, capsys):
    assert cli(["fill-mask", "The [MASK] binds.", "--model", str(tiny_bert_dir), "--top-k", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out) == 1 and len(out[0]["predictions"]) == 2
    assert cli(["fill-mask", "no mask", "--model", str(tiny_bert_dir)]) == 2
    assert "no mask token" in capsys.readouterr().err

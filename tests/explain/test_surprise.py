"""Per-token surprise: the CLM view is the trainer's CLM loss token by token, each token judged only from the ones
before it; the masked view is each token hidden on its own."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from backend.analysis.fill_mask import get_model
from backend.detour.encoder_lm import EncoderLM
from backend.engine.token_words import piece_label
from backend.explain.surprise import SurpriseError, encode, surprise_of, token_surprise
from backend.objectives import clm_labels

TEXT = "Aspirin inhibits the synthesis of prostaglandins, which mediate <inflammation> & pain."


@pytest.fixture(params=["modernbert", "bert"])
def loaded(request, tiny_modernbert_dir, tiny_bert_dir):
    return get_model(str(tiny_modernbert_dir if request.param == "modernbert" else tiny_bert_dir))


def test_clm_mean_is_the_trainers_clm_loss(loaded):
    tok, model = loaded
    res = surprise_of(tok, model, TEXT)
    row = encode(tok, TEXT)
    with torch.no_grad():  # the trainer's route: EncoderLM, no padding mask (sdpa's causal kernel on global layers)
        loss, _, n = EncoderLM(model)(row["ids"], clm_labels(row["ids"], row["doc_start"]), causal=True)
    assert res["clm_count"] == n
    assert res["clm_mean"] == pytest.approx(loss.item(), rel=1e-5)


def test_each_token_is_judged_from_the_tokens_before_it(loaded):
    tok, model = loaded
    res = surprise_of(tok, model, TEXT)
    ids = encode(tok, TEXT)["ids"]
    assert res["clm"][0] is None and res["clm"][1] is None  # [CLS]; the first word opens the document
    assert res["clm"][-1] is not None  # [SEP] is predicted, as in training
    for t in (2, 7, ids.shape[1] - 1):  # the prefix alone gives the same surprise: nothing from t on was used
        last = F.cross_entropy(_last_logits(model, ids[:, :t]), ids[0, t : t + 1])
        assert res["clm"][t] == pytest.approx(last.item(), rel=1e-4, abs=1e-5)


def _last_logits(model, prefix):
    from backend.detour.attention import causal_attention

    with torch.no_grad(), causal_attention(model, prefix, None, True) as attn:
        return model(input_ids=prefix, attention_mask=attn).logits[:, -1]


def test_masked_view_hides_one_token_at_a_time(loaded):
    tok, model = loaded
    res = surprise_of(tok, model, TEXT)
    ids = encode(tok, TEXT)["ids"]
    assert res["mlm"][0] is None and res["mlm"][-1] is None  # special tokens are never masked
    assert res["mlm_count"] == ids.shape[1] - 2
    for p in (1, 5, ids.shape[1] - 2):
        one = ids.clone()
        one[0, p] = tok.mask_token_id
        with torch.no_grad():
            logits = model(input_ids=one).logits[0, p]
        assert res["mlm"][p] == pytest.approx(F.cross_entropy(logits, ids[0, p]).item(), rel=1e-4, abs=1e-5)
        assert res["mlm_expected"][p] == piece_label(tok, int(logits.argmax()))  # the piece in words


def test_pieces_rebuild_the_text_and_long_texts_are_cut(tiny_modernbert_dir):
    tok, model = get_model(str(tiny_modernbert_dir))
    row = encode(tok, TEXT)
    assert "".join(g + p for g, p in row["pieces"][1:-1]) == TEXT
    assert row["pieces"][0] == ("", tok.cls_token) and not row["truncated"]
    long = encode(tok, "word " * 300, max_tokens=32)
    assert long["ids"].shape == (1, 32) and long["truncated"] and len(long["pieces"]) == 32
    with pytest.raises(SurpriseError, match="empty"):
        token_surprise([str(tiny_modernbert_dir)], "   ")
    with pytest.raises(SurpriseError, match="at least one model"):
        token_surprise([], TEXT)

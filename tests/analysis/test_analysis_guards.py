"""Issue 25 for the analyses: too few texts for CKA are refused, and no loader accepts non-finite weights."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from backend.analysis.api import cka_between
from backend.core.errors import DataError, ModelSpecError
from backend.core.paths import REPO_ROOT


@pytest.fixture
def texts_file(tmp_path):
    words = "cell protein gene enzyme tissue membrane receptor signal pathway acid".split()
    f = tmp_path / "texts.txt"
    f.write_text("\n".join(" ".join(words[(i + j) % 10] for j in range(6 + i % 4)) for i in range(40)) + "\n")
    return f


@pytest.fixture
def nan_model(tmp_path, tiny_modernbert_dir):
    d = tmp_path / "nan_model"
    shutil.copytree(tiny_modernbert_dir, d)
    w = load_file(d / "model.safetensors")
    name = next(k for k in w if k.endswith("layers.1.attn.Wqkv.weight"))
    w[name][0, 0] = float("nan")
    save_file(w, d / "model.safetensors", metadata={"format": "pt"})
    return d


@pytest.mark.parametrize("n", [2, 3])
def test_debiased_cka_refuses_fewer_texts_than_its_estimator_needs(tiny_modernbert_dir, texts_file, n):
    """The unbiased HSIC divides by n(n-3): with one sample per text (mean pooling) it needs 4 texts."""
    with pytest.raises(DataError, match=rf"n_texts: got {n}; debiased needs at least 4 samples \(its unbiased HSIC"):
        cka_between(str(tiny_modernbert_dir), str(tiny_modernbert_dir), texts_file, n_texts=n, max_len=16)


def test_biased_measures_run_at_few_texts_with_a_note_and_the_baseline_shows_why(tiny_modernbert_dir, texts_file):
    a = str(tiny_modernbert_dir)
    res = cka_between(a, a, texts_file, n_texts=6, max_len=16, measure="linear")
    assert any("only 6 texts for hidden size 64: linear is biased" in n for n in res["notes"]), res["notes"]
    few = res["baseline"]
    assert few["max"] < 0.99 < min(res["cka_diagonal"])  # a model against itself: 1; against other texts: less
    res = cka_between(a, a, texts_file, n_texts=40, max_len=16, measure="linear")
    assert not any("for hidden size" in n for n in res["notes"]), res["notes"]
    assert res["baseline"]["mean"] < few["mean"]  # the biased measure reads unrelated texts higher at small n
    res = cka_between(a, a, texts_file, n_texts=6, max_len=16)  # debiased: no bias note
    assert not any("for hidden size" in n for n in res["notes"]), res["notes"]


def test_every_loader_refuses_non_finite_weights(nan_model, tiny_modernbert_dir, texts_file):
    """CKA, explain and training load through load_encoder / load_masked_lm, evaluation through their _load."""
    from backend.engine.models import load_encoder, load_masked_lm

    for load in (load_encoder, load_masked_lm):
        with pytest.raises(ModelSpecError, match=r"weights are not finite \(NaN or infinity in .*Wqkv"):
            load(str(nan_model))
    r = subprocess.run(
        [sys.executable, "-m", "backend", "cka", "--a", str(nan_model), "--b", str(tiny_modernbert_dir),
         "--texts", str(texts_file), "--n-texts", "8", "--max-len", "16", "--out", str(texts_file.parent / "c.json")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 2 and "weights are not finite" in r.stderr, (r.returncode, r.stderr)
    assert not (texts_file.parent / "c.json").exists()
    assert torch.isfinite(load_encoder(str(tiny_modernbert_dir)).embeddings.tok_embeddings.weight).all()


@pytest.mark.parametrize("texts", [["The same sentence about cells."] * 8, ["a b", "a  b", "a\nb", "c", "d"] * 2])
def test_cka_on_identical_texts_is_refused_before_any_model_loads(texts):
    # models that do not exist: the texts are refused first, with a line, not an all-null result and exit 0
    with pytest.raises(DataError, match="distinct; CKA compares how models tell texts apart"):
        cka_between("no/such-model-a", "no/such-model-b", texts)

"""Evaluation inputs checked where they enter (issue 25): a second evaluation into one folder adds to it."""

from __future__ import annotations

import json

import pytest

from backend.core.errors import ConfigError
from backend.evaluation.runner import evaluate_models

pytestmark = pytest.mark.usefixtures("one_torch_thread")

QUICK = dict(epochs=1, lr=1e-3, max_len=32, batch_size=8, max_train_examples=16, max_eval_examples=8)


def test_second_evaluation_into_one_folder_adds_models_and_refuses_other_settings(tmp_path, tiny_modernbert_dir):
    out = tmp_path / "ev"
    evaluate_models([str(tiny_modernbert_dir)], "ner", None, seeds=[0], out_dir=out, labels=["A"], **QUICK)
    r = evaluate_models([str(tiny_modernbert_dir)], "ner", None, seeds=[0], out_dir=out, labels=["B"], **QUICK)
    assert [m["label"] for m in r["models"]] == ["A", "B"]
    saved = json.loads((out / "results.json").read_text())
    assert [m["label"] for m in saved["models"]] == ["A", "B"]
    assert saved["models"][0]["runs"][0]["status"] == "ok"
    md = (out / "results.md").read_text()
    assert "| A |" in md and "| B |" in md
    before = (out / "results.json").read_text()
    with pytest.raises(ConfigError, match=f"{out}.*different lr"):
        evaluate_models(
            [str(tiny_modernbert_dir)], "ner", None, seeds=[0], out_dir=out, labels=["C"], **{**QUICK, "lr": 5e-4}
        )
    assert (out / "results.json").read_text() == before  # never shrunk nor rewritten

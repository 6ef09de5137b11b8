"""Evaluation inputs checked where they enter (issue 25): a second evaluation into one folder adds to it."""

from __future__ import annotations

import json
import re
import shutil

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


def test_ner_test_split_without_entities_says_f1_undefined_and_defaults_fit_the_size(tmp_path, tiny_modernbert_dir):
    """No entity in test: F1 is 0/0, said in results.json/md and the NER tab (not 0.00). No --lr: the tiny model
    (well under 50M parameters) gets 1e-3, and results.json says why."""
    from app import ner_evaluations
    from backend.core.paths import DEMO_NER_DIR

    data = tmp_path / "ner"
    shutil.copytree(DEMO_NER_DIR, data)
    test = data / "test.tsv"
    test.write_text(re.sub(r"\t[BI]-\w+", "\tO", test.read_text()))
    hp = {k: v for k, v in QUICK.items() if k != "lr"}
    out = tmp_path / "evals" / "e"
    r = evaluate_models([str(tiny_modernbert_dir)], "ner", str(data), seeds=[0], out_dir=out, labels=["t"], **hp)
    run = r["models"][0]["runs"][0]
    assert run["status"] == "ok" and run["test"]["f1"] is None and "undefined" in run["test"]["undefined"]
    assert r["models"][0]["summary"]["f1"]["n"] == 0
    assert any("entity F1 is undefined" in f for f in r["models"][0]["flags"])
    assert "entity F1 is undefined" in (out / "results.md").read_text()
    assert r["hparams"]["lr"] == 1e-3 and "under 50M parameters" in r["lr_why"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DETOUR_EVALS_DIR", str(tmp_path / "evals"))
        [row] = ner_evaluations.f1_table()
    assert row[4] is None and "F1 undefined" in row[7]


def test_a_constant_answer_is_flagged_for_ner_and_classification():
    from backend.evaluation.ner import ner_scores
    from backend.evaluation.report import refresh, results_markdown
    from backend.evaluation.sanity import constant_answer

    gold = [["O", "B-Disease", "I-Disease"], ["B-Disease", "O"]]
    all_o = ner_scores(gold, [["O", "O", "O"], ["O", "O"]])
    assert all_o["constant"] == "O" and all_o["f1"] == 0.0
    assert ner_scores(gold, gold)["constant"] is None
    assert constant_answer([[], [], []]) == "no label" and constant_answer([["pos"], ["pos"]]) == "{pos}"
    assert constant_answer([["pos"], ["neg"]]) is None
    results = {
        "task": "ner", "primary_metric": "f1", "seeds": [0], "hparams": {}, "status": "complete",
        "models": [{"label": "m", "runs": [{"seed": 0, "status": "ok", "test": all_o, "dev": all_o}]}],
    }  # fmt: skip
    md = results_markdown(refresh(results))
    assert "## Warnings" in md and "m seed 0: predicts O for every test token: a constant answer" in md


@pytest.mark.parametrize("content", ["[]", "{not json", '{"models": 3}'])
def test_an_out_folder_with_a_foreign_results_json_is_refused_not_overwritten(tmp_path, tiny_modernbert_dir, content):
    out = tmp_path / "ev"
    out.mkdir()
    (out / "results.json").write_text(content)
    with pytest.raises(ConfigError, match=f"{out}.*results.json is"):
        evaluate_models([str(tiny_modernbert_dir)], "ner", None, seeds=[0], out_dir=out, labels=["A"], **QUICK)
    assert (out / "results.json").read_text() == content


def test_an_out_that_is_a_file_is_one_named_error(tmp_path, tiny_modernbert_dir):
    f = tmp_path / "results"
    f.write_text("x")
    with pytest.raises(ConfigError, match="is a file; give a folder"):
        evaluate_models([str(tiny_modernbert_dir)], "ner", None, seeds=[0], out_dir=f, labels=["A"], **QUICK)

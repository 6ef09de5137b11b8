"""The evaluations and suites that measured a model end up in its card: a run's final/README.md gets model-index
results with their intervals (an evaluation's mean over seeds; a suite's per-task means and its suite score with
the rank interval and tie group), every kept fine-tuned model carries its own card, and a model the lab did not
make (a bundled or local folder) keeps its files untouched."""

from __future__ import annotations

import json
import shutil

import pytest
from huggingface_hub import ModelCard

from backend.__main__ import main
from backend.engine import checkpoint
from backend.evaluation.model_cards import record_suite, run_of


@pytest.fixture
def run(detour_run_dir, isolated_runs_dir):
    d = isolated_runs_dir / detour_run_dir.name
    shutil.copytree(detour_run_dir, d)
    return d


def test_only_a_runs_final_model_is_a_run_to_write_a_card_for(run, tiny_bert_dir):
    assert run_of(str(run / "final")) == run
    assert run_of(str(tiny_bert_dir)) is None and run_of(str(run / "checkpoints" / "step-00000002" / "model")) is None


def test_a_suite_adds_its_task_means_and_suite_score_to_the_runs_card(run):
    """Three models on two tasks, the run one of them: its card gets each task's mean with the t interval and its
    suite score with the leaderboard's interval, rank interval and tie group."""
    cells = {}
    for lab, vals in {"run": [[50.0, 52.0, 51.0], [40.0, 41.5, 41.0]], "a": [[30.0, 31.0, 30.5], [20.0, 21.0, 20.5]],
                      "b": [[49.0, 51.5, 50.0], [40.5, 40.0, 42.0]]}.items():  # fmt: skip
        for t, v in zip(("ncbi", "anatem"), vals, strict=True):
            cells[f"{lab}|{t}"] = {"mean": sum(v) / 3, "ci95": [sum(v) / 3 - 1, sum(v) / 3 + 1], "n": 3,
                                   "per_seed": {str(s): x for s, x in enumerate(v)}}  # fmt: skip
    rep = {"suite": "bio", "out": "/x/evals/suites/bio", "cells": cells, "leaderboard": None,
           "tasks": [{"name": "ncbi", "task": "ner", "metric": "f1", "data": "/d/ncbi", "data_fingerprint": "f1"},
                     {"name": "anatem", "task": "ner", "metric": "f1", "data": "/d/anatem", "data_fingerprint": "f2"}],
           "models": [{"label": "run", "identity": {"path": str(run / "final")}},
                      {"label": "a", "identity": {"path": "/elsewhere/a"}},
                      {"label": "b", "identity": {"path": "/elsewhere/b"}}]}  # fmt: skip
    assert record_suite(rep) == []
    card = ModelCard.load(run / "final" / "README.md")
    got = {(r.dataset_name, r.metric_type): r for r in card.data.eval_results}
    assert set(got) == {("ncbi", "f1"), ("anatem", "f1"), ("bio (2 tasks: ncbi, anatem)", "suite_score")}
    assert got[("ncbi", "f1")].metric_args == {"seeds": 3, "ci95_low": 50.0, "ci95_high": 52.0}
    assert got[("ncbi", "f1")].dataset_revision == "f1" and got[("ncbi", "f1")].metric_config == "suite:bio/bio"
    suite = got[("bio (2 tasks: ncbi, anatem)", "suite_score")]
    assert suite.metric_value == pytest.approx((51.0 + 40.833333) / 2, abs=1e-3)
    assert (
        suite.metric_args["rank_low"] == 1 and suite.metric_args["models"] == 3 and "tie group a" in suite.metric_name
    )
    checkpoint.verify(run / "final")


@pytest.mark.slow
def test_an_evaluation_writes_results_into_the_cards_and_the_fine_tuned_model_exports(run, tiny_bert_dir, tmp_path,
                                                                                     capsys):  # fmt: skip
    from transformers import AutoModelForTokenClassification, pipeline

    untouched = {p.name: p.read_bytes() for p in tiny_bert_dir.iterdir()}
    out = tmp_path / "ev"
    args = ["evaluate", "--models", run.name, str(tiny_bert_dir), "--labels", "run", "bert", "--seeds", "2",
            "--epochs", "1", "--max-train-examples", "8", "--max-eval-examples", "8", "--max-len", "32", "--out",
            str(out)]  # fmt: skip
    assert main(args) == 0
    results = json.loads((out / "results.json").read_text())
    entry = results["models"][0]
    vals = [100 * r["test"]["f1"] for r in entry["runs"]]
    card = ModelCard.load(run / "final" / "README.md")
    [res] = card.data.eval_results
    assert res.metric_config == "evaluation:ev" and res.task_type == "token-classification"
    assert res.metric_value == pytest.approx(sum(vals) / 2, abs=1e-3) and res.metric_args["seeds"] == 2
    assert res.dataset_revision == results["data_fingerprint"]
    assert {p.name: p.read_bytes() for p in tiny_bert_dir.iterdir()} == untouched  # not the lab's: never written
    seed = out / "models" / "run" / "seed-1"
    ft = ModelCard.load(seed / "README.md")
    assert ft.data.base_model == run.name and ft.data.pipeline_tag == "token-classification"
    assert ft.data.license == "unknown" and ft.data.eval_results[0].metric_config == "evaluation:ev"
    assert "This model is fine-tuning seed 1 of 2 (seeds 0, 1) in `evaluation:ev`" in ft.text
    capsys.readouterr()
    assert main(["export", str(seed), "--out", str(tmp_path / "ner-model")]) == 0
    assert "AutoModelForTokenClassification" in capsys.readouterr().out
    exported = tmp_path / "ner-model"
    assert not (exported / "metrics.json").exists() and (exported / "label_map.json").exists()
    model = AutoModelForTokenClassification.from_pretrained(exported)
    assert model.config.id2label == {
        i: t for i, t in enumerate(json.loads((seed / "label_map.json").read_text())["labels"])
    }
    tagger = pipeline("token-classification", model=str(exported), aggregation_strategy="simple")
    assert isinstance(tagger("Aspirin reduces the risk of stroke."), list)


@pytest.mark.slow
def test_a_suite_over_three_models_prints_its_ranking_and_the_run_gets_the_suite_in_its_card(
    run, tiny_bert_dir, tiny_modernbert_dir, tmp_path, capsys
):
    from backend.core.paths import DEMO_NER_DIR

    suite = tmp_path / "demo-one.yaml"
    suite.write_text(f"name: demo-one\ndefaults:\n  seeds: 2\n  epochs: 1\n  max_train_examples: 16\n"
                     f"  max_eval_examples: 8\n  max_len: 32\ntasks:\n  - name: demo-ner\n    task: ner\n"
                     f"    data: {DEMO_NER_DIR}\n")  # fmt: skip
    out = tmp_path / "suite"
    args = ["evaluate", "--suite", str(suite), "--models", run.name, str(tiny_bert_dir), str(tiny_modernbert_dir),
            "--labels", "run", "bert", "modernbert", "--out", str(out), "--no-keep-models"]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    rep = json.loads((out / "suite.json").read_text())
    board = rep["leaderboard"]
    assert [m["label"] for m in board["models"]] == sorted(["run", "bert", "modernbert"],
                                                           key=lambda lab: -rep["average"][lab])  # fmt: skip
    assert "ranking (3 models; separations hold together at 95%, Bonferroni over 3 pairs):" in printed
    assert "tie groups: " in printed and "## Leaderboard: 3 models ranked" in printed
    card = ModelCard.load(run / "final" / "README.md")
    sources = {r.metric_config for r in card.data.eval_results}
    assert sources == {"suite:demo-one/suite"}  # the suite's own results, not one per task evaluation as well
    score = next(r for r in card.data.eval_results if r.metric_type == "suite_score")
    mine = next(m for m in board["models"] if m["label"] == "run")
    assert score.metric_value == pytest.approx(mine["score"], abs=1e-3)
    assert [score.metric_args["rank_low"], score.metric_args["rank_high"]] == mine["rank_interval"]


def test_a_suite_of_one_run_gives_its_score_and_interval_but_no_rank(run):
    """A sweep measures each run on a suite alone: one model has no rank to tell, and its card says none."""
    cell = {"mean": 45.0, "ci95": [40.0, 50.0], "n": 3, "per_seed": {"0": 44.0, "1": 45.0, "2": 46.0}}
    rep = {"suite": "bio", "out": "/x/suites/r", "cells": {"run|ncbi": cell}, "leaderboard": None,
           "tasks": [{"name": "ncbi", "task": "ner", "metric": "f1", "data": "/d/ncbi"}],
           "models": [{"label": "run", "identity": {"path": str(run / "final")}}]}  # fmt: skip
    assert record_suite(rep) == []
    score = next(
        r for r in ModelCard.load(run / "final" / "README.md").data.eval_results if r.metric_type == "suite_score"
    )
    assert score.metric_value == 45.0 and "rank" not in score.metric_name and "models" not in score.metric_args

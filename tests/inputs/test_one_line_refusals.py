"""Inputs that were tracebacks, or were kept without a word, each refused in one line naming what was typed: the
queue's runs folder a file, a budget that is not a finite whole count, the hybrid study's shares, seeds, slots and
switches, a results.json model without its label, a sweep's torn measurement cache, a suite's task name and seeds."""

from __future__ import annotations

import json

import pytest

from backend.__main__ import main
from backend.core import atomic, paths
from backend.evaluation.suite import SuiteError, load_suite


def one_line(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, (rc, err)
    return lines[0]


def test_the_queue_on_a_runs_folder_that_is_a_file(tmp_path, capsys, monkeypatch):
    f = tmp_path / "runs-file"
    f.write_text("not a folder\n")
    monkeypatch.setenv(paths.RUNS_ENV, str(f))
    assert "is a file, not a folder" in one_line(capsys, ["queue"]) and f.read_text() == "not a folder\n"
    assert "give --root a folder" in one_line(capsys, ["queue", "--root", str(f)])


@pytest.mark.parametrize("study", [[], ["--study", "hybrid-splits"]])
@pytest.mark.parametrize("budget", ["nan", "inf", "1e400", "1e20", "9007199254740993"])
def test_a_budget_that_is_not_a_finite_whole_count_is_refused_naming_the_flag(study, budget, capsys):
    line = one_line(capsys, ["replicate", *study, "--budgets", budget, "--plan"])
    assert "--budgets" in line and f"'{budget}'" in line and "phases.main.tokens" not in line  # as typed, exact


HYBRID = [
    (["--set", "shares=0.5"], "shares 0.5"),
    (["--set", "shares=abc"], "shares 'abc'"),
    (["--set", 'shares=[0.0,"a"]'], "shares [0.0, 'a']"),
    (["--set", "shares=[0.0,0.5,0.5]"], "each once"),  # a duplicate share was kept: two identical arms
    (["--pretrain-seeds", "0"], "seeds (--pretrain-seeds) 0"),  # was ignored
    (["--pretrain-seeds", "-2"], "seeds (--pretrain-seeds) -2"),  # planned -557,056 tokens
    (["--measure-jobs", "-3"], "--measure-jobs -3"),  # became 1
    (["--measure-jobs", "0"], "--measure-jobs 0"),
    (["--set", "budgets=[0]"], "'budgets': got 0"),  # bypassed the --budgets checks
    (["--set", "cpt=maybe"], "cpt 'maybe'"),  # kept as text
    (["--set", "eval.seeds=[1,2]"], "eval.seeds (--seeds) [1, 2]"),
    (["--set", "eval.epochs=x"], "'epochs': got 'x'"),
]


@pytest.mark.parametrize("flags, said", HYBRID, ids=[" ".join(f) for f, _ in HYBRID])
def test_the_hybrid_study_checks_every_value_it_is_given(flags, said, capsys):
    assert said in one_line(capsys, ["replicate", "--study", "hybrid-splits", *flags, "--plan"])


def _evaluation_without_a_label(folder):
    folder.mkdir()
    res = {"task": "ner", "hparams": {}, "seeds": [0], "models": [{"spec": "detour-tiny-en", "runs": []}]}
    atomic.write_json(folder / "results.json", res)
    atomic.write_json(folder / ".detour-artifact.json", {"kind": "evaluation", "name": None})
    return folder


def test_a_results_json_model_without_its_label_is_named(tmp_path, capsys):
    ev = _evaluation_without_a_label(tmp_path / "ev")
    before = (ev / "results.json").read_bytes()
    assert "model 0 has no label" in one_line(capsys, ["doctor", str(ev)])
    line = one_line(capsys, ["evaluate", "--models", "detour-tiny-en", "--seeds", "1", "--out", str(ev)])
    assert "model 0 without a label" in line and (ev / "results.json").read_bytes() == before


@pytest.mark.parametrize("content", ["[]", '{"heldout_mlm_loss": 1.0', "\x00\x01"])
def test_a_torn_sweep_measurement_is_named_at_report(content, tmp_path, capsys):
    from backend.sweeps.sweep import plan_sweep, write_manifest

    out = tmp_path / "sw"
    out.mkdir()
    write_manifest(out, plan_sweep(None, ["recipe=mlm"], ["train.lr=1e-4,2e-4"], 1, name="sw"))
    (out / "results").mkdir()
    (out / "results" / "c00-lr0.0001-s0.json").write_text(content)
    line = one_line(capsys, ["sweep", "--report", str(out)])
    assert "c00-lr0.0001-s0.json" in line and "sweep --report measures the run again" in line


def test_a_torn_measurement_of_a_run_about_to_be_measured_is_said_and_measured_again(tmp_path):
    from backend.sweeps.measure import _cached

    (tmp_path / "r.json").write_text("[]")
    said = []
    assert _cached(tmp_path / "r.json", said.append) == {}
    assert "holds a JSON list" in said[0] and "measured again" in said[0]


@pytest.mark.parametrize(
    "task, said",
    [
        ({"name": "demo-ner\n"}, "'name' must be a short folder name"),  # made a folder 'tasks/demo-ner\n'
        ({"seeds": [1.5, 2.9]}, "seeds"),  # became [1, 2]
        ({"seeds": [4294967296, -1]}, "from 0 to 4,294,967,295"),  # passed, then failed in every fine-tune
        ({"seeds": ["1"]}, "whole numbers"),
    ],
)
def test_a_suite_task_name_and_seeds_are_checked_whole(task, said, tmp_path):
    suite = tmp_path / "s.yaml"
    t = {"name": "demo-ner", "task": "ner", "data": str(paths.DEMO_NER_DIR), **task}
    suite.write_text(json.dumps({"name": "s", "tasks": [t]}))  # JSON is YAML: the name keeps its newline
    with pytest.raises(SuiteError, match=said):
        load_suite(suite)

"""The Reports tab's task-suite panel: what it starts is the CLI's command, bad input is one line before anything
starts, and the progress line shown is the evaluation's own (task, run, suite ETA)."""

from __future__ import annotations

import pytest

from app import suite_panel
from backend.core.errors import DetourError
from backend.core.paths import REPO_ROOT

DEMO = str(REPO_ROOT / "configs/suites/demo.yaml")


def test_shipped_suites_are_offered():
    assert ("bio-ner", str(REPO_ROOT / "configs/suites/bio-ner.yaml")) in suite_panel.suite_choices()


@pytest.mark.parametrize(
    "suite, models, labels, name, error",
    [
        ("", "detour-tiny-en", "", "x", r"suite: pick one"),
        (DEMO, "", "", "x", r"models: give at least one"),
        (DEMO, "detour-tiny-en ./no/such/model", "", "x", r"./no/such/model. does not exist \(this app reads files in"),
        (DEMO, "detour-tiny-en class-demo-detuor", "", "x", r"model 2: .*class-demo-detuor"),
        (DEMO, "detour-tiny-en", "a b", "x", r"labels: give one per model \(1\)"),
        (DEMO, "detour-tiny-en", "", "../up", r"name '../up'"),
    ],
)
def test_bad_input_is_refused_before_anything_starts(suite, models, labels, name, error):
    with pytest.raises(DetourError, match=error):
        suite_panel.start_suite(suite, models, labels, name)
    assert suite_panel.suite_runs() == []


def test_the_command_is_the_clis_and_the_view_shows_its_progress_line(tmp_path):
    out = suite_panel.suites_root() / "s1"
    argv = suite_panel.argv_for(DEMO, ["a", "b"], out, ["A", "B"], {"seeds": 3, "epochs": 0, "max_train_examples": 50})
    want = ["-m", "backend", "evaluate", "--suite", DEMO, "--models", "a", "b", "--out", str(out), "--labels", "A"]
    assert argv[1:] == [*want, "B", "--seeds", "3", "--max-train-examples", "50", "--no-keep-models"]
    out.mkdir(parents=True)
    line = "[task 2/3 anatem] [2/6] A seed 1: epoch 1/1 | suite 39% elapsed 7m26s ETA 11m41s"
    (out / suite_panel.LOG).write_text(f"loading\n{line}\n")
    v = suite_panel.suite_view("s1")
    assert "not running" in v["status"] and line in v["status"] and v["report"] == "" and v["figure"] is None
    assert suite_panel.suite_runs() == ["s1"]


def test_a_suite_over_three_models_shows_its_leaderboard_table_and_figure():
    """The Reports tab reads the leaderboard suite.json holds: its rows (rank, model, score, CI, ranks, group) and
    its figure; the list's refresh shows both."""
    import json

    from backend.core import catalogue
    from backend.evaluation.suite_report import write_suite_report

    out = catalogue.claim_folder(suite_panel.suites_root() / "three", "suite", "three")
    runs = lambda vals: [{"seed": s, "status": "ok", "test": {"f1": v / 100}} for s, v in enumerate(vals)]  # noqa: E731
    res = {"primary_metric": "f1", "task": "ner", "models": [
        {"label": "base", "path": "/m/base", "runs": runs([40.0, 41.0, 42.5])},
        {"label": "detour", "path": "/m/detour", "runs": runs([48.0, 50.5, 49.0])},
        {"label": "mlm", "path": "/m/mlm", "runs": runs([47.5, 49.0, 50.0])}]}  # fmt: skip
    (out / "tasks" / "ncbi").mkdir(parents=True)
    (out / "tasks" / "ncbi" / "results.json").write_text(json.dumps(res))
    write_suite_report(out, {"name": "three", "path": "three.yaml", "tasks": [{"name": "ncbi"}]}, png=False)
    v = suite_panel.suite_view("three")
    assert [r[1] for r in v["board"]] == ["detour", "mlm", "base"] and v["board"][2][4] == "3"
    assert v["board"][0][5] == v["board"][1][5] == "a" and v["board"][2][5] == "b"
    assert [t.name for t in v["board_figure"].data] == ["detour", "mlm", "base"]
    _, _, report, _, board, board_fig, _ = suite_panel.listing("three")
    assert board["visible"] and board_fig["visible"] and board["value"] == v["board"]
    assert "## Leaderboard: 3 models ranked" in report


def test_a_run_typed_as_a_path_is_named_by_its_name_not_its_absolute_path(
    detour_run_dir, isolated_runs_dir, tmp_path, monkeypatch
):
    import shutil

    shutil.copytree(detour_run_dir, isolated_runs_dir / "r1")
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    typed = "detour-tiny-en ../runs/r1"
    models = suite_panel.suite_models(typed)
    assert models == ["detour-tiny-en", str(isolated_runs_dir / "r1")]  # the evaluation gets the resolved folder
    assert suite_panel.default_labels(typed, models) == ["detour-tiny-en", "r1"]  # the report says its name
    assert suite_panel.default_labels("r1 ../runs/r1", ["r1", models[1]]) == []  # two alike: the CLI's own names

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

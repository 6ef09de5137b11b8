"""No file is read through a link out of its folder: a run's train.log made a link to /etc/passwd is one refused
line in the app and the CLI, never shown; the same for status, metrics, config, a report's files, a sweep's manifest
and an evaluation's results.json. Each format's one reader says which file is wrong and how."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from backend.__main__ import main
from backend.core import atomic
from backend.core.atomic import write_yaml
from backend.core.paths import OutsideRoot, confined
from backend.engine import rundir
from backend.engine.config import default_config

SECRET = "root:x:0:0"  # what /etc/passwd starts with; a stand-in secret below when it is absent


@pytest.fixture
def outside(tmp_path) -> Path:
    """A file outside every run folder that must never be shown."""
    p = Path("/etc/passwd")
    if p.exists() and SECRET in p.read_text():
        return p
    q = tmp_path / "secret.txt"
    q.write_text(SECRET + "\n")
    return q


def _run(root: Path, name: str = "r") -> Path:
    d = root / name
    d.mkdir(parents=True)
    cfg = default_config()
    cfg["name"] = name
    write_yaml(d / "config.yaml", cfg)
    rundir.write_status(d, state="done")
    return d


def test_a_run_log_that_links_out_is_refused_in_the_app(isolated_runs_dir, outside):
    from app import runs_tab

    d = _run(isolated_runs_dir)
    os.symlink(outside, d / "train.log")
    shown = runs_tab.log_tail("r")
    assert SECRET not in shown and "outside" in shown and "refused" in shown
    with pytest.raises(OutsideRoot, match="train.log links to"):
        rundir.read_log(d)
    (d / "train.log").unlink()
    os.symlink(d / "inner.log", d / "train.log")  # a link that stays inside the run folder is followed
    (d / "inner.log").write_text("step 1\n")
    assert "step 1" in runs_tab.log_tail("r")


def test_status_metrics_config_and_checkpoint_state_that_link_out_are_refused(isolated_runs_dir, tmp_path):
    d = _run(isolated_runs_dir)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "status.json").write_text(json.dumps({"state": "done"}))
    (foreign / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    (foreign / "config.yaml").write_text("name: x\n")
    (d / "status.json").unlink()
    os.symlink(foreign / "status.json", d / "status.json")
    st = rundir.read_status(d)
    assert st["state"] == "unknown" and "outside" in st["error"]
    os.symlink(foreign / "metrics.jsonl", d / "metrics.jsonl")
    with pytest.raises(OutsideRoot):
        rundir.read_metrics(d)
    (d / "config.yaml").unlink()
    os.symlink(foreign / "config.yaml", d / "config.yaml")
    with pytest.raises(OutsideRoot):
        rundir.read_config(d)
    with pytest.raises(OutsideRoot):
        atomic.read_json(d / "status.json")


def test_a_link_loop_is_one_line(tmp_path):
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    with pytest.raises(OutsideRoot, match="loop"):
        confined(tmp_path / "a")


def test_a_report_whose_files_link_out_shows_none_of_them(tmp_path, monkeypatch, outside):
    from app import reports_tab
    from backend.core import paths

    monkeypatch.setenv(paths.REPORTS_ENV, str(tmp_path / "reports"))
    d = tmp_path / "reports" / "quick"
    d.mkdir(parents=True)
    os.symlink(outside, d / "report.md")
    os.symlink(outside, d / "replicate.log")
    view = reports_tab.load_view("quick")
    assert SECRET not in view["summary"] and "outside" in view["summary"]
    assert SECRET not in view["log"]
    (d / "report.md").unlink()
    (d / "report.md").write_text("fine")
    os.symlink(outside, d / "report.html")  # never copied out to be served for download
    view = reports_tab.load_view("quick")
    assert "outside" in view["summary"] and not view["files"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[]", "holds a JSON list, not an evaluation's results"),
        ('{"task": "ner", "models": [', "not valid JSON"),
        ('{"task": "ner", "hparams": {}, "models": [3]}', "model 0 is not an evaluated model"),
        ("{}", "task, hparams, models missing or wrong"),
    ],
)
def test_doctor_on_a_broken_results_json_is_one_line(tmp_path, capsys, text, says):
    ev = tmp_path / "ev"
    ev.mkdir()
    (ev / "results.json").write_text(text)
    assert main(["doctor", str(ev)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {ev / 'results.json'}: ") and says in err and "Traceback" not in err


def test_the_app_panels_say_which_results_json_is_broken_and_list_the_others(tmp_path, monkeypatch, outside):
    from app import throughput_panel
    from backend.core import paths

    monkeypatch.setenv(paths.EVALS_ENV, str(tmp_path / "evals"))
    for name in ("a-torn", "b-link"):
        (tmp_path / "evals" / name).mkdir(parents=True)
    (tmp_path / "evals" / "a-torn" / "results.json").write_text("[")
    os.symlink(outside, tmp_path / "evals" / "b-link" / "results.json")
    text = throughput_panel.evaluations_markdown()
    assert "a-torn/results.json: not valid JSON" in text and "outside" in text and SECRET not in text


def test_a_runs_folder_that_is_a_file_is_said_not_an_empty_tab(tmp_path, monkeypatch):
    from app import runs_tab
    from backend.core import paths

    f = tmp_path / "runs-file"
    f.write_text("")
    monkeypatch.setenv(paths.RUNS_ENV, str(f))
    assert runs_tab.runs_table() == []
    assert "is a file, not a folder" in runs_tab.log_tail(runs_tab.default_run())

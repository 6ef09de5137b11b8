"""The doctor in the app: the Runs tab's throughput panel shows a run's tok/s, MFU, split and findings; the Launch
form's message carries the estimate from this machine's last measured rate for a model of that size."""

from __future__ import annotations

import json
import os

import pytest

from app import launch_tab, throughput_panel
from backend.core import process
from backend.engine.models import model_config_of
from backend.runs import jobs
from backend.runs.doctor import parameter_count
from conftest import measured_rate
from tests.runs.test_doctor import _row, _write_run
from tests.ui.test_app_handlers import form


@pytest.fixture(autouse=True)
def app_env(tmp_path, monkeypatch, tiny_modernbert_dir):
    monkeypatch.setenv("DETOUR_ALLOWED_ROOTS", str(tiny_modernbert_dir))
    monkeypatch.setattr(jobs, "ensure_worker", lambda *a, **k: None)  # nothing trains in these tests


def test_panel_shows_rates_split_and_findings(isolated_runs_dir):
    cfg = {"name": "r", "train": {"seq_len": 256}, "logging": {"eval_every": 5, "eval_batches": 8},
           "_meta": {"compile": {"resolved": True}}}  # fmt: skip
    machine = {"type": "machine", "step": 0, "device": "cpu", "precision": "bf16", "peak_flops": 8e11,
               "peak_source": "measured", "parameters": 5_500_000}  # fmt: skip
    rows = [_row(s, {"data": 3.0, "forward_backward": 1.0}) for s in (5, 10)]
    _write_run(isolated_runs_dir, "r", cfg, machine, rows, {"state": "running", "tokens_seen": 10_000,
                                                             "total_tokens": 20_000, "pid": os.getpid(),
                                                             "pid_identity": process.identity()})  # fmt: skip
    md = throughput_panel.panel_markdown("r")
    assert "| main | clm | 500 | 20.0% of 800 GFLOP/s (measured) | 75% | 25% |" in md  # data 75%, fwd+bwd 25%
    assert "75% of the step waits for data" in md and "ETA at the measured rate: **0m08s**" in md
    assert "python -m backend doctor r" in md
    assert throughput_panel.panel_markdown(None).startswith("Pick a run")
    assert throughput_panel.panel_markdown("absent").startswith("absent: no metrics yet")
    assert "metrics" not in throughput_panel.panel_markdown("../r")  # names only: no path reaches the disk


def test_launch_message_estimates_from_the_last_measured_rate(tiny_modernbert_dir):
    res = launch_tab.validate_form(form(tiny_modernbert_dir))
    assert res["ok"] and "measured rate" not in res["message"]  # this machine has not trained this size yet
    n = parameter_count(model_config_of({"name": str(tiny_modernbert_dir)}))
    cfg = launch_tab.validate_form(form(tiny_modernbert_dir, train__precision="fp32"))["cfg"]["train"]
    measured_rate(n, "fp32", "cpu", "clm", 100.0, cfg["seq_len"], cfg["batch_size"])
    measured_rate(n, "fp32", "cpu", "mlm", 200.0, cfg["seq_len"], cfg["batch_size"])
    res = launch_tab.validate_form(form(tiny_modernbert_dir, train__precision="fp32"))
    assert "measured rate (100 tok/s CLM: the 1 calm rate" in res["message"] and "200 tok/s MLM" in res["message"]


def test_evaluation_panel_lists_seconds_per_seed(tmp_path, monkeypatch):
    monkeypatch.setenv("DETOUR_EVALS_DIR", str(tmp_path / "evals"))
    assert throughput_panel.evaluations_markdown().startswith("No finished fine-tuning seed yet")
    runs = [{"seed": 0, "train_time_s": 20.0, "n_train": 50, "epochs_run": 2, "device": "cpu"}, {"seed": 1}]
    results = {"task": "ner", "hparams": {"max_len": 64}, "models": [{"label": "base", "runs": runs}]}
    (tmp_path / "evals" / "20261125-0600").mkdir(parents=True)
    (tmp_path / "evals" / "20261125-0600" / "results.json").write_text(json.dumps(results))
    assert "| 20261125-0600 | ner | base | 1/2 | 20 | 5.0 | 320 | cpu |" in throughput_panel.evaluations_markdown()


def test_evaluation_panel_lists_an_unreadable_evaluation_with_why(tmp_path, monkeypatch):
    """The panel reads the evaluations from the catalogue: a folder linking out of the evaluations folder is not
    read as an evaluation (its numbers are not rows) but named with why, as is a torn results.json."""
    monkeypatch.setenv("DETOUR_EVALS_DIR", str(tmp_path / "evals"))
    runs = [{"seed": 0, "train_time_s": 20.0, "n_train": 50, "epochs_run": 2, "device": "cpu"}]
    results = {"task": "ner", "hparams": {"max_len": 64}, "models": [{"label": "base", "runs": runs}]}
    for folder in (tmp_path / "evals" / "20261125-0600", tmp_path / "elsewhere"):
        folder.mkdir(parents=True)
        (folder / "results.json").write_text(json.dumps(results))
    (tmp_path / "evals" / "20261125-0700").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "evals" / "20261125-0800").mkdir()
    (tmp_path / "evals" / "20261125-0800" / "results.json").write_text('{"task": "n')
    md = throughput_panel.evaluations_markdown()
    assert "| 20261125-0600 | ner | base |" in md and "| 20261125-0700 |" not in md
    assert "- ⚠ 20261125-0700: unreadable: links to" in md
    assert "- ⚠ 20261125-0800: unreadable: " in md and "not valid JSON" in md

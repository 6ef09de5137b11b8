"""Stop, resume, see: a real tiny study started the way the Reports tab starts one (detached, its own session) is
stopped by the tab's Stop with nothing left training (its process, its queue worker, every trainer gone; its runs
cancelled; its status 'cancelled'), resumed by Resume, and the app and the command line share one folder rule."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil
import pytest

from app import reports_tab
from backend.core import paths
from backend.core.errors import DetourError
from backend.engine import rundir
from backend.replication import study_run
from backend.runs import jobs
from tests.conftest import TINY_MODERNBERT, save_tiny_model


def _wait(what, timeout: float = 240.0, every: float = 0.5):
    t0 = time.time()
    while time.time() - t0 < timeout:
        got = what()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what.__doc__ or what}")


def _processes_of(out: Path) -> list[psutil.Process]:
    """Every live process whose command line names the study's folder (the study, its worker, its trainers)."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and str(out) in " ".join(p.info["cmdline"] or []):
                found.append(p)
        except psutil.Error:
            continue
    return found


def _runs(out: Path) -> list[Path]:
    return sorted((out / "sweep" / "runs").glob("c*"))


def _training(out: Path) -> list[Path]:
    """Runs whose trainer runs now."""
    return [r for r in _runs(out) if rundir.read_status(r).get("state") == "running"]


@pytest.mark.slow  # starts a study process, its queue worker and trainers, then stops and resumes it: about a minute
def test_a_study_started_in_the_app_stops_from_the_app_with_nothing_left_training(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.REPORTS_ENV, str(tmp_path / "reports"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    model = save_tiny_model(tmp_path / "tiny", TINY_MODERNBERT)
    out = study_run.study_folder("detour", "quick", "tiny-study")
    assert out == tmp_path / "reports" / "tiny-study"  # a plain name is a folder under the reports root
    sets = [
        "train.precision=fp32",
        "logging.log_every=10",
        "logging.checkpoint_every=20",
        "cka.n_texts=12",
        "finetune.max_train_examples=8",
        "finetune.max_eval_examples=8",
        "finetune.epochs=1",
        "finetune.max_len=32",
    ]
    argv = [
        "--model",
        str(model),
        "--corpus",
        str(paths.DEMO_CORPUS),
        "--suite",
        "configs/suites/demo.yaml",
        "--budgets",
        "64000",
        "--no-interventions",
        "--pretrain-seeds",
        "2",
        "--seeds",
        "1",
    ]  # 250 steps a run
    argv += [a for x in sets for a in ("--set", x)]
    study_run.start_detached(out, argv)  # what the tab's launch and Resume call
    _wait(lambda: _training(out), timeout=300)
    st = study_run.read_status(out)
    assert st["state"] == "running" and st["current_step"] == "train"
    assert reports_tab.controls("tiny-study") == (True, False)  # the tab shows Stop, not Resume

    msg = reports_tab.stop_study("tiny-study")  # the Stop button's handler
    assert msg.startswith("Stopping `tiny-study`: sent SIGTERM to the study's process")
    _wait(lambda: not _processes_of(out), timeout=120)  # the study, its queue worker and every trainer are gone
    assert jobs.worker_pid(out / "sweep" / "runs") is None
    states = {r.name: rundir.read_status(r)["state"] for r in _runs(out)}
    assert set(states.values()) <= {"cancelled", "done"} and "cancelled" in states.values()
    st = study_run.read_status(out)
    assert st["state"] == "cancelled" and "rerun the same command, or Resume in the Reports tab" in st["error"]
    assert "**tiny-study**: cancelled" in reports_tab.status_text("tiny-study")[0]
    assert reports_tab.controls("tiny-study") == (False, True)  # Resume offered, Stop no longer
    log = (out / study_run.LOG_NAME).read_text()
    assert "stopped (SIGTERM)" in log and "queued or running runs cancelled" in log

    assert "Resumed `tiny-study`" in reports_tab.resume_study("tiny-study")  # the Resume button's handler
    _wait(lambda: study_run.read_status(out).get("state") == "running" and _training(out), timeout=300)
    assert json.loads((out / "status.json").read_text())["resume_argv"][-2:] == ["--out", str(out)]
    reports_tab.stop_study("tiny-study")
    _wait(lambda: not _processes_of(out), timeout=120)
    assert study_run.read_status(out)["state"] == "cancelled"


def test_the_app_and_the_command_line_share_one_folder_rule(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.REPORTS_ENV, str(tmp_path / "reports"))
    assert study_run.study_folder("detour", "quick") == tmp_path / "reports" / "detour-quick"
    assert study_run.study_folder("hybrid-splits", "mini") == tmp_path / "reports" / "hybrid-mini"
    assert study_run.study_folder("detour", "quick", "mine") == tmp_path / "reports" / "mine"
    assert study_run.study_folder("detour", "quick", str(tmp_path / "x" / "y")) == tmp_path / "x" / "y"


def test_stop_on_a_study_that_is_not_running_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    from backend.__main__ import main

    monkeypatch.setenv(paths.REPORTS_ENV, str(tmp_path / "reports"))
    (tmp_path / "reports" / "done-study").mkdir(parents=True)
    (tmp_path / "reports" / "done-study" / "status.json").write_text(json.dumps({"state": "done"}))
    assert main(["replicate", "--stop", "--out", "done-study"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "done-study: not running (its state: done); nothing to stop" in err[0]


def test_stop_on_a_study_that_does_not_exist_says_there_is_none(tmp_path, monkeypatch, capsys):
    from backend.__main__ import main

    monkeypatch.setenv(paths.REPORTS_ENV, str(tmp_path / "reports"))
    assert main(["replicate", "--stop", "--out", "no-such-study"]) == 2
    err = capsys.readouterr().err.strip()
    reports = tmp_path / "reports"
    assert (
        err == f"error: no study in {reports / 'no-such-study'}: nothing to stop (a study's folder is under {reports})"
    )
    assert not (tmp_path / "reports" / "no-such-study").exists()


@pytest.mark.parametrize("status", ["[1]", '"running"', "12"])
def test_stop_on_a_status_json_that_is_not_a_mapping_says_so_in_the_app_and_the_cli(status, tmp_path, monkeypatch,
                                                                                    capsys):  # fmt: skip
    """Stop read a status.json that is valid JSON but not a mapping with ``.get``: a traceback in the Reports tab,
    whose Stop handler says DetourErrors only."""
    from backend.__main__ import main

    monkeypatch.setenv(paths.REPORTS_ENV, str(tmp_path / "reports"))
    (tmp_path / "reports" / "odd").mkdir(parents=True)
    (tmp_path / "reports" / "odd" / "status.json").write_text(status)
    with pytest.raises(DetourError, match="odd: not running .*nothing to stop"):
        reports_tab.stop_study("odd")
    assert main(["replicate", "--stop", "--out", "odd"]) == 2
    assert "nothing to stop" in capsys.readouterr().err
    assert (tmp_path / "reports" / "odd" / "status.json").read_text() == status  # nothing written over


def test_ctrl_c_in_a_running_study_cancels_its_queued_runs_and_says_so(tmp_path, tiny_modernbert_dir):
    """SIGINT (Ctrl-C) to the process running a study: its queued runs are cancelled (none is left for a worker to
    train), status.json says 'cancelled' with how to resume, and the signal handlers are put back."""
    import os
    import signal

    from backend.sweeps import sweep
    from backend.sweeps.manifest import write_manifest
    from tests.conftest import tiny_config_file

    out = tmp_path / "study"
    cfg = tiny_config_file(tmp_path / "c.yaml", tiny_modernbert_dir, "c")
    m = sweep.plan_sweep(cfg, grid=["recipe=mlm,clm_detour"], seeds=2)
    (out / "sweep").mkdir(parents=True)
    write_manifest(out / "sweep", {**m, "state": "running"})
    sweep._queue_missing(out / "sweep", m)  # four runs queued, no worker started
    assert set(sweep.cell_states(out / "sweep").values()) == {"queued"}
    before = signal.getsignal(signal.SIGINT)
    lines = []
    with pytest.raises(study_run.StudyStopped, match="SIGINT"):
        with study_run.running(out, "detour", ["train"], ["--out", str(out)], lines.append):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler raises here
    assert set(sweep.cell_states(out / "sweep").values()) == {"cancelled"}
    st = study_run.read_status(out)
    assert st["state"] == "cancelled" and "rerun the same command" in st["error"] and st["resume_argv"]
    assert any("4 queued or running runs cancelled" in ln for ln in lines)
    assert signal.getsignal(signal.SIGINT) is before and study_run.running_pid(out) is None

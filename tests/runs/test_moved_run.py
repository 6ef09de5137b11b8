"""A run folder renamed, moved or deleted under its running trainer (a user tidying the runs folder in a file
manager). The trainer used to recreate the old name and write on there out of sight, while the renamed folder read
``running``, then ``failed``, and a resume threw away every step trained since. It now follows a rename, stops with
a checkpoint where a folder moved out of its runs folder went, fails saying so when the folder is gone, and never
recreates the old name. A run that is not there is "no run named R", with the close names, everywhere."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend.__main__ import main
from backend.core.errors import DetourError
from backend.core.paths import REPO_ROOT
from backend.engine import checkpoint, rundir
from backend.runs import jobs
from backend.runs.train import prepare_runs, train_run
from conftest import tiny_train_cfg


def _wait(what, until, timeout=120.0):
    deadline = time.time() + timeout
    while not until():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _last_step(run: Path) -> int:
    rows = [r for r in rundir.read_metrics(run) if r.get("type") == "train"] if run.is_dir() else []
    return rows[-1]["step"] if rows else 0


# ------------------------------------------------------------------------------------------------ the folder itself


def test_run_home_follows_a_rename_says_a_move_out_and_never_finds_a_deleted_folder(tmp_path, monkeypatch):
    from backend.engine.run_home import RunFolderGone, RunHome

    runs = tmp_path / "runs"
    (runs / "R").mkdir(parents=True)
    home = RunHome(runs / "R")
    assert home.here() == runs / "R" and not home.left
    os.rename(runs / "R", runs / "R-moved")
    (runs / "R").mkdir()  # a new folder under the old name is not this run's
    assert home.here() == runs / "R-moved" and not home.left
    (home.anchor() / "written.txt").write_text("x")  # the anchor names the folder wherever it went
    assert (runs / "R-moved" / "written.txt").exists() and not (runs / "R" / "written.txt").exists()
    (tmp_path / "archive").mkdir()
    os.rename(runs / "R-moved", tmp_path / "archive" / "R")
    assert home.here() == tmp_path / "archive" / "R" and home.left
    assert "--run-dir " + str(tmp_path / "archive" / "R") in home.stop_reason()
    shutil.rmtree(tmp_path / "archive" / "R")
    with pytest.raises(RunFolderGone, match="deleted or moved to another disk"):
        home.here()
    home.close()
    # where the system has no /proc/self/fd: a rename beside the old name is still found, by its identity
    monkeypatch.setattr("backend.engine.run_home.PROC_FD", tmp_path / "no-proc")
    (runs / "S").mkdir()
    other = RunHome(runs / "S")
    os.rename(runs / "S", runs / "S-2")
    assert other.here() == runs / "S-2" and other.anchor() == runs / "S-2"
    other.close()


def test_a_status_write_to_a_folder_that_is_gone_recreates_nothing(isolated_runs_dir):
    (isolated_runs_dir / "R-moved").mkdir(parents=True)
    (isolated_runs_dir / "R-moved" / "config.yaml").write_text("name: R\n")
    with pytest.raises(DetourError, match=r"no run named R in .*did you mean: R-moved\?"):
        rundir.write_status(isolated_runs_dir / "R", state="running")
    assert not (isolated_runs_dir / "R").exists()


# ------------------------------------------------------------------------------------------------ under a trainer


@pytest.mark.slow
def test_a_run_renamed_while_it_trains_goes_on_in_its_new_folder_and_cancels_and_resumes_there(
    tiny_modernbert_dir, isolated_runs_dir, tmp_path
):
    sets = {"phases.main.steps": 30, "phases.decay.steps": 2, "logging.checkpoint_every": 5, "logging.eval_every": 100}
    cfg = tiny_train_cfg(tiny_modernbert_dir, "R", recipe="clm_detour", **sets)
    (run,) = prepare_runs(cfg)
    moved = run.with_name("R-moved")
    with open(tmp_path / "trainer.err", "w") as err_f:
        proc = subprocess.Popen([sys.executable, "-m", "backend", "train", "--run-dir", str(run)], cwd=REPO_ROOT,
                                stdout=subprocess.DEVNULL, stderr=err_f)  # fmt: skip
    try:
        _wait("step 2", lambda: _last_step(run) >= 2)
        os.rename(run, moved)  # as a file manager renames it
        at = _last_step(moved)
        _wait("steps in the renamed folder", lambda: _last_step(moved) >= at + 3 or proc.poll() is not None)
        assert not run.exists()  # the old name was never made again
        assert rundir.read_status(moved)["state"] == "running"  # the renamed run is the live one
        assert "sent SIGTERM" in jobs.cancel(moved)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = (tmp_path / "trainer.err").read_text()
    assert not run.exists(), err
    st = rundir.read_status(moved)
    assert st["state"] == "cancelled" and st["step"] > at, (st, err)
    found, state = checkpoint.latest_good(moved)
    assert state["step"] == st["step"]  # its last checkpoint is where the run is now
    assert f"moved from {run} to {moved}" in (moved / "train.log").read_text()
    assert train_run(moved, resume=True)["state"] == "done"  # from that checkpoint, in the renamed folder
    assert f"resume: from {found.name}" in (moved / "train.log").read_text()
    assert (moved / "final").is_dir() and not run.exists()


def _move_at_step(monkeypatch, step: int, act) -> None:
    """Call ``act()`` (a real rename or delete) right after the trainer logged ``step``."""
    import backend.detour.trainer as trainer

    real = trainer._log_train

    def log_then_act(s, phase, done, lr):
        real(s, phase, done, lr)
        if done == step:
            act()

    monkeypatch.setattr(trainer, "_log_train", log_then_act)


@pytest.mark.slow
def test_a_run_moved_out_of_its_runs_folder_stops_with_its_checkpoint_where_it_went(
    tiny_modernbert_dir, isolated_runs_dir, tmp_path, monkeypatch
):
    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "R", recipe="mlm", **{"logging.checkpoint_every": 100}))
    away = tmp_path / "archive" / "R"
    away.parent.mkdir()
    _move_at_step(monkeypatch, 3, lambda: os.rename(run, away))
    st = train_run(run)
    assert st["state"] == "cancelled" and "moved from" in st["error"] and f"--run-dir {away} --resume" in st["error"]
    assert not run.exists()
    assert rundir.read_status(away)["state"] == "cancelled"
    found, state = checkpoint.latest_good(away)
    assert state["step"] == rundir.read_status(away)["step"] >= 3  # a checkpoint at the step it stopped


@pytest.mark.slow
def test_a_run_folder_deleted_while_it_trains_fails_saying_so_and_is_not_recreated(
    tiny_modernbert_dir, isolated_runs_dir, monkeypatch
):
    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "R", recipe="mlm"))
    _move_at_step(monkeypatch, 2, lambda: shutil.rmtree(run))
    st = train_run(run)
    assert st["state"] == "failed" and "deleted or moved to another disk" in st["error"] and not st["bug"]
    assert not run.exists()


# ------------------------------------------------------------------------------------------------ "no run named R"


def test_a_missing_run_is_no_run_named_r_with_the_close_names_everywhere(
    detour_run_dir, isolated_runs_dir, capsys, monkeypatch
):
    import app as app_roots
    from app import analyze_tab, runs_tab

    shutil.copytree(detour_run_dir, isolated_runs_dir / "R-moved")  # R was renamed R-moved
    said = r"no run named R in .*did you mean: R-moved\b"
    for argv in (["doctor", "R"], ["train", "--run-dir", str(isolated_runs_dir / "R")],
                 ["cka", "--a", "R", "--b", "detour-tiny-en", "--weights-only"]):  # fmt: skip
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert re.search(said, err), (argv, err)
    for call in (lambda: jobs.cancel(isolated_runs_dir / "R"), lambda: jobs.resume(isolated_runs_dir / "R")):
        with pytest.raises(DetourError, match=said):
            call()
    for line in (runs_tab.cancel_run("R"), runs_tab.resume_run("R"), runs_tab.log_tail("R")):
        assert "no run named R" in line and "R-moved" in line, line
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline, a bare name read as a hub id to download
    for listed in (False, True):  # typed, and picked from a list read before the rename
        if listed:
            monkeypatch.setattr(app_roots, "_LISTED_RUNS", {"R"})
        fig, line = analyze_tab.compute_weight_change("R", "detour-tiny-en")
        assert fig is None and re.search(said, line) and "hf download" not in line, line
    assert not (isolated_runs_dir / "R").exists()


def test_resume_names_the_newest_checkpoint_that_passes_its_check(detour_run_dir, isolated_runs_dir, monkeypatch):
    run = isolated_runs_dir / "R"
    shutil.copytree(detour_run_dir, run)
    shutil.rmtree(run / "final")
    rundir.write_status(run, state="cancelled")
    newest = sorted((run / "checkpoints").glob("step-*"))[-1]
    weights = newest / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + b"damaged!")  # same size, altered bytes: sha256 fails
    monkeypatch.setattr(jobs, "ensure_worker", lambda *a, **k: None)  # the worker is tested in test_jobs.py
    msg = jobs.resume(run)
    found, state = checkpoint.latest_good(run)
    assert found != newest and f"from {found.name} (step {state['step']})" in msg
    assert "1 newer checkpoint(s) failed their check" in msg and newest.name in msg

"""The trainer with background checkpoints: a run reports its state only once its checkpoint is on disk, a failed
write fails the run, and checkpoints written synchronously (by earlier versions) resume and reproduce."""

from __future__ import annotations

import os
import signal
import threading
import time

from backend.engine import checkpoint
from backend.engine.rundir import read_status
from backend.runs.train import prepare_runs, train_run
from conftest import resume_from_first_checkpoint, tiny_train_cfg, train_rows


def _slow_writes(monkeypatch, seconds: float) -> None:
    """Each file the background writer saves takes ``seconds`` longer (a slow disk)."""
    import accelerate.utils

    real = accelerate.utils.save

    def slow(*a, **k):
        if threading.current_thread() is not threading.main_thread():
            time.sleep(seconds)
        return real(*a, **k)

    monkeypatch.setattr(accelerate.utils, "save", slow)


def test_checkpoints_written_synchronously_resume_and_reproduce(tiny_modernbert_dir, isolated_runs_dir, monkeypatch):
    """A run directory whose checkpoints were written the old way (synchronously) resumes under the new writer
    and reproduces the uninterrupted run's losses step for step."""
    monkeypatch.setattr(checkpoint, "BACKGROUND", False)
    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "old-ck", recipe="mlm"))
    assert train_run(run)["state"] == "done"
    want = train_rows(run)
    monkeypatch.setattr(checkpoint, "BACKGROUND", True)
    resume_from_first_checkpoint(run, want)
    for ck in sorted((run / "checkpoints").glob("step-*")):
        checkpoint.verify(ck)


def test_cancel_reports_only_once_its_checkpoint_is_on_disk(tiny_modernbert_dir, isolated_runs_dir, monkeypatch):
    import backend.detour.trainer as trainer

    _slow_writes(monkeypatch, 0.5)
    real, calls = trainer.evaluate, {"n": 0}

    def evaluate_then_sigterm(s):  # the app's Cancel arrives during the evaluation after step 4
        calls["n"] += 1
        if calls["n"] == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(s)

    monkeypatch.setattr(trainer, "evaluate", evaluate_then_sigterm)
    cfg = tiny_train_cfg(tiny_modernbert_dir, "cancel", recipe="mlm", **{"logging.checkpoint_every": 3})
    (run,) = prepare_runs(cfg)
    st = train_run(run)
    assert st["state"] == "cancelled" and read_status(run)["state"] == "cancelled"
    assert not [t for t in threading.enumerate() if t.name.startswith("checkpoint-")]  # no write left running
    checkpoint.verify(run / "checkpoints" / "step-00000004")  # the stop step's checkpoint, complete
    assert checkpoint.latest_good(run)[1]["step"] == 4
    assert train_run(run, resume=True)["state"] == "done"


def test_a_failed_checkpoint_write_fails_the_run_and_the_previous_one_resumes(
    tiny_modernbert_dir, isolated_runs_dir, monkeypatch
):
    real, calls = checkpoint.write_manifest, {"n": 0}

    def disk_full_once(ck):
        calls["n"] += 1
        if calls["n"] == 2:  # the step-8 checkpoint (end of main)
            raise OSError(28, "No space left on device")
        return real(ck)

    monkeypatch.setattr(checkpoint, "write_manifest", disk_full_once)
    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "full", recipe="mlm"))
    st = train_run(run)
    assert st["state"] == "failed" and "No space left on device" in read_status(run)["error"]
    assert read_status(run)["step"] == 8  # it stopped at the phase end, which waits for the write
    assert checkpoint.latest_good(run)[1]["step"] == 4
    assert train_run(run, resume=True)["state"] == "done"

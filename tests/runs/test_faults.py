"""Faults: a crash mid-checkpoint, an exception (or OOM) during training."""

from __future__ import annotations

import shutil

import pytest

from backend.engine.checkpoint import latest_good
from backend.engine.rundir import read_status
from backend.runs.train import prepare_runs, train_run
from conftest import tiny_train_cfg


def test_crash_while_writing_a_checkpoint_leaves_the_previous_one_loadable(tiny_modernbert_dir, isolated_runs_dir):
    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "crash", recipe="mlm"))
    train_run(run)
    cks = sorted((run / "checkpoints").glob("step-*"))
    newest = cks[-1]
    # A writer killed mid-way leaves a temp folder (never renamed into place) ...
    shutil.copytree(newest, run / "checkpoints" / ".tmp-step-00000099")
    (run / "checkpoints" / ".tmp-step-00000099" / "COMPLETE").unlink()
    # ... or, were the rename to happen without the seal, a step folder with no COMPLETE marker.
    (newest / "COMPLETE").unlink()
    msgs: list[str] = []
    ck, state = latest_good(run, log=msgs.append)
    assert ck == cks[-2] and state["step"] == int(cks[-2].name.split("-")[1])
    assert "incomplete" in msgs[0] and str(newest) in msgs[0]
    shutil.rmtree(run / "final")  # the crash came before the end: a finished run is never resumed
    assert train_run(run, resume=True)["state"] == "done"


@pytest.mark.parametrize("exc", [MemoryError("out of memory"), RuntimeError("CUDA out of memory. Tried to allocate")])
def test_exception_during_training_marks_the_run_failed_with_the_error(
    exc, tiny_modernbert_dir, isolated_runs_dir, monkeypatch
):
    import backend.detour.trainer as trainer

    calls = {"n": 0}
    real = trainer.evaluate

    def boom(*a, **k):
        calls["n"] += 1
        if calls["n"] > 1:  # after the step-0 evaluation: mid-run
            raise exc
        return real(*a, **k)

    monkeypatch.setattr(trainer, "evaluate", boom)
    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "oom", recipe="mlm"))
    st = train_run(run)
    assert st["state"] == "failed"
    assert read_status(run)["state"] == "failed"
    assert str(exc) in read_status(run)["error"] and type(exc).__name__ in read_status(run)["error"]
    assert "Traceback" in (run / "train.log").read_text()
    assert read_status(run)["resumable"] is True

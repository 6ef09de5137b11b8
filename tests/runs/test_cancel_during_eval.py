"""A cancel that arrives during the held-out evaluation stops it between batches (cancel is promised within
seconds; an evaluation can take minutes), and the resume makes up the evaluation it owes."""

from __future__ import annotations

import os
import signal

from backend.engine import checkpoint
from backend.engine.rundir import read_metrics, read_status
from backend.runs.train import prepare_runs, train_run
from conftest import tiny_train_cfg


def test_cancel_during_evaluation_stops_between_batches_and_the_resume_owes_it(
    tiny_modernbert_dir, isolated_runs_dir, monkeypatch
):
    import backend.detour.trainer as trainer

    real_eval, calls, held_batches = trainer.evaluate, {"n": 0}, []

    def evaluate_with_cancel(s):  # the app's Cancel arrives after the first held-out batch of step 4's evaluation
        calls["n"] += 1
        rows = s.held.rows

        def counted(idx):
            held_batches.append(calls["n"])
            if calls["n"] == 2 and held_batches.count(2) == 1:
                os.kill(os.getpid(), signal.SIGTERM)
            return rows(idx)

        s.held.rows = counted
        try:
            return real_eval(s)
        finally:
            s.held.rows = rows

    monkeypatch.setattr(trainer, "evaluate", evaluate_with_cancel)
    cfg = tiny_train_cfg(tiny_modernbert_dir, "evcancel", recipe="mlm", **{"logging.eval_batches": 4})
    (run,) = prepare_runs(cfg)
    assert train_run(run)["state"] == "cancelled"
    assert held_batches.count(2) == 1  # the evaluation stopped after the batch during which the cancel came
    assert [r["step"] for r in read_metrics(run) if r["type"] == "eval"] == [0]  # no half evaluation recorded
    ck, state = checkpoint.latest_good(run)
    assert state["step"] == 4 and state["eval_owed"] is True
    assert read_status(run)["step"] == 4  # the table's step is where the run stands
    monkeypatch.setattr(trainer, "evaluate", real_eval)
    assert train_run(run, resume=True)["state"] == "done"
    evals = [r["step"] for r in read_metrics(run) if r["type"] == "eval"]
    assert evals == [0, 4, 8, 12]  # the owed evaluation first, each step's once

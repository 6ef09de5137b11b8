"""A resumed run's status says where it stands: its checkpoint's step from the resume's first moment (not the step
last logged before the cancel), and a time that counts every process that trained it."""

from __future__ import annotations

import os
import signal

from backend.analysis import plots
from backend.engine.rundir import read_status, time_spent
from backend.runs.train import prepare_runs, train_run
from conftest import tiny_train_cfg


def test_resumed_run_shows_its_checkpoint_step_and_its_whole_time(tiny_modernbert_dir, isolated_runs_dir, monkeypatch):
    import backend.detour.trainer as trainer

    real_step, real_machine, seen = trainer._train_step, trainer._emit_machine, []

    def step_then_cancel(s, phase, step, *a):
        out = real_step(s, phase, step, *a)
        if step == 4 and not s.eval_owed and not seen:  # the Cancel comes during step 5 of the first process
            os.kill(os.getpid(), signal.SIGTERM)
        return out

    def machine(s):  # the resumed process's first moment: what the Runs table reads then
        seen.append(dict(read_status(s.run_dir)))
        return real_machine(s)

    monkeypatch.setattr(trainer, "_train_step", step_then_cancel)
    cfg = tiny_train_cfg(tiny_modernbert_dir, "res", recipe="mlm", **{"logging.log_every": 3})
    (run,) = prepare_runs(cfg)
    first = train_run(run)
    assert first["state"] == "cancelled" and read_status(run)["step"] == 3  # logged at 3, stopped (saved) at 5
    spent = time_spent(read_status(run))
    monkeypatch.setattr(trainer, "_emit_machine", machine)
    assert train_run(run, resume=True)["state"] == "done"
    assert seen[-1]["step"] == 5 and seen[-1]["total_steps"] == 12  # 5/12 from the start, not the old 3/12
    st = read_status(run)
    assert st["trained_before_s"] == spent > 0
    row = plots.run_summary("res", st)
    whole = st["trained_before_s"] + st["finished_at"] - st["started_at"]
    assert row["time"] == plots._fmt_duration(whole) and whole > st["finished_at"] - st["started_at"]

"""A queue worker killed with kill -9 at its worst moment -- its real trainer already started, its pid not yet
written down -- and a new worker under ``--max-concurrent 1``: the orphan is counted (it holds the run's lock from
birth), never started twice, and the next run starts only once the orphan is gone (issue 32)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from backend.core import process
from backend.engine import rundir
from backend.runs import jobs
from backend.runs.train import prepare_runs
from tests.conftest import tiny_train_cfg
from tests.runs.test_jobs import FAKE_TRAINER

WORKER = r"""
import os, signal, sys
sys.path.insert(0, os.environ["REPO"])
from pathlib import Path
from backend.runs import jobs
real = jobs.spawn_detached
def spawn_then_die(*args, **kwargs):  # kill -9 right after the trainer exists, before its pid is recorded
    proc = real(*args, **kwargs)
    with open(os.path.join(sys.argv[1], "orphan.pid"), "w") as f:
        f.write(str(proc.pid))
    os.kill(os.getpid(), signal.SIGKILL)
jobs.spawn_detached = spawn_then_die
jobs.run_worker(Path(sys.argv[1]), max_concurrent=1, poll_s=0.05)
"""


def test_a_worker_killed_before_recording_its_trainer_leaves_no_second_trainer(
    tmp_path, tiny_modernbert_dir, isolated_runs_dir, monkeypatch
):
    repo = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("REPO", str(repo))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    root = isolated_runs_dir
    small = {"recipe": "mlm", "phases.decay.steps": 1, "logging.eval_every": 100, "logging.checkpoint_every": 100}
    (a,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "a", **{**small, "phases.main.steps": 3}), root=root)
    time.sleep(0.01)
    (b,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "b", **{**small, "phases.main.steps": 2}), root=root)
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    first = subprocess.run([sys.executable, str(worker), str(root)], timeout=120, check=False)
    assert first.returncode == -9
    orphan = int((root / "orphan.pid").read_text())
    assert process.pid_alive(orphan), "the orphaned trainer should still be training"
    assert rundir.read_status(a).get("launched_pid") is None  # nothing recorded it: only the lock says it is ours

    fake = tmp_path / "fake_trainer.py"  # b only has to show when it started: a stand-in trainer, to stay fast
    fake.write_text(FAKE_TRAINER)
    launch = lambda d, resume: jobs.train_argv(d, resume) if d == a else [sys.executable, str(fake), str(d)]  # noqa: E731
    jobs.run_worker(root, max_concurrent=1, poll_s=0.1, launch=launch)  # a new worker; returns when the queue is empty
    deadline = time.time() + 120
    while process.pid_alive(orphan) and time.time() < deadline:
        time.sleep(0.1)
    sa, sb = rundir.read_status(a), rundir.read_status(b)
    log_a = (a / "train.log").read_text()
    assert "already being trained" not in log_a, "the new worker launched a second trainer for the orphan's run"
    assert log_a.count("] run a: ") == 2, log_a  # one trainer: its start and its end
    assert sa["state"] == "done" and sa["pid"] == orphan, sa
    assert sb["state"] == "done", sb
    assert sb["started_at"] >= sa["finished_at"], "two trainers at once under --max-concurrent 1"

"""Issue 24, defect 12: the README's ``accelerate launch`` command for N CPU processes really trains N processes.

``accelerate launch --cpu --num_processes 2`` started one process and said nothing; ``--multi_gpu`` on a CPU
started two that each trained alone on one run folder. The README now gives the command below; it is run here
as written, and train.log says the world size and the tokens per step per process count."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from backend.core.paths import REPO_ROOT
from backend.engine.rundir import read_metrics, read_status
from backend.runs.train import prepare_runs
from conftest import tiny_train_cfg

STEPS = {"phases.main.steps": 2, "phases.decay.steps": 1, "logging.checkpoint_every": 3}


def _accelerate(*flags: str, run) -> subprocess.CompletedProcess:
    exe = shutil.which("accelerate")
    if exe is None:
        pytest.skip("the accelerate command is not installed")
    env = {k: v for k, v in os.environ.items() if k != "ACCELERATE_USE_CPU"}  # as a user's shell has it
    env["OMP_NUM_THREADS"] = "1"
    argv = [exe, "launch", *flags, "-m", "backend", "train", "--run-dir", str(run)]
    return subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_readmes_multi_process_cpu_command_trains_two_processes(tiny_modernbert_dir, isolated_runs_dir):
    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "ddp2", recipe="mlm", **STEPS))
    readme = (REPO_ROOT / "README.md").read_text()
    assert "accelerate launch --multi_gpu --num_processes 2 -m backend train" in readme
    proc = _accelerate("--multi_gpu", "--num_processes", "2", "--main_process_port", "29531", run=run)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert read_status(run)["state"] == "done"
    log = (run / "train.log").read_text()
    assert "processes: world size 2 (DDP, gloo); tokens/step 512 = 2 x 256 per process" in log, log
    rows = [r for r in read_metrics(run) if r["type"] == "train"]
    assert rows[-1]["step"] == 3 and rows[-1]["tokens_seen"] == 3 * 2 * 4 * 64
    assert len([r for r in rows if r["step"] == 3]) == 1  # one group: only rank 0 writes


@pytest.mark.slow
def test_cpu_flag_with_several_processes_is_refused_naming_the_command_that_works(
    tiny_modernbert_dir, isolated_runs_dir
):
    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "cpu2", recipe="mlm", **STEPS))
    proc = _accelerate("--cpu", "--num_processes", "2", run=run)
    assert proc.returncode != 0
    assert "accelerate launch --multi_gpu --num_processes 2 -m backend train" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr.split("accelerate launch --multi_gpu")[0][-500:]
    assert read_status(run)["state"] == "queued" and not (run / "checkpoints").exists()


def test_one_process_says_so_in_train_log(tiny_modernbert_dir, isolated_runs_dir, one_torch_thread):
    from backend.runs.train import train_run

    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "one", recipe="mlm", **STEPS))
    assert train_run(run)["state"] == "done"
    assert (
        "processes: world size 1 (one process); tokens/step 256 = 1 x 256 per process"
        in (run / "train.log").read_text()
    )

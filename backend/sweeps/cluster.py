"""Cells as cluster jobs through submitit: ``executor: slurm`` (one Slurm job per run, at most ``max_concurrent``
at once through the job array's parallelism) or ``executor: local`` (submitit's LocalExecutor: the same path on
this machine, what the tests drive). Each job trains one prepared run directory with ``python -m backend train
--run-dir DIR`` (``accelerate launch --num_processes G`` for a multi-GPU cell), so a job killed by the cluster
leaves a run that resumes from its last checkpoint like any other. Job ids are kept in ``submitit.json``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from backend.core import atomic
from backend.core.paths import REPO_ROOT
from backend.core.process import pid_alive
from backend.engine import rundir

JOBS_FILE = "submitit.json"


def train_command(run_dir: str | Path, resume: bool, gpus_per_cell: int = 1) -> list[str]:
    """The trainer's argv for one cell: plain python, or ``accelerate launch`` over the job's GPUs."""
    tail = ["train", "--run-dir", str(run_dir), *(["--resume"] if resume else [])]
    if gpus_per_cell > 1:
        return ["accelerate", "launch", "--num_processes", str(gpus_per_cell), "-m", "backend", *tail]
    return [sys.executable, "-m", "backend", *tail]


def train_cell(run_dir: str, gpus_per_cell: int = 1) -> str:
    """What a submitit job runs: train the run (resuming if asked), log to its train.log, return its final state.
    A trainer that exits without writing a final state is marked failed, as the queue worker does."""
    d = Path(run_dir)
    st = rundir.read_status(d)
    argv = train_command(d, bool(st.get("resume_requested")), gpus_per_cell)
    with open(d / "train.log", "ab") as log:
        proc = subprocess.run(argv, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, check=False)
    st = rundir.read_status(d)
    if st.get("state") in ("queued", "running"):
        rundir.write_status(d, state="failed", error=f"the trainer exited with code {proc.returncode}; see train.log")
    return rundir.read_status(d).get("state", "failed")


def _executor(out: Path, m: dict):
    import submitit

    folder = out / "submitit"
    sl = m.get("slurm") or {}
    gpus = int(sl.get("gpus_per_cell") or 0)
    if m["executor"] == "local":
        ex = submitit.LocalExecutor(folder=folder)
        ex.update_parameters(timeout_min=int(sl.get("timeout_min") or 60), gpus_per_node=gpus)
        return ex
    ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
    params = {
        "timeout_min": int(sl.get("timeout_min") or 24 * 60),
        "slurm_array_parallelism": m["max_concurrent"],
        "gpus_per_node": gpus,
        "cpus_per_task": int(sl.get("cpus_per_task") or 8),
        "name": f"sweep-{m['name']}",
    }
    if sl.get("partition"):
        params["slurm_partition"] = sl["partition"]
    ex.update_parameters(**params)
    return ex


def _read_jobs(out: Path) -> dict:
    p = out / JOBS_FILE
    return atomic.read_json(p) if p.exists() else {}


def submit_runs(out: Path, m: dict, run_dirs: list[Path]) -> list[str]:
    """One submitit job per prepared run (a Slurm array when there are several); returns the job ids."""
    if not run_dirs:
        return []
    ex = _executor(out, m)
    gpus = int((m.get("slurm") or {}).get("gpus_per_cell") or 1)
    with ex.batch():
        jobs = [ex.submit(train_cell, str(d), gpus) for d in run_dirs]
    ids = _read_jobs(out)
    for d, j in zip(run_dirs, jobs, strict=True):
        ids[d.name] = {"job_id": str(j.job_id), "executor": m["executor"]}
        rundir.write_status(d, submitit_job=str(j.job_id))
    atomic.write_json(out / JOBS_FILE, ids)
    return [str(j.job_id) for j in jobs]


def job_alive(out: Path, run: str) -> bool:
    """Whether the run's submitit job may still train it (a local job is a process; a Slurm job asks squeue)."""
    rec = _read_jobs(out).get(run)
    if not rec:
        return False
    if rec["executor"] == "local":
        return pid_alive(int(rec["job_id"]))
    import submitit

    return submitit.SlurmJob(out / "submitit", rec["job_id"]).state in ("PENDING", "RUNNING", "REQUEUED")


def cancel_jobs(out: Path) -> list[str]:
    """Cancel the Slurm jobs still pending (running trainers are stopped through their run, which checkpoints)."""
    msgs = []
    for run, rec in _read_jobs(out).items():
        if rec["executor"] == "slurm" and job_alive(out, run):
            import submitit

            submitit.SlurmJob(out / "submitit", rec["job_id"]).cancel(check=False)
            msgs.append(f"{run}: cancelled Slurm job {rec['job_id']}")
    return msgs

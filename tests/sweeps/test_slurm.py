"""Sweeps and single runs on a real Slurm cluster (one node, 2 CPUs: the ``slurm_cluster`` fixture): every cell an
sbatch job through submitit, a job array throttled to ``--max-concurrent``, states from Slurm, ``--cancel`` as
scancel, a resume that submits nothing finished; and preemption: a run stopped by its time limit's signal and by
``scontrol requeue`` ends with the uninterrupted run's weights (sha256) and no step logged twice."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from backend.core.paths import REPO_ROOT
from backend.engine.rundir import read_metrics, read_status
from backend.sweeps import sweep

# one xdist worker runs them all (a module is one unit under ``--dist loadscope``, a group under ``loadgroup``), on
# the one cluster its session starts: two workers would each start a cluster of 2 CPUs on the same 2 cores
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


def _config(tmp_path: Path, model_dir: Path, **train) -> Path:
    cfg = {
        "name": "sl",
        "model": {"name": str(model_dir)},
        "data": {"corpus": "demo", "heldout_fraction": 0.1},
        "train": {"seq_len": 64, "batch_size": 4, "lr": 1e-3, "precision": "fp32", **train},
        "recipe": "clm_detour",
        "phases": {"main": {"tokens": 256}, "decay": {"steps": 1}},
        "logging": {"log_every": 1, "eval_every": 4, "eval_batches": 1, "checkpoint_every": 1},
        "slurm": {"cpus_per_task": 1, "time_min": 10},
    }
    p = tmp_path / "tiny.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "backend", *args], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


def _poll(what, timeout_s: float = 180, every: float = 0.3):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if got := what():
            return got
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what.__doc__ or what}")


def test_a_sweep_is_a_throttled_slurm_job_array_cancelled_by_scancel_and_resumed_without_resubmitting(
    slurm_cluster, tmp_path, tiny_modernbert_dir
):
    """Two cells, --max-concurrent 1: the second waits for the first (the array's %1 throttle, as Slurm says);
    --cancel while it trains is scancel (it checkpoints); --resume submits it alone and it ends done. The second
    cell's trainer is frozen (SIGSTOP) once it has trained a step, so the cancel finds it mid-run however fast the
    machine; scancel's SIGCONT and SIGTERM reach it."""
    out = tmp_path / "sw"
    cfg = _config(tmp_path, tiny_modernbert_dir)
    r = _cli("sweep", str(cfg), "--grid", "recipe=mlm,clm_detour", "--executor", "slurm", "--max-concurrent", "1",
             "--out", str(out), "--set", "phases.main.tokens=3072", "--set", "logging.checkpoint_every=2")  # fmt: skip
    assert r.returncode == 0, r.stderr
    ids = json.loads((out / "submitit.json").read_text())
    first, second = (f"{c}-s0" for c in ("c00-recipemlm", "c01-recipeclm_detour"))
    assert ids[first]["job_id"].endswith("_0") and ids[second]["job_id"] == ids[first]["job_id"][:-1] + "1"
    script = next((out / "submitit").glob("*submission.sh")).read_text()
    assert "#SBATCH --array=0-1%1" in script and "#SBATCH --requeue" in script and "--cpus-per-task=1" in script

    seen: list[dict] = []  # every (state, reason) of the Slurm jobs the sweep's status showed, as it went

    def second_trains():
        """the second cell training"""
        st = sweep.sweep_status(out)
        seen.append({run: (j["state"], j["reason"]) for run, j in st["jobs"].items()})
        return st["run_states"][second] == "running" and _train_steps(out / "runs" / second)

    _poll(second_trains, 300, 0.2)
    os.kill(read_status(out / "runs" / second)["pid"], signal.SIGSTOP)
    assert all(sum(s == "RUNNING" for s, _ in snap.values()) <= 1 for snap in seen)  # never two at once
    assert ("PENDING", "JobArrayTaskLimit") in [snap[second] for snap in seen]  # held back by the throttle
    assert ("RUNNING", "None") in [snap[first] for snap in seen]
    status = _cli("sweep", "--status", str(out)).stdout
    assert f"s0:running [slurm {ids[second]['job_id']} running]" in status, status

    msgs = sweep.cancel(out)  # what `sweep --cancel DIR` prints
    assert f"{second}: cancelled Slurm job {ids[second]['job_id']} (scancel)" in msgs, msgs
    st = sweep.wait(out, poll_s=0.3, timeout_s=120)
    assert st["run_states"] == {first: "done", second: "cancelled"}
    assert [st["jobs"][run]["shown"] for run in (first, second)] == ["completed", "cancelled"]
    assert "stopped by SIGTERM" in read_status(out / "runs" / second)["error"]  # scancel's signal: it checkpointed
    stopped_at = max(_train_steps(out / "runs" / second))

    r = _cli("sweep", "--resume", str(out), "--wait")
    assert r.returncode == 0, r.stdout + r.stderr
    again = json.loads((out / "submitit.json").read_text())
    assert again[first] == ids[first] and again[second] != ids[second]  # only the unfinished cell went again
    assert set(sweep.cell_states(out).values()) == {"done"}
    steps = _train_steps(out / "runs" / second)
    assert steps == sorted(set(steps)) == list(range(1, max(steps) + 1)) and max(steps) > stopped_at
    assert "resume: from step-" in (out / "runs" / second / "train.log").read_text()
    assert (out / "report.md").exists()


# ------------------------------------------------------------------------------------------------ preemption


def _weights_sha(run: Path) -> str:
    return hashlib.sha256((run / "final" / "model.safetensors").read_bytes()).hexdigest()


def _train_steps(run: Path) -> list[int]:
    return [r["step"] for r in read_metrics(run) if r["type"] == "train"]


def _job(cluster, job_id: str) -> dict:
    """``scontrol show job`` as a dict (JobState, Reason, Restarts, TimeLimit, ...)."""
    text = cluster.run("scontrol", "show", "job", "-o", job_id).stdout
    return dict(kv.split("=", 1) for kv in text.split() if "=" in kv)


def _minutes_run(run_time: str) -> int:
    """Whole minutes in a ``scontrol show job`` RunTime: ``[D-]HH:MM:SS``."""
    days, _, hms = run_time.rpartition("-")
    h, m, _s = (int(x) for x in hms.split(":"))
    return (int(days or 0) * 24 + h) * 60 + m


def _start_now(cluster, job_id: str) -> None:
    """Slurm holds a requeued batch job 120 s before it may start again (its fixed requeue delay; BeginTime):
    start it in 5 s instead, as an admin can, with a fresh 10-minute limit. (Not at once: slurmd refuses to launch
    a job within the second its credential was revoked by the kill, "Job N already killed, do not launch".)"""
    job = _job(cluster, job_id)
    if job.get("JobState") != "PENDING" or job.get("Reason") != "BeginTime":
        return
    try:
        begin = time.mktime(time.strptime(job.get("StartTime", ""), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:  # "Unknown" while Slurm sets it
        return
    if begin - time.time() > 10:  # still Slurm's 120 s, not ours
        cluster.run("scontrol", "update", f"JobId={job_id}", "StartTime=now+5", "TimeLimit=10", check=True)


def _until(cluster, job_id: str, what, timeout_s: float = 240):
    """Poll ``what`` while starting the job at once whenever Slurm holds it after a requeue."""

    def step():
        _start_now(cluster, job_id)
        return what()

    step.__doc__ = what.__doc__
    return _poll(step, timeout_s, 0.5)


def _trainer_pid(run: Path, after: int = 0) -> int:
    st = read_status(run)
    return st["pid"] if st.get("state") == "running" and st.get("pid") and st["pid"] != after else 0


def test_a_run_stopped_by_its_time_limit_and_by_scontrol_requeue_ends_with_the_uninterrupted_weights(
    slurm_cluster, tmp_path, tiny_modernbert_dir, isolated_runs_dir
):
    """``train --executor slurm``. Once it trains, the job's limit is cut to end within 2 minutes, so Slurm's
    --signal=USR2@120 is due: the trainer checkpoints, submitit requeues the job, the run resumes. Then ``scontrol
    requeue`` (what a preempting partition does): SIGTERM, a checkpoint, the run resumes again. Its final weights are
    those of the same run trained here without a stop, and no step is logged twice.

    Slurm looks at time limits every 30 s (a constant in slurmctld 22.05, PERIODIC_TIMEOUT, not a slurm.conf
    setting), so the trainer is frozen (SIGSTOP) mid-run until the signal has come:
    a tiny run would otherwise finish first. Slurm's own SIGCONT (or the test's) lets it go on."""
    sets = ["--set", "train.seq_len=32", "--set", "train.batch_size=2", "--set", "phases.main.steps=30",
            "--set", "phases.decay.steps=6", "--set", "logging.checkpoint_every=5", "--set", "logging.eval_every=50",
            "--set", "slurm.cpus_per_task=1", "--set", "slurm.time_min=10"]  # fmt: skip
    cfg = _config(tmp_path, tiny_modernbert_dir)
    ref = subprocess.Popen([sys.executable, "-m", "backend", "train", str(cfg), "--name", "ref", *sets],
                           cwd=REPO_ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"},
                           stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)  # fmt: skip
    r = _cli("train", str(cfg), "--name", "pre", "--executor", "slurm", *sets)
    assert r.returncode == 0 and "Slurm job" in r.stdout, r.stdout + r.stderr
    run = isolated_runs_dir / "pre"
    job = read_status(run)["submitit_job"]
    script = next((run / "submitit").glob("*submission.sh")).read_text()
    assert "#SBATCH --signal=USR2@120" in script and "#SBATCH --requeue" in script and "#SBATCH --time=10" in script

    def submitit_log() -> str:
        return "".join(p.read_text() for p in (run / "submitit").glob("*_log.out"))

    # 1. the time limit: 2 minutes more than the whole minutes the job has run puts its end 60-120 s away: within
    # the 120-s warning, so Slurm signals it at its next look (every 30 s), and beyond that look, so the limit itself
    # cannot kill it first (a flat 2 minutes did, wherever the job had taken over 90 s to train its 3 steps)
    _poll(lambda: len(_train_steps(run)) >= 3, 240)
    pid = _poll(lambda: _trainer_pid(run))
    os.kill(pid, signal.SIGSTOP)
    limit = _minutes_run(_job(slurm_cluster, job)["RunTime"]) + 2
    slurm_cluster.run("scontrol", "update", f"JobId={job}", f"TimeLimit={limit}", check=True)
    _poll(lambda: "Caught signal SIGUSR2" in submitit_log(), 90)
    os.kill(pid, signal.SIGCONT)
    # submitit's `scontrol requeue` may itself be killed by the requeue it asked for: Slurm's count is the record
    _until(slurm_cluster, job, lambda: int(_job(slurm_cluster, job).get("Restarts", 0)) >= 1, 120)
    log = (run / "train.log").read_text()
    assert "stopping at step" in log and "Calling checkpoint method" in submitit_log()
    first_stop = int(log.split("stopping at step ")[1].split(":")[0])
    assert 3 <= first_stop < 36

    # 2. a preemption: scontrol requeue once it trains again
    pid = _until(slurm_cluster, job, lambda: _train_steps(run)[-1] > first_stop and _trainer_pid(run, after=pid))
    os.kill(pid, signal.SIGSTOP)  # Slurm's SIGCONT, then its SIGTERM, reach it
    slurm_cluster.run("scontrol", "requeue", job, check=True)
    _until(
        slurm_cluster,
        job,
        lambda: read_status(run).get("state") == "done" and _job(slurm_cluster, job).get("JobState") == "COMPLETED",
    )

    assert ref.wait(timeout=300) == 0
    log = (run / "train.log").read_text()
    assert log.count("resume: from step-") == 2 and "stopped by SIGTERM" in log
    assert int(_job(slurm_cluster, job)["Restarts"]) >= 2
    steps = _train_steps(run)
    assert steps == _train_steps(isolated_runs_dir / "ref") == list(range(1, 37))  # none twice, none missing
    assert _weights_sha(run) == _weights_sha(isolated_runs_dir / "ref")


def test_the_launch_tabs_slurm_target_submits_the_form_as_a_job_and_a_refusal_is_one_line(
    slurm_cluster, tiny_modernbert_dir, isolated_runs_dir, monkeypatch
):
    from app import launch_tab
    from backend.engine.config import default_config

    monkeypatch.setenv("DETOUR_ALLOWED_ROOTS", str(tiny_modernbert_dir))

    cfg = default_config()
    cfg.update(name="ui", recipe="mlm")
    cfg["model"]["name"] = str(tiny_modernbert_dir)
    cfg["slurm"].update(cpus_per_task=1, partition="debug", sbatch="--comment=detour")
    res = launch_tab.launch(launch_tab.config_to_values(cfg), target="Slurm cluster (sbatch)")
    assert res["ok"] and "✓ queued ui (Slurm job " in res["message"], res["message"]
    job = read_status(isolated_runs_dir / "ui")["submitit_job"]
    assert _job(slurm_cluster, job)["Partition"] == "debug" and _job(slurm_cluster, job)["Comment"] == "detour"
    slurm_cluster.run("scancel", job, check=True)

    cfg.update(name="ui2")
    cfg["slurm"]["partition"] = "nosuch"
    res = launch_tab.launch(launch_tab.config_to_values(cfg), target="Slurm cluster (sbatch)")
    assert not res["ok"] and "sbatch refused the job" in res["message"] and "\n" not in res["message"].strip()
    assert "invalid partition" in res["message"].lower(), res["message"]
    assert read_status(isolated_runs_dir / "ui2")["state"] == "failed"
    slurm_cluster.wait_idle()

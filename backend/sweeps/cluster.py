"""Runs as cluster jobs through submitit: ``executor: slurm`` (one ``sbatch`` job per run: a job array throttled to
``max_concurrent`` with ``%K``) or ``executor: local`` (submitit's LocalExecutor: the same path on one machine).
Each job trains one prepared run directory with ``python -m backend train --run-dir DIR [--resume]`` (``accelerate
launch --num_processes G`` for a multi-GPU cell), so a job the cluster stops leaves a run that resumes from its
last good checkpoint like any other. Job ids are kept in ``submitit.json`` (a sweep) and in each run's status.

Preemption and time limits (``TrainCell``): Slurm signals the job's processes ``--signal=USR2@S`` seconds before
its time limit; the trainer stops at the next step boundary with a checkpoint, and submitit's handler in the job
calls ``TrainCell.checkpoint`` (which waits for that checkpoint) and requeues the job with ``scontrol requeue``. A
job requeued from outside (``scontrol requeue``, a preempting partition) gets SIGTERM instead: the trainer
checkpoints the same way and Slurm requeues it. Either way the job starts again and the run resumes from its last
good checkpoint: the same weights as an uninterrupted run, no step logged twice.

Where the states come from: Slurm itself. ``squeue`` for every job it still knows (live ones, and finished ones for
``MinJobAge`` seconds), ``sacct`` where the cluster keeps accounting, and past both the run's own status.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from backend.core import atomic
from backend.core.errors import ConfigError, DetourError
from backend.core.paths import REPO_ROOT
from backend.core.process import pid_alive
from backend.engine import rundir

JOBS_FILE = "submitit.json"
# Slurm states in which a job may still train its run (``squeue --states`` names them long-hand)
ALIVE = ("PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "COMPLETING", "SUSPENDED",
         "RESIZING", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD")  # fmt: skip
WAITING = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "SUSPENDED", "RESV_DEL_HOLD")
# what a user reads: pending / running / completed / failed / cancelled (and Slurm's own word for the rest)
SHOWN = {"PENDING": "pending", "REQUEUED": "pending", "REQUEUE_HOLD": "pending", "CONFIGURING": "pending",
         "RUNNING": "running", "COMPLETING": "running", "COMPLETED": "completed", "CANCELLED": "cancelled",
         "FAILED": "failed", "TIMEOUT": "failed (time limit)", "NODE_FAIL": "failed (node)", "OUT_OF_MEMORY":
         "failed (out of memory)", "BOOT_FAIL": "failed (boot)", "DEADLINE": "failed (deadline)",
         "PREEMPTED": "preempted"}  # fmt: skip
SLURM_KEYS = ("partition", "time_min", "cpus_per_task", "gpus_per_task", "account", "sbatch", "signal_delay_s")


# ------------------------------------------------------------------------------------------------ the settings


def slurm_settings(sl: dict | None) -> dict:
    """The Slurm settings of a run or sweep, checked: partition, time_min (the time limit), cpus_per_task,
    gpus_per_task (>1: accelerate launch inside the job), account, sbatch (extra ``#SBATCH`` lines, each
    ``--key=value`` or ``--flag``) and signal_delay_s (when, before the limit, the job is told to checkpoint).
    Old sweeps wrote ``timeout_min`` and ``gpus_per_cell``: read as the new keys."""
    sl = dict(sl or {})
    if "timeout_min" in sl:
        sl["time_min"] = sl.pop("timeout_min") or sl.get("time_min")
    if "gpus_per_cell" in sl:
        sl["gpus_per_task"] = sl.pop("gpus_per_cell") or sl.get("gpus_per_task")
    if unknown := [k for k in sl if k not in SLURM_KEYS]:
        raise ConfigError(f"slurm.{unknown[0]}", sl[unknown[0]], f"unknown key; allowed: {', '.join(SLURM_KEYS)}")
    out = {
        "partition": str(sl["partition"]) if sl.get("partition") else None,
        "time_min": _positive(sl, "time_min", 24 * 60),
        "cpus_per_task": _positive(sl, "cpus_per_task", 8),
        "gpus_per_task": _positive(sl, "gpus_per_task", 0, zero=True),
        "account": str(sl["account"]) if sl.get("account") else None,
        "sbatch": sbatch_lines(sl.get("sbatch")),
        "signal_delay_s": _positive(sl, "signal_delay_s", 120),
    }
    return out


def _positive(sl: dict, key: str, default: int, zero: bool = False) -> int:
    v = sl.get(key)
    if v in (None, ""):
        return default
    try:
        n = int(v)
    except (TypeError, ValueError):
        raise ConfigError(f"slurm.{key}", v, "a whole number") from None
    if n < (0 if zero else 1):
        raise ConfigError(f"slurm.{key}", v, f"at least {0 if zero else 1}")
    return n


def sbatch_lines(raw) -> list[str]:
    """Extra ``#SBATCH`` options, space-separated or a list: ``--qos=high #SBATCH --constraint=a100 --exclusive``.
    Anything else is refused, naming it (it would be a broken batch script)."""
    items = str(raw).split() if isinstance(raw, str) else [str(x).strip() for x in raw or []]
    out = []
    for item in items:
        line = item.removeprefix("#SBATCH").strip()
        if not line:
            continue
        if not line.startswith("--") or " " in line:
            raise ConfigError("slurm.sbatch", item, "each extra option is one long option: --key=value or --flag")
        out.append(line)
    return out


def _additional(lines: list[str]) -> dict:
    """``--key=value`` lines as submitit's ``slurm_additional_parameters`` (``--flag`` -> ``{flag: True}``)."""
    out: dict = {}
    for line in lines:
        key, _, value = line[2:].partition("=")
        out[key.replace("-", "_")] = value if value else True
    return out


# ------------------------------------------------------------------------------------------------ the job


def train_command(run_dir: str | Path, resume: bool, gpus_per_cell: int = 1) -> list[str]:
    """The trainer's argv for one cell: plain python, or ``accelerate launch`` over the job's GPUs."""
    tail = ["train", "--run-dir", str(run_dir), *(["--resume"] if resume else [])]
    if gpus_per_cell > 1:
        return ["accelerate", "launch", "--num_processes", str(gpus_per_cell), "-m", "backend", *tail]
    return [sys.executable, "-m", "backend", *tail]


def _should_resume(d: Path, st: dict) -> bool:
    """A job starting (again) on a run that has trained resumes it: after a requeue, a time limit, a cancel."""
    return bool(st.get("resume_requested")) or rundir.trained_so_far(d) is not None


class TrainCell:
    """What a submitit job runs: train the run (resuming where it has trained), log to its train.log, return its
    final state. submitit calls ``checkpoint`` on the job's time-limit signal: the trainer (signalled too) writes
    its checkpoint, and the job is requeued with the same call, which resumes the run."""

    def __init__(self):
        self._proc: subprocess.Popen | None = None

    def __getstate__(self):  # pickled into the job (and again at a requeue): never the live process
        return {}

    def __setstate__(self, state):
        self._proc = None

    def __call__(self, run_dir: str, gpus_per_cell: int = 1) -> str:
        d = Path(run_dir)
        st = rundir.read_status(d)
        if st.get("state") == "done" and (d / "final").exists():  # requeued after it finished: nothing to train
            return "done"
        argv = train_command(d, _should_resume(d, st), gpus_per_cell)
        env = {"DETOUR_STDOUT_IS_LOG": "1"}
        with open(d / "train.log", "ab") as log:
            self._proc = subprocess.Popen(
                argv, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, env={**_environ(), **env}
            )
            # polled, not Popen.wait(): submitit's signal handler runs in this thread and must look at the process
            # without the wait lock a blocked wait() would hold
            while (code := self._proc.poll()) is None:
                time.sleep(0.2)
        st = rundir.read_status(d)
        if st.get("state") in ("queued", "running"):
            rundir.write_status(d, state="failed", error=f"the trainer exited with code {code}; see train.log")
        return rundir.read_status(d).get("state", "failed")

    def checkpoint(self, run_dir: str, gpus_per_cell: int = 1):
        """submitit's time-limit (or preemption) hook: make sure the trainer stops with a checkpoint, wait for it,
        and hand back the same call for the requeued job."""
        from submitit.helpers import DelayedSubmission

        proc = self._proc
        if proc is not None and _running(proc.pid):
            try:
                os.kill(proc.pid, signal.SIGUSR2)  # Slurm may have signalled only this process (--signal=B:...)
            except ProcessLookupError:
                pass
            deadline = time.time() + 600
            while _running(proc.pid) and time.time() < deadline:
                time.sleep(0.2)
        d = Path(run_dir)
        if rundir.read_status(d).get("state") == "cancelled":  # it stopped with a checkpoint: it goes on, not off
            rundir.write_status(d, state="queued", resume_requested=True, error=None, queued_at=rundir.now(),
                                requeued="by submitit after Slurm's time-limit signal")  # fmt: skip
        return DelayedSubmission(TrainCell(), run_dir, gpus_per_cell)


def _running(pid: int) -> bool:
    """Whether ``pid`` is alive and not a zombie, read from /proc (no Popen call: see ``TrainCell.__call__``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _environ() -> dict:
    return dict(os.environ)


def train_cell(run_dir: str, gpus_per_cell: int = 1) -> str:
    """One run trained in this process's job (kept for callers of the old name)."""
    return TrainCell()(run_dir, gpus_per_cell)


# ------------------------------------------------------------------------------------------------ submitting


def make_executor(folder: Path, executor: str, sl: dict, name: str, max_concurrent: int = 1):
    """A submitit executor for ``executor`` (``slurm`` or ``local``) with the Slurm settings ``sl``."""
    import submitit

    sl = slurm_settings(sl)
    if executor == "local":
        ex = submitit.LocalExecutor(folder=folder)
        ex.update_parameters(timeout_min=sl["time_min"], gpus_per_node=sl["gpus_per_task"])
        return ex
    ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=100)
    params = {
        "time": sl["time_min"],
        "array_parallelism": max_concurrent,
        "cpus_per_task": sl["cpus_per_task"],
        "job_name": name,
        "signal_delay_s": sl["signal_delay_s"],
        "additional_parameters": {"requeue": True, **_additional(sl["sbatch"])},
    }
    if sl["gpus_per_task"]:
        params["gpus_per_node"] = sl["gpus_per_task"]
    if sl["partition"]:
        params["partition"] = sl["partition"]
    if sl["account"]:
        params["account"] = sl["account"]
    ex.update_parameters(**params)
    return ex


def _read_jobs(out: Path) -> dict:
    p = out / JOBS_FILE
    return atomic.read_json(p) if p.exists() else {}


def submit_runs(out: Path, m: dict, run_dirs: list[Path]) -> list[str]:
    """One submitit job per prepared run (a Slurm job array throttled to ``max_concurrent`` when there are several);
    returns the job ids."""
    if not run_dirs:
        return []
    sl = slurm_settings(m.get("slurm"))
    if m["executor"] == "slurm":
        check_sbatch()
    gpus = max(1, sl["gpus_per_task"])
    said: list[str] = []
    try:
        with _sbatch_stderr(said):
            ex = make_executor(out / "submitit", m["executor"], sl, f"sweep-{m['name']}", m["max_concurrent"])
            with ex.batch():
                jobs = [ex.submit(TrainCell(), str(d), gpus) for d in run_dirs]
    except SUBMIT_ERRORS as exc:  # nothing was submitted: the runs say so, and --resume / --cancel take them
        text = str(exc) if "error" in str(exc) or not said[0].strip() else said[0]
        why = " ".join(text.split())[-300:] or type(exc).__name__
        for d in run_dirs:
            rundir.write_status(d, state="failed", error=f"not submitted ({m['executor']}): {why}",
                                finished_at=rundir.now())  # fmt: skip
        raise SlurmError(
            f"{len(run_dirs)} run(s) not submitted to {m['executor']}: {why}; they are marked failed: fix it and "
            f"run sweep --resume {out}, or sweep --cancel {out} ({USE_QUEUE} in a new sweep)"
        ) from None
    ids = _read_jobs(out)
    for d, j in zip(run_dirs, jobs, strict=True):
        ids[d.name] = {"job_id": str(j.job_id), "executor": m["executor"]}
        rundir.write_status(d, submitit_job=str(j.job_id), executor=m["executor"])
    atomic.write_json(out / JOBS_FILE, ids)
    return [str(j.job_id) for j in jobs]


class SlurmError(DetourError):
    pass


USE_QUEUE = "or use --executor queue (this machine trains the cells)"


def check_sbatch() -> None:
    """Refuse before anything is prepared where this machine cannot submit Slurm jobs: the commands submitit calls
    (``sbatch``, and ``srun``, which its executor looks for first: "Could not detect srun" reached the user as an
    internal error) and a controller that answers (``sinfo``: a missing or wrong slurm.conf, or slurmctld down, made
    every ``sbatch`` fail after the sweep was written)."""
    missing = [c for c in ("sbatch", "srun", "sinfo") if shutil.which(c) is None]
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise SlurmError(
            f"Slurm: {', '.join(missing)} {verb} not on this machine's PATH; run Detour Lab (the app or the CLI) "
            f"where jobs can be submitted (a login node), {USE_QUEUE}, or train here"
        )
    conf = os.environ.get("SLURM_CONF")
    if conf and not Path(conf).is_file():  # sinfo would retry for a minute before saying so
        raise SlurmError(f"Slurm: SLURM_CONF names {conf}, which is not a file; point it at slurm.conf, {USE_QUEUE}")
    r = _run(["sinfo", "-h", "-o", "%P"])
    if r is None or r.returncode != 0:
        why = (
            "no answer in 30 s"
            if r is None
            else " ".join((r.stderr or r.stdout).split())[:300] or f"exit {r.returncode}"
        )
        raise SlurmError(
            f"Slurm: installed but not answering (sinfo: {why}); check SLURM_CONF and that slurmctld runs "
            f"(scontrol ping), {USE_QUEUE}"
        )


SUBMIT_ERRORS = (RuntimeError, subprocess.CalledProcessError, OSError)  # submitit's FailedJobError is a RuntimeError


@contextlib.contextmanager
def _sbatch_stderr(into: list[str]):
    """Keep what ``sbatch`` writes to the terminal (submitit runs it with this process's stderr) and hand it back in
    ``into``: a refusal is then one line that quotes it, not sbatch's lines and then ours."""
    import io

    sys.stderr.flush()
    saved = os.dup(2)
    copied = io.StringIO()  # submitit copies the command's stderr to sys.stderr as it reads it
    with tempfile.TemporaryFile() as f, contextlib.redirect_stderr(copied):
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            f.seek(0)
            into.append(copied.getvalue() + f.read().decode("utf-8", "replace"))


def submit_run(run_dir: Path, sl: dict | None) -> str:
    """One prepared run as one Slurm job (its submitit folder inside the run); a refused submission marks the run
    failed with sbatch's own words."""
    import submitit

    check_sbatch()
    sl = slurm_settings(sl)
    ex = make_executor(run_dir / "submitit", "slurm", sl, f"detour-{run_dir.name}")
    try:
        job = ex.submit(TrainCell(), str(run_dir), max(1, sl["gpus_per_task"]))
    except (submitit.core.utils.FailedJobError, *SUBMIT_ERRORS) as exc:
        why = " ".join(str(exc).split())[-400:]
        rundir.write_status(run_dir, state="failed", error=f"sbatch refused the job: {why}", finished_at=rundir.now())
        raise SlurmError(f"{run_dir.name}: sbatch refused the job: {why}") from None
    rundir.write_status(run_dir, submitit_job=str(job.job_id), executor="slurm")
    return str(job.job_id)


def submit_config(cfg: dict, root: Path | None = None, seeds: list[int] | None = None, warn=lambda _: None):
    """``train --executor slurm`` and the Launch tab's Slurm target: prepare the run(s) here (checked, named, state
    ``queued``, claimed so a queue worker on the same folder leaves them) and hand each to Slurm as one job.
    Returns ``[(run_dir, job_id), ...]``."""
    from backend.runs.jobs import expand_seeds
    from backend.runs.train import prepare_runs

    check_sbatch()
    out = []
    for c in expand_seeds(cfg, seeds):
        for d in prepare_runs(c, root=root, claim=True, warn=warn):
            out.append((d, submit_run(d, c["slurm"])))
    return out


# ------------------------------------------------------------------------------------------------ states


def _run(argv: list[str]) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None


def slurm_states(job_ids: list[str]) -> dict[str, dict]:
    """Job id -> {"state", "reason"} as Slurm says: ``squeue`` (array tasks one by one), then ``sacct`` for the
    ones squeue has forgotten (only where the cluster keeps accounting). A job neither knows is left out."""
    ids = sorted({str(j) for j in job_ids if j})
    if not ids:
        return {}
    out: dict[str, dict] = {}
    r = _run(["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T|%r", "-j", ",".join(ids)])
    if r is not None and r.returncode == 0:
        for line in r.stdout.splitlines():
            jid, state, reason = (line.split("|") + ["", ""])[:3]
            out[jid.strip()] = {"state": state.strip(), "reason": reason.strip()}
    rest = [j for j in ids if j not in out]
    if rest:
        r = _run(["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", ",".join(rest)])
        if r is not None and r.returncode == 0:
            for line in r.stdout.splitlines():
                jid, _, state = line.partition("|")
                if jid in rest:
                    out[jid] = {"state": state.split()[0] if state else "", "reason": ""}
    return out


def job_states(out: Path) -> dict[str, dict]:
    """Run name -> {"job_id", "state" (Slurm's word), "shown" (pending/running/...), "reason"} for a sweep's
    Slurm jobs (one squeue call); a job Slurm no longer knows reads state None."""
    jobs = {r: rec for r, rec in _read_jobs(out).items() if rec.get("executor") == "slurm"}
    states = slurm_states([rec["job_id"] for rec in jobs.values()])
    res = {}
    for run, rec in jobs.items():
        s = states.get(rec["job_id"], {})
        state = s.get("state") or None
        res[run] = {
            "job_id": rec["job_id"],
            "state": state,
            "shown": SHOWN.get(state, (state or "unknown to Slurm").lower()),
            "reason": s.get("reason") or "",
        }
    return res


def job_alive(out: Path, run: str, states: dict | None = None) -> bool:
    """Whether the run's submitit job may still train it (a local job is a process; a Slurm job asks squeue)."""
    rec = _read_jobs(out).get(run)
    if not rec:
        return False
    if rec["executor"] == "local":
        return pid_alive(int(rec["job_id"]))
    states = states if states is not None else job_states(out)
    return (states.get(run) or {}).get("state") in ALIVE


def scancel(job_id: str) -> str:
    """``scancel JOB``: Slurm sends the job SIGTERM (the trainer checkpoints and writes ``cancelled``), then
    SIGKILL after its KillWait."""
    r = _run(["scancel", str(job_id)])
    if r is None or r.returncode != 0:
        return f"scancel {job_id} failed: {(r.stderr.strip() if r else 'scancel not found')}"
    return f"cancelled Slurm job {job_id} (scancel)"


def cancel_jobs(out: Path) -> list[str]:
    """``sweep --cancel`` on a Slurm sweep: scancel every job that may still train; a run that never started is
    marked cancelled here (its job never ran), a running one writes it itself after its checkpoint."""
    msgs = []
    states = job_states(out)
    for run, js in states.items():
        if js["state"] not in ALIVE:
            continue
        msgs.append(f"{run}: {scancel(js['job_id'])}")
        d = out / "runs" / run
        if rundir.read_status(d).get("state") == "queued":
            rundir.write_status(d, state="cancelled", finished_at=rundir.now(), error="cancelled before it started")
    runs = out / "runs"
    for d in sorted(runs.iterdir()) if runs.is_dir() else []:  # queued, but no job Slurm knows: never submitted
        if d.name in states and states[d.name]["state"] in ALIVE:
            continue
        if (d / "status.json").is_file() and rundir.read_status(d).get("state") == "queued":
            rundir.write_status(d, state="cancelled", finished_at=rundir.now(), error="cancelled before submission")
            msgs.append(f"{d.name}: cancelled (it had no Slurm job)")
    return msgs


def describe_job(js: dict | None) -> str:
    """``slurm 12_1 pending (JobArrayTaskLimit)``: what the status line and the Sweeps tab print for a job."""
    if not js:
        return ""
    why = f" ({js['reason']})" if js.get("reason") and js["reason"] != "None" and js["shown"] == "pending" else ""
    return f"slurm {js['job_id']} {js['shown']}{why}"


def runs_line(cell: dict) -> str:
    """A cell's runs as the status and the Sweeps tab print them: ``s0:running [slurm 12_0 running]`` (a Slurm
    sweep's states and job ids are Slurm's)."""
    jobs = cell.get("jobs") or {}
    return " ".join(
        f"s{seed}:{state}" + (f" [{describe_job(j)}]" if (j := jobs.get(seed)) else "")
        for seed, state in cell["states"].items()
    )

"""The sweep folder's manifest (``sweep.json``) and what its runs' states are: the bottom of ``backend.sweeps``,
read by the launcher, the measurements, the report and the app alike."""

from __future__ import annotations

from pathlib import Path

from backend.core import atomic
from backend.core.errors import DetourError
from backend.core.json_file import read_json_object
from backend.core.paths import is_plain_name
from backend.engine import rundir

MANIFEST = "sweep.json"
TERMINAL = ("done", "failed", "cancelled")


class SweepError(DetourError):
    pass


_FIELDS = {"name": str, "base": dict, "axes": list, "seeds": list, "cells": list, "executor": str}
_CELL = {"index": int, "label": str, "values": dict, "runs": dict}


def read_manifest(out: str | Path) -> dict:
    """``sweep.json``, checked: one ``SweepError`` line naming the file and what is wrong with it (missing, a link
    out of the sweep folder, torn, not a sweep's manifest) instead of a KeyError or a JSONDecodeError later."""
    p = Path(out) / MANIFEST
    if not p.exists() and not p.is_symlink():
        raise SweepError(f"{out}: not a sweep folder (no {MANIFEST})")
    fix = "restore it, or move the folder away and plan the sweep again (finished runs are never retrained in place)"
    m = read_json_object(p, SweepError, "a sweep manifest (an object with cells)", fix)
    bad = [k for k, t in _FIELDS.items() if not isinstance(m.get(k), t)]
    if bad:
        raise SweepError(f"{p}: not a sweep manifest: {', '.join(bad)} missing or of the wrong type; {fix}")
    for i, c in enumerate(m["cells"]):
        wrong = [k for k, t in _CELL.items() if not isinstance(c, dict) or not isinstance(c.get(k), t)]
        if wrong:
            raise SweepError(f"{p}: cell {i} is not a sweep cell ({', '.join(wrong)} missing or wrong); {fix}")
        if bad_runs := [r for r in c["runs"].values() if not is_plain_name(r)]:  # never a path out of runs/
            raise SweepError(f"{p}: cell {i} names a run {bad_runs[0]!r} that is not a plain folder name; {fix}")
    return m


def write_manifest(out: Path, m: dict) -> None:
    atomic.write_json(out / MANIFEST, m)


def run_names(m: dict) -> list[str]:
    return [r for c in m["cells"] for r in c["runs"].values()]


def cell_states(out: str | Path, m: dict | None = None, jobs: dict | None = None) -> dict[str, str]:
    """Run name -> state (``missing`` for a run not prepared yet); a running run whose process is gone reads
    ``failed``: its trainer was killed (kill -9, a reboot) without writing so.

    A Slurm sweep asks Slurm (``jobs``: ``cluster.job_states``): a run whose job is pending or requeued is
    ``queued`` and one whose job runs is ``running``, whatever the run last wrote (a preempted run wrote
    ``cancelled`` before its job was requeued); a ``running`` run whose job has ended is ``failed``. Its trainer's
    pid is on a compute node, so it is not looked up on this machine."""
    from backend.sweeps.cluster import ALIVE, WAITING

    out = Path(out)
    m = m or read_manifest(out)
    slurm = m.get("executor") == "slurm"
    if slurm and jobs is None:
        from backend.sweeps.cluster import job_states

        jobs = job_states(out)
    states = {}
    for r in run_names(m):
        d = out / "runs" / r
        if not (d / "config.yaml").exists():
            states[r] = "missing"
            continue
        st = rundir.read_status(d)  # a 'running' whose process is gone (on this machine) reads failed
        state = st.get("state", "queued")
        job = (jobs or {}).get(r) or {}
        if slurm and job.get("state") and state != "done":
            if job["state"] in ALIVE:
                state = "queued" if job["state"] in WAITING else "running"
            elif state in ("running", "queued"):
                state = "failed"  # the job ended and the trainer never said how
        states[r] = state
    return states


def sweep_status(out: str | Path) -> dict:
    """The manifest with each cell's run states and counts: what the CLI prints and the app's Sweeps view shows.
    A Slurm sweep also carries ``jobs``: run -> its job id and Slurm's state of it."""
    out = Path(out)
    m = read_manifest(out)
    jobs = None
    if m.get("executor") == "slurm":
        from backend.sweeps.cluster import job_states

        jobs = job_states(out)
    states = cell_states(out, m, jobs)
    counts: dict[str, int] = {}
    for s in states.values():
        counts[s] = counts.get(s, 0) + 1
    for c in m["cells"]:
        c["states"] = {seed: states[r] for seed, r in c["runs"].items()}
        c["jobs"] = {seed: (jobs or {}).get(r) for seed, r in c["runs"].items()}
    return {
        **m,
        "out": str(out),
        "run_states": states,
        "jobs": jobs or {},
        "counts": counts,
        "finished": all_terminal(states),
    }


def all_terminal(states: dict[str, str]) -> bool:
    return all(s in TERMINAL for s in states.values())


RESUMABLE = ("missing", "failed", "cancelled", "queued")  # the states a resume hands to the executor again


def to_resume(out: str | Path) -> list[str]:
    """The runs a resume queues again (``sweep._queue_missing``): not prepared yet, failed, cancelled or queued.
    Empty when every run is done or still running: a resume then has nothing to queue."""
    return [r for r, s in cell_states(out).items() if s in RESUMABLE]


def resume_line(out: str | Path, left: list[str]) -> str:
    """What a resume of the sweep in ``out`` says, the app's Resume and ``sweep --resume`` alike, given ``left``
    (``to_resume`` before it): how many runs it queued again, or that it had none to queue (a finished sweep's
    resume said its cells were queued again)."""
    out = Path(out)
    m = read_manifest(out)
    states = cell_states(out, m)
    if left:
        shown = ", ".join(left[:4]) + (f" and {len(left) - 4} more" if len(left) > 4 else "")
        return f"{m['name']}: {len(left)} of {len(states)} runs queued again ({shown})"
    running = sum(s == "running" for s in states.values())
    if running:
        return f"{m['name']}: nothing to resume: {running} of {len(states)} runs still running, none left to queue"
    report = "its report is written" if (out / "report.md").exists() else "its report is not written yet"
    return f"{m['name']}: nothing to resume: all {len(states)} runs are done; {report}"

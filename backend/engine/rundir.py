"""Read and write a run directory (format: docs/reference/run-directory.md)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from backend.core import atomic, process, strict_yaml
from backend.core.errors import ConfigError, DetourError
from backend.core.names import close_names
from backend.core.paths import RUNS_ENV, OutsideRoot, is_plain_name, read_text_confined, runs_dir, tail_text
from backend.core.process import pid_alive  # noqa: F401 (callers and tests read it here)
from backend.engine.config import with_defaults

STATES = ("queued", "running", "done", "failed", "cancelled")


def suggest_name(name: str, root: Path | None = None) -> str:
    root = root or runs_dir()
    i = 2
    while (root / f"{name}-{i}").exists() or (root / f"{name}-{i}-detour").exists():
        i += 1
    return f"{name}-{i}"


def now() -> float:
    return time.time()


PID_FIELDS = ("pid", "launched_pid", "claimed_by")  # each has a ``<field>_identity`` beside it (core.process.identity)


def runs_process(st: dict, field: str = "pid") -> bool:
    """The process ``st[field]`` names still runs and is proven to be the one recorded (same boot, same start
    time): a reused pid, or one from before a reboot, is not it."""
    return process.is_process(st.get(field), st.get(f"{field}_identity"))


def _gone(st: dict, run_dir: str | Path) -> str:
    from backend.engine.compile_abort import aborted_call, died

    if mark := aborted_call(run_dir):  # it died in a first compiled call: the resume trains without compile
        return (f"{died(mark)} (torch.compile's kernels on this machine); resume to continue without compile: "
                f"python -m backend train --run-dir {run_dir} --resume")  # fmt: skip
    pid = st.get("pid")
    if isinstance(pid, int) and process.pid_alive(pid):
        why = f"pid {pid} now belongs to another process (a reboot, or the pid was reused), so it is not this run's"
        return f"the training process is gone: {why}; resume it: python -m backend train --run-dir {run_dir} --resume"
    return (
        f"the training process (pid {pid}) is gone without recording its end (killed, or the disk "
        f"was full?); see train.log, then resume: python -m backend train --run-dir {run_dir} --resume"
    )


NUMBER_FIELDS = ("step", "total_steps", "tokens_seen", "total_tokens", "eta_s", "created_at", "queued_at",
                 "started_at", "finished_at", "updated_at", "trained_before_s")  # fmt: skip


def _bad_field(st: dict) -> str | None:
    """What makes a status mapping unusable, in words (a state outside ``STATES``, a number field holding text), or
    None: every reader (the Runs table, the doctor, the queue) may then do arithmetic on it."""
    if st.get("state") not in (*STATES, None):
        return f"state {st.get('state')!r} is not one of {', '.join(STATES)}"
    for key in NUMBER_FIELDS:
        v = st.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            return f"{key} {v!r} is not a number"
    return None


def read_status(run_dir: str | Path) -> dict:
    """status.json; ``running`` only while its recorded process runs (a trainer killed, one whose disk filled up
    before it could record its end, or a pid now held by another process reads ``failed``, resumable, with why and
    the command), ``unknown`` when the file is missing, torn or not a mapping."""
    p = Path(run_dir) / "status.json"
    try:
        st = json.loads(read_text_confined(p))
    except OutsideRoot as exc:
        return {"state": "unknown", "error": str(exc)}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        st = None
    if not isinstance(st, dict):
        return {"state": "unknown", "error": f"no readable status.json in {run_dir}"}
    if problem := _bad_field(st):
        return {"state": "unknown", "error": f"{p}: {problem} (a status.json edited by hand or by another program?)"}
    if st.get("state") == "running" and not runs_process(st):
        st["state"] = "failed"
        st["resumable"] = True
        st["error"] = st.get("error") or _gone(st, run_dir)
    return st


def write_status(run_dir: str | Path, **fields) -> dict:
    """Merge ``fields`` into status.json (atomic) and stamp ``updated_at``. A pid field (``PID_FIELDS``) this process
    writes as its own gets its identity recorded beside it; any other pid gets one only when the caller passes
    ``<field>_identity`` (the worker, for the trainer it just started), else none: it proves nothing. A run folder
    that is gone (moved or deleted meanwhile) is ``NoSuchRun``, never recreated."""
    if not Path(run_dir).is_dir():
        raise no_run(Path(run_dir).name, Path(run_dir).parent)
    st = read_status(run_dir)
    if st.get("state") == "unknown":
        st = {}
    for field in PID_FIELDS:
        if field in fields and f"{field}_identity" not in fields:
            own = fields[field] is not None and fields[field] == os.getpid()
            fields[f"{field}_identity"] = process.identity() if own else None
    st.update(fields)
    st["updated_at"] = now()
    atomic.write_json(Path(run_dir) / "status.json", st, make_parents=False)
    return st


def read_metrics(run_dir: str | Path) -> list[dict]:
    return atomic.read_jsonl(Path(run_dir) / "metrics.jsonl")


def read_config(run_dir: str | Path) -> dict:
    """The run's config.yaml, completed with defaults for keys newer than the run. A missing, empty or malformed
    file is a ConfigError naming it (the run cannot be trained or resumed from it)."""
    import yaml

    path = Path(run_dir) / "config.yaml"
    try:
        raw = strict_yaml.load(read_text_confined(path, encoding="utf-8"))  # duplicate keys refused
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(
            "config", str(path), f"unreadable ({type(exc).__name__}: {' '.join(str(exc).split())})"
        ) from exc
    if not isinstance(raw, dict) or not raw:
        what = "the file is empty" if raw is None else f"the file holds a {type(raw).__name__}"
        raise ConfigError(
            "config", str(path), f"{what}; expected the run's config (a mapping: name, recipe, model, ...)"
        )
    return with_defaults(raw)


@dataclass
class RunInfo:
    name: str
    path: Path
    status: dict

    @property
    def state(self) -> str:
        st = self.status.get("state", "unknown")
        # A 'running' run whose process is gone died without saying so (kill -9, power loss).
        if st == "running" and not runs_process(self.status):
            return "failed"
        return st


def root_problem(root: str | Path | None = None, flag: str | None = None) -> str | None:
    """Why no run can be listed under ``root`` although it exists (a file where the runs folder belongs), or None:
    the app says this line instead of an empty Runs table. ``flag``: the option that named ``root`` (else the
    environment variable did)."""
    root = Path(root) if root else runs_dir()
    if root.exists() and not root.is_dir():
        fix = f"give {flag} a folder" if flag else f"point {RUNS_ENV} at a folder"
        return (
            f"the runs folder {root} is a file, not a folder: no run can be listed or written there; move the file "
            f"away or {fix}"
        )
    return None


class NoSuchRun(DetourError):
    """A run asked for by its name or folder that is not there (never made, renamed, moved or deleted)."""


def no_run(name: str, root: str | Path | None = None) -> NoSuchRun:
    """The refusal "no run named NAME in ROOT", with the runs of ``root`` whose names are close (a renamed one)."""
    root = Path(root) if root else runs_dir()
    near = close_names(name, [r.name for r in list_runs(root)])
    return NoSuchRun(f"no run named {name} in {root}" + (f"; did you mean: {', '.join(near)}?" if near else ""))


def find_run(spec: str | Path, root: str | Path | None = None) -> Path:
    """The run folder ``spec`` names: a folder holding a config.yaml, given as a path or as a name under ``root``
    (default: the runs folder); else ``NoSuchRun`` naming the close ones."""
    p = Path(spec).expanduser()
    if (p / "config.yaml").is_file():
        return p
    root = Path(root) if root else runs_dir()
    if is_plain_name(str(spec)) and (root / str(spec) / "config.yaml").is_file():
        return root / str(spec)
    if p.parent == Path("."):
        raise no_run(str(spec), root)
    if p.parent.is_dir():  # a path: the runs beside it are the close ones
        raise no_run(p.name, p.parent)
    raise NoSuchRun(f"no run at {p}: the folder {p.parent} does not exist")


def list_runs(root: str | Path | None = None) -> list[RunInfo]:
    root = Path(root) if root else runs_dir()
    if not root.is_dir():  # missing, or a file where the runs folder should be: no runs (a writer says why)
        return []
    out = []
    for d in sorted(root.iterdir()):
        if d.is_dir() and not d.name.startswith(".") and (d / "config.yaml").exists():
            out.append(RunInfo(d.name, d, read_status(d)))
    return out


def pair_of(name: str, cfg: dict) -> tuple[str | None, str | None]:
    """(pair id, role) of a run (the catalogue's "pair" kind): from its config's ``_meta`` (written by
    ``prepare_runs``), else from its name's suffix ``-detour`` / ``-mlm``; (None, None) for a run in no pair."""
    meta = cfg.get("_meta") or {}
    if isinstance(meta, dict) and meta.get("pair") and meta.get("role") in ("detour", "mlm"):
        return str(meta["pair"]), meta["role"]
    for role in ("detour", "mlm"):
        if name.endswith(f"-{role}"):
            return name.removesuffix(f"-{role}"), role
    return None, None


def pairs(runs: list[RunInfo]) -> list[tuple[str, str, str]]:
    """(pair id, detour run, MLM run) of every complete pair among ``runs``, in the order of each pair's first run
    in ``runs`` (the first run of each role is the pair's). A run whose config cannot be read is in no pair:
    skipped, never fatal."""
    roles: dict[str, dict[str, str]] = {}
    order: list[str] = []
    for r in runs:
        try:
            cfg = read_config(r.path)
        except (DetourError, OSError, ValueError):  # an unknown key, an empty file, a link out
            continue
        pair, role = pair_of(r.name, cfg)
        if pair:
            roles.setdefault(pair, {}).setdefault(role, r.name)
            if pair not in order:
                order.append(pair)
    return [(p, roles[p]["detour"], roles[p]["mlm"]) for p in order if len(roles[p]) == 2]


def read_log(run_dir: str | Path, max_bytes: int = 64_000) -> str:
    """The end of the run's ``train.log`` ("" when there is none yet); a log that links out of the run folder is
    ``OutsideRoot`` (one line), never shown."""
    p = Path(run_dir) / "train.log"
    return tail_text(p, max_bytes) if p.exists() or p.is_symlink() else ""


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints (those with a COMPLETE marker), oldest first."""
    d = Path(run_dir) / "checkpoints"
    if not d.exists():
        return []
    return [c for c in sorted(d.glob("step-*")) if (c / "COMPLETE").exists()]


def trained_so_far(run_dir: str | Path) -> dict | None:
    """None for a run that has not trained yet (nothing a restart would lose); else what it has: ``finished``
    (final/ written or state done), ``step`` and ``checkpoint`` (its newest complete checkpoint), ``state``."""
    run_dir = Path(run_dir)
    state = RunInfo(run_dir.name, run_dir, read_status(run_dir)).state  # a killed 'running' reads 'failed'
    cks = list_checkpoints(run_dir)
    finished = state == "done" or (run_dir / "final").exists()
    if not finished and not cks:
        return None
    newest = cks[-1].name if cks else None
    return {
        "finished": finished,
        "state": state,
        "checkpoint": newest,
        "step": int(newest.split("-")[-1]) if newest else 0,
    }


def checkpoint_state(ckpt: str | Path) -> dict:
    return json.loads(read_text_confined(Path(ckpt) / "trainer_state.json"))


def saved_models(run_dir: str | Path) -> list[dict]:
    """The complete checkpoints that hold a model, oldest first: ``{"name", "path"`` (its ``model/``), ``"step",
    "tokens_seen", "tag", "phase"}`` from its trainer state (the step from the folder name if that is unreadable)."""
    points = []
    for ck in list_checkpoints(run_dir):
        if not (ck / "model" / "config.json").exists():
            continue
        tail = ck.name.rsplit("-", 1)[-1]
        point = {"name": ck.name, "path": str(ck / "model"), "step": int(tail) if tail.isdigit() else None}
        point.update({"tokens_seen": None, "tag": None, "phase": None})
        try:
            st = checkpoint_state(ck)
            point.update({k: st.get(k, point.get(k)) for k in ("step", "tokens_seen", "tag", "phase")})
        except (OSError, ValueError):
            pass
        points.append(point)
    return points


def time_spent(status: dict, now: float | None = None) -> float | None:
    """Seconds a run has trained, over all its processes: ``trained_before_s`` (what the processes before a resume
    spent, recorded when it resumed) plus this process's time, to its end (or the last update of one that died
    without saying), or to ``now`` while it runs. None before it first started."""
    started, ended = status.get("started_at"), status.get("finished_at")
    if not started:
        return None
    if not ended and status.get("state") != "running":
        ended = status.get("updated_at")  # died without saying when
    return (status.get("trained_before_s") or 0.0) + max((ended or now or time.time()) - started, 0.0)


CLOCK_SLACK_S = 5.0  # two processes' clocks, or a write and a read, may differ by this much without meaning anything


def clock_moved(status: dict, now: float | None = None) -> bool:
    """Whether a run's timestamps lie in the future of its own end, or of ``now`` (the machine's clock was stepped
    back since it started): its duration cannot be measured and must not read 0m00s as if it were."""
    started = status.get("started_at")
    if not isinstance(started, int | float) or isinstance(started, bool):
        return False
    ended = status.get("finished_at")
    if not ended and status.get("state") != "running":
        ended = status.get("updated_at")
    end = ended if isinstance(ended, int | float) and not isinstance(ended, bool) else (now or time.time())
    return end - started < -CLOCK_SLACK_S

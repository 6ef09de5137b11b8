"""Mini replication of the paper's three findings (``python -m backend replicate``), at a scale a CPU can do.

From one base encoder and one domain corpus, the plan trains five encoders, fine-tunes them on NER over
several seeds, measures CKA divergence and weight change per layer, and writes a report. The package reads
bottom up: ``plan`` (presets, runs, settings) -> ``corpus`` -> the report (``results``, ``verdicts``,
``figures``, ``render``, composed by ``report``) -> ``steps`` (what each step does) -> this module, which runs
the steps: markers, resume, status, locking, signals. The three findings:

1. detour > MLM downstream: a CLM detour and an MLM baseline trained as a *pair* (same seed, same data order,
   same token budget), compared on NER test F1, paired by fine-tuning seed;
2. low-layer divergence well above seed noise: CKA(detour, MLM) per layer against the seed-noise control,
   an extra MLM run with another seed;
3. freeze interventions: the detour with the lower third of the layers frozen during CLM (the paper: the gain
   disappears) and with the middle third frozen (the paper: the gain stays).

The plan is an ordered list of named steps. Each step writes its outputs, then a marker
``OUT/steps/<step>.json`` holding a digest of the settings it used; a step whose marker exists with the same
digest is skipped, so a rerun resumes where the last one stopped and never recomputes a finished step. A
training step interrupted half-way resumes from the run's last checkpoint. A failed step writes
``OUT/steps/<step>.failed.json``; the steps that need it are skipped ("blocked"), the others still run, and the
report says what is missing. Every event goes to ``OUT/steps.jsonl``; ``OUT/status.json`` tells an app what
is running.

Layout of ``OUT`` (default ``reports/<preset>``, gitignored)::

    settings.json        resolved preset (paths, model, budgets, layer thirds)
    status.json          state running|done|failed|cancelled, pid, current step
    steps.jsonl          start / done / skipped / failed / blocked rows, with timings
    steps/<step>.json    markers
    data/                train.txt, heldout.txt (whole documents held out), cka_texts.txt, info.json
    runs/<prefix>-*      run directories (docs/reference/run-directory.md)
    analysis/            cka.json, weights.json
    ner/                 evaluate_models output (results.json, results.md, per-seed metrics)
    report.json, report.html, report.md, figures/*.png, figures/*.json
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from backend.core import atomic
from backend.core.errors import DetourError
from backend.core.process import FileLock, identity, is_process, spawn_detached
from backend.replication.plan import ReplicationCancelled, ReplicationError
from backend.replication.steps import Context, Step, build_plan

LOG_NAME = "replicate.log"


def machine_load() -> dict:
    """The machine's load as a step finishes, kept with the step's time: ``{"load_1m", "load_15m", "cpus"}`` (a
    time measured on a busy machine is read with its load). Load averages are None where the OS has none."""
    try:
        one, _, fifteen = os.getloadavg()
    except (AttributeError, OSError):
        one = fifteen = None
    return {"load_1m": one, "load_15m": fifteen, "cpus": os.cpu_count()}


# ---------------------------------------------------------------------------------------------- reading a folder
def read_settings(out: str | Path) -> dict | None:
    return atomic.read_json(Path(out) / "settings.json")


def read_markers(out: str | Path) -> dict[str, dict]:
    """The step markers in ``OUT/steps`` by name (``<step>.failed`` for a failed one)."""
    d = Path(out) / "steps"
    found = {}
    if d.exists():
        for p in sorted(d.glob("*.json")):
            marker = atomic.read_json(p)
            if marker is not None:
                found[p.name[: -len(".json")]] = marker
    return found


def read_state(out: str | Path) -> dict:
    """status.json of a replication folder, with a crashed 'running' one shown as failed."""
    st = atomic.read_json(Path(out) / "status.json")
    if st is None:
        return {"state": "none"}
    if not isinstance(st, dict):  # a torn or foreign file: said, never an AttributeError in the Reports tab
        return {"state": "unknown", "error": f"{Path(out) / 'status.json'} is not a replication's status"}
    if st.get("state") == "running" and not is_process(st.get("pid"), st.get("pid_identity")):
        st["state"] = "failed"
        st["error"] = st.get("error") or "the replication process died without saying why (see replicate.log)"
    return st


def start_detached(out: Path, preset: str, extra_args: list[str] | None = None):
    """Start ``python -m backend replicate --preset P --out OUT`` in its own session (what the app's Reports tab
    launches): it outlives the app, with its output in ``OUT/replicate.log``. Returns the ``Popen``. ``OUT`` is
    claimed first (``catalogue.claim_folder``): a folder that holds anything but this study is refused."""
    from backend.core.catalogue import claim_folder

    args = list(extra_args or [])
    study = args[args.index("--study") + 1] if "--study" in args[:-1] else "replication"
    claim_folder(out, "report", study)
    argv = [sys.executable, "-m", "backend", "replicate", "--preset", preset, "--out", str(out), *(extra_args or [])]
    return spawn_detached(argv, out / LOG_NAME)


# ---------------------------------------------------------------------------------------------- markers
def digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _flat(d, prefix: str = "") -> dict:
    if not isinstance(d, dict):
        return {prefix: d}
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}."))
    return {k.rstrip("."): v for k, v in out.items()}


def _changed(old: dict, new: dict) -> list[str]:
    a, b = _flat(old), _flat(new)
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def _refuse_other_training(plan: list[Step], markers: dict[str, dict], out: Path) -> None:
    """Runs trained with other settings are never mixed in: checked before anything is written."""
    for step in plan:
        marker = markers.get(step.name)
        if step.strict and marker and marker.get("key") != digest(step.key):
            changed = _changed(marker.get("settings", {}), step.key)
            raise ReplicationError(
                f"{out} holds runs trained with other settings (changed: {', '.join(changed[:6]) or '?'}); "
                f"use another --out, or delete {out} to start over"
            )


# ---------------------------------------------------------------------------------------------- one invocation
@dataclass
class _Tally:
    """What this invocation did, and the two files that tell an app (status.json, steps.jsonl)."""

    out: Path
    state: dict
    log: Callable[[str], None]
    ran: list[str] = field(default_factory=list)
    dirty: set[str] = field(default_factory=set)  # steps whose output changed in this invocation
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    blocked: list[str] = field(default_factory=list)
    cancelled: str | None = None

    def status(self, **kw) -> None:
        self.state.update(kw, updated_at=time.time())
        atomic.write_json(self.out / "status.json", self.state)

    def event(self, step: str, ev: str, **kw) -> None:
        atomic.append_jsonl(self.out / "steps.jsonl", {"step": step, "event": ev, "time": time.time(), **kw})


def _stamp_log(echo: Callable[[str], None] | None) -> Callable[[str], None]:
    def log(msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        (echo or print)(line)
        sys.stdout.flush()

    return log


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (the app, a kill) raises KeyboardInterrupt like Ctrl-C: both cancel cleanly, and a rerun resumes."""

    def on_term(signum, frame):
        raise KeyboardInterrupt

    prev = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, prev)


def _blocked_by(step: Step, tally: _Tally) -> list[str]:
    """The failed (or blocked) steps this one needs; the report always runs, to say what is missing."""
    if step.name == "report":
        return []
    return [d for d in step.deps if d in tally.failed or d in tally.blocked]


def _up_to_date(step: Step, marker: dict | None, tally: _Tally) -> bool:
    """Done earlier with the same settings, and nothing it reads was recomputed in this invocation (a training
    step is never recomputed for that: its key says all)."""
    if not marker or marker.get("key") != digest(step.key):
        return False
    if step.strict:
        return True
    upstream_ran = any(d in tally.dirty for d in step.deps) or (
        step.name == "report" and bool(tally.dirty or tally.failed)
    )
    return not upstream_ran


def _run_step(step: Step, ctx: Context, tally: _Tally, markers: dict[str, dict], where: str) -> bool:
    """Run one step and record what came of it. False when the plan must stop here (cancelled)."""
    out, key = tally.out, digest(step.key)
    tally.event(step.name, "start")
    t0 = time.time()
    try:
        result = step.fn(ctx) or {}
    except (KeyboardInterrupt, ReplicationCancelled) as exc:
        tally.cancelled = f"{step.name}: {str(exc) or 'interrupted'}"
        tally.event(step.name, "cancelled", elapsed_s=time.time() - t0)
        return False
    except Exception as exc:  # noqa: BLE001 - recorded, reported, the independent steps go on
        err = f"{type(exc).__name__}: {exc}"
        tally.failed[step.name] = err
        tb = "".join(traceback.format_exception(exc)[-8:])
        atomic.write_json(
            out / "steps" / f"{step.name}.failed.json",
            {"step": step.name, "error": err, "traceback": tb, "time": time.time()},
        )
        (out / "steps" / f"{step.name}.json").unlink(missing_ok=True)
        tally.event(step.name, "failed", error=err, elapsed_s=time.time() - t0)
        tally.log(f"{where}: FAILED: {err}")
        if not isinstance(exc, DetourError):
            tally.log(tb.rstrip())
        return True
    elapsed = time.time() - t0
    m = {"step": step.name, "key": key, "settings": step.key, "finished_at": time.time()}
    m.update({"elapsed_s": elapsed, "result": result, "machine": machine_load()})
    atomic.write_json(out / "steps" / f"{step.name}.json", m)
    (out / "steps" / f"{step.name}.failed.json").unlink(missing_ok=True)
    markers[step.name] = m
    tally.ran.append(step.name)
    if result.get("trained_now") is not False:  # a run found already trained changes nothing
        tally.dirty.add(step.name)
    tally.event(step.name, "done", elapsed_s=elapsed)
    tally.log(f"{where}: done in {elapsed:.0f}s")
    if result.get("stop_requested"):  # SIGTERM/SIGINT arrived as this step was finishing
        tally.cancelled = f"{result['stop_requested']} after {step.name}"
        return False
    return True


def _run_plan(plan: list[Step], ctx: Context, tally: _Tally, markers: dict[str, dict], report_only: bool) -> None:
    for i, step in enumerate(plan, 1):
        if report_only and step.name != "report":
            continue
        where = f"[{i}/{len(plan)}] {step.name}"
        marker = markers.get(step.name)
        bad_deps = _blocked_by(step, tally)
        if bad_deps:
            tally.blocked.append(step.name)
            tally.event(step.name, "blocked", by=bad_deps)
            tally.log(f"{where}: skipped, needs {', '.join(bad_deps)} (failed)")
            continue
        if not report_only and _up_to_date(step, marker, tally):
            tally.skipped.append(step.name)
            tally.event(step.name, "skipped")
            tally.log(f"{where}: done earlier ({marker.get('elapsed_s', 0):.0f}s), skipped")
            continue
        tally.log(f"{where}: {step.title}")
        tally.status(current_step=step.name, steps_done=i - 1)
        if not _run_step(step, ctx, tally, markers, where):
            return


def _finish(tally: _Tally) -> dict:
    """Write the final status.json, say what happened, and return it."""
    out = tally.out
    if tally.cancelled:
        final_state, error = "cancelled", f"cancelled ({tally.cancelled}); rerun the same command to resume"
    elif tally.failed:
        final_state, error = "failed", "; ".join(f"{k}: {v}" for k, v in tally.failed.items())
    else:
        final_state, error = "done", None
    tally.status(
        state=final_state,
        error=error,
        finished_at=time.time(),
        current_step=None,
        steps_done=len([k for k in read_markers(out) if not k.endswith(".failed")]),
    )
    report = out / "report.html"
    tally.log(
        f"replication {final_state} in {time.time() - tally.state['started_at']:.0f}s: {len(tally.ran)} step(s) "
        f"run, {len(tally.skipped)} skipped, {len(tally.failed)} failed, {len(tally.blocked)} blocked"
        + (f"; report: {report}" if report.exists() else "")
    )
    return {
        "state": final_state,
        "error": error,
        "ran": tally.ran,
        "skipped": tally.skipped,
        "failed": tally.failed,
        "blocked": tally.blocked,
        "report": str(report) if report.exists() else None,
        "out": str(out),
    }


def replicate(
    settings: dict,
    out: str | Path,
    *,
    command: list[str] | None = None,
    log: Callable[[str], None] | None = None,
    report_only: bool = False,
) -> dict:
    """Run (or resume) the plan in ``out``. Returns ``{"state", "ran", "skipped", "failed", "blocked", "report"}``.

    ``state`` is ``done`` (every step done), ``failed`` (some step failed: the report says which, and a rerun
    retries it) or ``cancelled`` (Ctrl-C / SIGTERM: a rerun resumes). Steps already done are never redone.
    """
    out = Path(out).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    logf = _stamp_log(log)
    plan = build_plan(settings)
    with FileLock(out / ".lock", str(out), "another replication is already running in {what} (pid {pid})"):
        markers = read_markers(out)
        _refuse_other_training(plan, markers, out)
        if read_settings(out) != json.loads(json.dumps(settings)):
            atomic.write_json(out / "settings.json", settings)
        state = {
            "state": "running",
            "pid": os.getpid(),
            "pid_identity": identity(),
            "preset": settings.get("preset"),
            "started_at": time.time(),
        }
        state.update({"finished_at": None, "error": None, "steps_total": len(plan), "out": str(out)})
        tally = _Tally(out, state, logf)
        with _sigterm_interrupts():
            tally.status(current_step=None, steps_done=0)
            try:
                _run_plan(plan, Context(out, settings, command, logf), tally, markers, report_only)
            except KeyboardInterrupt:
                tally.cancelled = "interrupted"
        return _finish(tally)

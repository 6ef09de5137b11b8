"""Which studies the reports folder holds and where each stands, for the Reports tab: the listing, each study's
state (``status.json``; a study written before it had one, by its lock and sweep), the status line and log tail,
and the actions on it (launch, Stop, Resume), each the same backend function the command line reaches
(``replication.study_run``: ``replicate --stop``, a rerun of its command)."""

from __future__ import annotations

from pathlib import Path

from backend.core.errors import DetourError
from backend.core.paths import is_plain_name, reports_dir, tail_text
from backend.replication.study_run import LOCK, LOG_NAME

LOG_LINES = 40


def list_reports() -> list[str]:
    """Replication folders under the reports root (newest first): those with a settings, status or report file."""
    root = reports_dir()
    if not root.is_dir():
        return []
    found = []
    for d in root.iterdir():
        if d.is_dir() and not d.name.startswith(".") and is_plain_name(d.name):
            marks = [d / n for n in ("report.json", "status.json", "settings.json", LOG_NAME)]
            times = [p.stat().st_mtime for p in marks if p.exists()]
            if times:
                found.append((max(times), d.name))
    return [n for _, n in sorted(found, reverse=True)]


def report_dir(name: str | None) -> Path:
    """The folder of report ``name``: a plain name under the reports root, never a path."""
    name = (name or "").strip()
    if not is_plain_name(name):
        raise DetourError(f"report '{name}': give the name of a folder under {reports_dir()}")
    d = reports_dir() / name
    if not d.is_dir():
        raise DetourError(f"report '{name}': no such folder under {reports_dir()}")
    if not d.resolve().is_relative_to(reports_dir()):  # a link out of the reports folder is not read
        raise DetourError(f"report '{name}': links to {d.resolve()}, outside {reports_dir()}; it is not read")
    return d


def _tail(path: Path, n: int = LOG_LINES) -> str:
    try:
        raw = tail_text(path)  # a log that links out of the report folder is refused, never shown
    except DetourError as exc:
        return str(exc)
    except OSError:
        return ""
    lines = [ln.rstrip("\r").rsplit("\r", 1)[-1] for ln in raw.split("\n")]  # progress bars: their last state
    return "\n".join([ln for ln in lines if ln.strip()][-n:])


def _counts(d: Path) -> str:
    """'runs: 3 done, 2 running, 40 queued' over the study's sweeps, or ''."""
    from backend.replication.study_run import sweep_dirs
    from backend.sweeps.manifest import sweep_status

    total: dict[str, int] = {}
    for sd in sweep_dirs(d):
        try:
            for state, n in sweep_status(sd)["counts"].items():
                total[state] = total.get(state, 0) + n
        except (DetourError, OSError, ValueError, KeyError):
            continue
    return "runs: " + ", ".join(f"{n} {state}" for state, n in sorted(total.items())) if total else ""


def study_state(d: Path) -> dict:
    """The study's state as the tab shows it: ``status.json`` (a dead process's 'running' reads failed), else, for a
    study written before it had one, its lock and sweep."""
    from backend.replication.study_run import read_status, running_pid

    st = read_status(d)
    if st.get("state") == "none" and ((d / "sweep" / "sweep.json").exists() or (d / LOCK).exists()):
        pid = running_pid(d)
        st = {"state": "running", "pid": pid} if pid else {"state": "finished" if (d / "report.md").exists() else
                                                                    "stopped"}  # fmt: skip
    return st


def status_text(name: str | None) -> tuple[str, str]:
    """(status Markdown, log tail) of a report folder."""
    from backend.core import atomic

    if not (name or "").strip():
        return "No report selected. Launch the quick preset, or run `python -m backend replicate`.", ""
    try:
        d = report_dir(name)
    except DetourError as exc:
        return f"**{exc}**", ""
    st = study_state(d)
    state = st.get("state", "none")
    settings = atomic.read_json(d / "settings.json")
    parts = [f"**{name}**: {state}"]
    if isinstance(settings, dict) and settings and not settings.get("study"):
        parts.append("a report of the retired one-task pipeline (its report stays readable; it is not rerun)")
    if state == "running":
        step = st.get("current_step")
        total = st.get("steps_total")
        at = f"step {step} ({st.get('steps_done') or 0}/{total} done)" if step and total else "preparing"
        parts.append(f"{at}, pid {st.get('pid')}")
    if counts := _counts(d):
        parts.append(counts)
    if state in ("done", "finished") or (d / "report.md").exists():
        parts.append("report written" if (d / "report.md").exists() else "no report yet")
    if st.get("error"):
        parts.append(f"{'note' if state == 'cancelled' else 'error'}: {st['error']}")
    return " · ".join(parts), _tail(d / LOG_NAME)


def controls(name: str | None) -> tuple[bool, bool]:
    """(Stop shown, Resume shown) for the selected report: Stop while its study runs or its runs still train,
    Resume once it was stopped or failed and records how to resume."""
    from backend.core import atomic

    if not (name or "").strip():
        return False, False
    try:
        d = report_dir(name)
    except DetourError:
        return False, False
    st = study_state(d)
    busy = "queued" in _counts(d) or "running" in _counts(d)
    raw = atomic.read_json(d / "status.json")
    resumable = isinstance(raw, dict) and bool(raw.get("resume_argv"))
    return st.get("state") == "running" or busy, st.get("state") in ("cancelled", "failed") and resumable and not busy


def stop_study(name: str | None) -> str:
    """Stop the selected study (``study_run.stop``: its process signalled, its runs cancelled); one line."""
    from backend.replication.study_run import stop

    msgs = stop(report_dir(name))
    return f"Stopping `{name}`: " + "; ".join(msgs[:3]) + (f" (and {len(msgs) - 3} more)" if len(msgs) > 3 else "")


def resume_study(name: str | None) -> str:
    """Resume the selected study with the command that ran it (what rerunning it in a terminal does)."""
    from backend.replication.study_run import live_pid, resume_argv, start_detached

    d = report_dir(name)
    if pid := live_pid(d):
        raise DetourError(f"'{name}' is already running (pid {pid})")
    proc = start_detached(d, resume_argv(d))
    return f"Resumed `{name}` (pid {proc.pid}): finished runs and fine-tunes are kept."

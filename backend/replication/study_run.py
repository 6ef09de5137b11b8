"""How a study runs, for both studies: where its folder is, the one process that runs it (its lock, ``status.json``
and log), what SIGTERM and SIGINT do to it, and Stop.

* **The folder rule** (``study_folder``): no ``--out`` is ``<reports>/<detour|hybrid>-<preset>``, a plain name is
  ``<reports>/<name>``, anything with a ``/`` is that path. The Reports tab launches into the same folders, so the
  app and the command line see and resume each other's studies (the reports root is ``DETOUR_REPORTS_DIR``).
* **One process** holds ``OUT/study.lock`` while it runs; ``OUT/status.json`` says its state (running, done,
  cancelled, failed), pid, step, its sweeps and the command that resumes it; its log lines go to
  ``OUT/replicate.log`` too, so a study started in a terminal is followed in the app.
* **SIGTERM / SIGINT** (Ctrl-C, ``kill``, Stop) end the wait: the study cancels every queued and running run of its
  sweeps (a running one checkpoints first; the queue worker exits once nothing is queued), writes ``cancelled``
  with the command that resumes it and exits 130. Nothing keeps training for a study nobody runs.
* **Stop** (``stop``: the Reports tab's button and ``replicate --stop``) signals the study's process when it runs
  and cancels its sweeps either way (a study process killed with SIGKILL left its runs queued: they stop too).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from backend.core import atomic
from backend.core.errors import DetourError
from backend.core.paths import is_plain_name, reports_dir

LOG_NAME = "replicate.log"
LOCK = "study.lock"
STATUS = "status.json"
SWEEPS = ("sweep", "splits", "cpt")  # the sweep folders a study keeps (the detour study's; the second study's two)
PREFIX = {"detour": "detour", "hybrid-splits": "hybrid"}
STOPPED_RC = 130
STDOUT_IS_LOG = "DETOUR_STUDY_STDOUT_IS_LOG"  # set by start_detached: stdout already is OUT/replicate.log


class StudyStopped(DetourError):
    """The study was stopped (a signal, Stop, or its sweep cancelled from the command line); it resumes."""


def study_folder(study: str, preset: str, out: str | Path | None = None) -> Path:
    """The study's folder (absolute), by the one rule the app and the command line share."""
    if out is None or str(out) == "":
        return reports_dir() / f"{PREFIX[study]}-{preset}"
    text = str(out)
    if is_plain_name(text):
        return reports_dir() / text
    return Path(text).expanduser().absolute()


def running_pid(out: Path) -> int | None:
    """The pid of the process running the study in ``out`` (its lock is held; -1 when its pid is unreadable), else
    None. A probe only: the lock is never taken, so a study starting meanwhile is never refused because of it."""
    from backend.core.process import holder_pid, is_held

    lock = Path(out) / LOCK
    return (holder_pid(lock) or -1) if is_held(lock) else None


def live_pid(out: Path) -> int | None:
    """The pid of a study running in ``out``: its lock held, or its status 'running' by a process proven alive."""
    st = read_status(out)
    return running_pid(out) or (st.get("pid") if st.get("state") == "running" else None)


def sweep_dirs(out: Path) -> list[Path]:
    """The sweep folders the study in ``out`` has written so far."""
    return [Path(out) / name for name in SWEEPS if (Path(out) / name / "sweep.json").exists()]


def read_status(out: Path) -> dict:
    """``status.json`` of a study folder as it stands: a 'running' study whose process is gone is 'failed', and says
    whether its runs still train (a study killed with SIGKILL cannot cancel them; Stop does)."""
    from backend.core.process import is_process

    st = atomic.read_json(Path(out) / STATUS)
    if st is None:
        return {"state": "none"}
    if not isinstance(st, dict):  # a torn or foreign file: said, never an AttributeError in the Reports tab
        return {"state": "unknown", "error": f"{Path(out) / STATUS} is not a study's status"}
    if st.get("state") == "running" and not is_process(st.get("pid"), st.get("pid_identity")):
        busy = _busy_runs(Path(out))
        left = f"; {busy} of its runs are still queued or training: Stop cancels them" if busy else ""
        st = {**st, "state": "failed",
              "error": st.get("error") or f"the study's process ended without saying why (killed?){left}"}  # fmt: skip
    return st


def _busy(sweep_dir: Path) -> int:
    """How many runs of the sweep in ``sweep_dir`` are queued or running."""
    from backend.sweeps.manifest import sweep_status

    try:
        counts = sweep_status(sweep_dir)["counts"]
    except (DetourError, OSError, ValueError, KeyError):
        return 0
    return counts.get("queued", 0) + counts.get("running", 0)


def _busy_runs(out: Path) -> int:
    return sum(_busy(d) for d in sweep_dirs(out))


def _cancel_busy(out: Path) -> list[str]:
    """Cancel the queued and running runs of each of the study's sweeps that has any (a finished sweep stays as it
    is, not marked cancelled); one line per run."""
    from backend.sweeps import sweep

    msgs = []
    for d in sweep_dirs(out):
        if _busy(d):
            msgs += [m for m in sweep.cancel(d) if "only queued or running runs" not in m]
    return msgs


def start_detached(out: Path, argv_tail: list[str]) -> object:
    """Start ``python -m backend replicate ARGV_TAIL [--out OUT]`` in its own session (what the Reports tab launches
    and resumes): it outlives the app, its output in ``OUT/replicate.log``. ``OUT`` is claimed first
    (``catalogue.claim_folder``): a folder that holds anything but this study is refused. Returns the ``Popen``."""
    from backend.core.catalogue import claim_folder
    from backend.core.process import spawn_detached

    claim_folder(out, "report")  # which study it holds, settings.json says (the study refuses another's)
    tail = argv_tail if "--out" in argv_tail else [*argv_tail, "--out", str(out)]
    argv = [sys.executable, "-m", "backend", "replicate", *tail]
    return spawn_detached(argv, out / LOG_NAME, {STDOUT_IS_LOG: "1"})


def resume_argv(out: Path) -> list[str]:
    """The ``replicate`` arguments that resume the study in ``out`` (recorded by the process that ran it)."""
    st = atomic.read_json(Path(out) / STATUS)
    argv = st.get("resume_argv") if isinstance(st, dict) else None
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise DetourError(f"{out}: no study here that records how to resume it (rerun its command)")
    return argv


def stop(out: Path) -> list[str]:
    """Stop the study in ``out``: SIGTERM to its process (it cancels its runs and writes 'cancelled'), and every queued
    or running run of its sweeps cancelled here as well. One line per thing done; ``DetourError`` when nothing of it
    runs."""
    from backend.core.process import is_process

    out = Path(out)
    if not out.is_dir():  # was "not running (its state: none)" for a name that is no study at all
        raise DetourError(f"no study in {out}: nothing to stop (a study's folder is under {out.parent})")
    st = atomic.read_json(out / STATUS)
    st = st if isinstance(st, dict) else {}  # a status.json that is a list or torn: nothing of it is read
    msgs = []
    live = st.get("state") == "running" and is_process(st.get("pid"), st.get("pid_identity"))
    pid = st.get("pid") if live else running_pid(out)  # else the lock holder: a study from before status.json
    if pid and pid > 0:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGTERM)
        live = True
        msgs.append(f"sent SIGTERM to the study's process (pid {pid}): it cancels its runs and stops")
    busy = _busy_runs(out)
    msgs += _cancel_busy(out)  # the process does it too; done here as well, so a stuck or gone one stops them
    if not live and not busy:
        raise DetourError(f"{out.name}: not running (its state: {read_status(out).get('state')}); nothing to stop")
    if not live and isinstance(st, dict) and st:  # nobody else will say it: the runs were cancelled here
        atomic.write_json(out / STATUS, {**st, "state": "cancelled", "finished_at": time.time(),
                                         "error": "stopped: its runs were cancelled (resume to go on)"})  # fmt: skip
    return msgs


# ------------------------------------------------------------------------------------------------ the running study


def study_log(out: Path, echo: Callable[[str], None] | None = None) -> Callable[[str], None]:
    """A log function for the study in ``out``: each line stamped, printed, and appended to ``OUT/replicate.log``
    (unless stdout already is that file: a study the app started)."""
    to_file = os.environ.get(STDOUT_IS_LOG) != "1"

    def log(msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        (echo or print)(line)
        sys.stdout.flush()
        if to_file:
            with contextlib.suppress(OSError), open(Path(out) / LOG_NAME, "a", encoding="utf-8") as f:
                f.write(line + "\n")

    return log


@dataclass
class StudyRun:
    """The running study: ``stage`` moves its status to the next step; ``check`` stops it when its sweep was
    cancelled from outside (``sweep --cancel``)."""

    out: Path
    state: dict
    log: Callable[[str], None]
    steps: list[str] = field(default_factory=list)

    def write(self, **kw) -> None:
        self.state.update(kw, updated_at=time.time())
        atomic.write_json(self.out / STATUS, self.state)

    def stage(self, step: str, title: str) -> float:
        self.log(f"== {step}: {title}")
        done = self.steps.index(step) if step in self.steps else None
        self.write(current_step=step, steps_done=done)
        return time.time()

    def check(self, sweep_dir: Path) -> None:
        from backend.sweeps.manifest import read_manifest

        if read_manifest(sweep_dir).get("state") == "cancelled":
            raise StudyStopped(f"its sweep {sweep_dir.name} was cancelled")


def _raise_stopped(signum, frame):
    raise StudyStopped(signal.Signals(signum).name)


@contextlib.contextmanager
def _signals_stop() -> Iterator[None]:
    """SIGTERM and SIGINT raise ``StudyStopped`` in the study's main thread (elsewhere, e.g. a test's thread, they
    are left as they are)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    prev = {s: signal.signal(s, _raise_stopped) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in prev.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def running(out: Path, study: str, steps: list[str], argv: list[str] | None,
            log: Callable[[str], None]) -> Iterator[StudyRun]:  # fmt: skip
    """Hold the study's lock and status while the body runs: 'done' when it ends, 'failed' with the error, and on a
    signal or a cancelled sweep its runs cancelled and 'cancelled' with the command that resumes it (re-raised as
    ``StudyStopped``). A second process on the same folder is refused while the first holds it."""
    from backend.core.process import Busy, FileLock, identity

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    lock = FileLock(out / LOCK, f"the study in {out}", "{what} is already running (pid {pid}); wait for it, or Stop it")
    try:
        lock.acquire()
    except Busy as exc:
        raise DetourError(str(exc)) from None
    run = StudyRun(out, {"state": "running", "study": study, "pid": os.getpid(), "pid_identity": identity(),
                         "started_at": time.time(), "finished_at": None, "error": None, "current_step": None,
                         "steps_total": len(steps), "steps_done": 0, "resume_argv": argv}, log, steps)  # fmt: skip
    try:
        with _signals_stop():
            run.write()
            try:
                yield run
            except (StudyStopped, KeyboardInterrupt) as exc:
                _cancel_on_stop(run, str(exc) or "interrupted")
                raise StudyStopped(run.state["error"]) from None
            except BaseException as exc:
                run.write(state="failed", error=f"{type(exc).__name__}: {exc}", finished_at=time.time())
                raise
            run.write(state="done", current_step=None, steps_done=len(steps), finished_at=time.time())
    finally:
        lock.release()


def _cancel_on_stop(run: StudyRun, why: str) -> None:
    """Cancel every queued and running run of the study's sweeps, further signals ignored meanwhile (a second Ctrl-C
    must not leave half of them queued; ``_signals_stop`` puts the handlers back), then write 'cancelled'."""
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
    try:
        n = len(_cancel_busy(run.out))
    except DetourError as exc:
        n = 0
        run.log(f"could not cancel every run: {exc}")
    resume = "rerun the same command, or Resume in the Reports tab"
    run.write(state="cancelled", finished_at=time.time(), error=f"stopped ({why}); {resume}")
    run.log(
        f"stopped ({why}): {n} queued or running runs cancelled (a running one saves a checkpoint first); "
        f"to resume: {resume}"
    )

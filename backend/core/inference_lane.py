"""The app's model inference in one lane below training: one thread, a bounded torch thread count, a lower priority.

On a lab server the app and a training run share the cores. Left alone, every request the app serves ran torch on
all cores at once (intra-op threads times concurrent requests: more threads than cores, each spinning at its
barriers), and a run fell to 4% of its solo rate under 20 users. Here:

* ``bound_threads()`` (called once at app start) caps torch in the app process: ``DETOUR_APP_THREADS`` intra-op
  threads (default 1) and one inter-op thread;
* ``run(fn, *args)`` executes ``fn`` in the one inference thread, which lowers its own priority to nice
  ``DETOUR_APP_NICE`` (default 10) when it starts. On Linux a nice value is per thread, so the app's web server and
  the trainers it starts (they inherit the priority of the thread that spawns them) stay at the normal priority;
  only inference yields to training. Requests of every tab queue for this one thread, so the app never computes
  on more than ``DETOUR_APP_THREADS`` cores at once, and each call is a whole batch (the tabs batch their users).

Where the kernel groups processes by session (``/proc/sys/kernel/sched_autogroup_enabled`` = 1 and no CPU
cgroups), a nice value only orders threads within one session: the app and a detached trainer then get a fair
share each, and the bounded thread count is what leaves the trainer its cores. The session's own nice is
``DETOUR_APP_SESSION_NICE`` (``lower_session``, default 0: on an equal footing). Lowered to 10, the app kept a run
at 56% of its solo rate but answered fill-mask in 22.5 s (p95) under 20 users; on an equal footing, with the queued
trainers' threads sleeping instead of spinning at their barriers (``jobs.sharing_env``), both hold (the load bench's
table in docs/app.md).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from backend.core.errors import DetourError
from backend.core.process import Busy, FileLock, holder_pid, is_held

THREADS_ENV = "DETOUR_APP_THREADS"
NICE_ENV = "DETOUR_APP_NICE"
SESSION_NICE_ENV = "DETOUR_APP_SESSION_NICE"
DEFAULT_THREADS = 1
DEFAULT_NICE = 10
DEFAULT_SESSION_NICE = 0

T = TypeVar("T")
_lane: ThreadPoolExecutor | None = None
_lane_lock = threading.Lock()


def _env_int(name: str, default: int, low: int, high: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise DetourError(f"{name}={raw!r}: expected a whole number from {low} to {high}") from None
    if not low <= value <= high:
        raise DetourError(f"{name}={raw!r}: expected a whole number from {low} to {high}")
    return value


def settings() -> dict[str, int]:
    """{'threads', 'nice', 'session_nice'} from the environment (a bad value is one clear DetourError)."""
    return {
        "threads": _env_int(THREADS_ENV, DEFAULT_THREADS, 1, os.cpu_count() or 1),
        "nice": _env_int(NICE_ENV, DEFAULT_NICE, 0, 19),
        "session_nice": _env_int(SESSION_NICE_ENV, DEFAULT_SESSION_NICE, 0, 19),
    }


def bound_threads(threads: int | None = None) -> int:
    """Cap torch's threads in this process (intra-op ``threads``, inter-op 1); returns the intra-op count."""
    import torch

    n = settings()["threads"] if threads is None else threads
    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # inter-op work already ran in this process: its pool is fixed by now
        pass
    return n


AUTOGROUP = Path("/proc/self/autogroup")


def lower_session(nice: int | None = None) -> int | None:
    """Where the kernel groups processes by session (autogroup), give this process's session the nice ``nice``
    (default ``DETOUR_APP_SESSION_NICE``, 0); returns it, or None where there is no autogroup to set. A per-thread
    nice does not reach across sessions, and the trainers the app starts run in sessions of their own: raise it to
    favour the runs over the users (at 10 the users waited 22.5 s for a fill-mask under 20 users, p95). Only an app
    that leads its own session sets it (``setsid python -m app``, a service manager): started from a terminal, its
    session is the user's shell and everything else run there."""
    nice = settings()["session_nice"] if nice is None else nice
    if os.getsid(0) != os.getpid():
        return None
    try:
        if Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() != "1":
            return None
        AUTOGROUP.write_text(str(nice))
        return int(AUTOGROUP.read_text().split("nice")[-1])
    except (OSError, ValueError):
        return None


def thread_nice() -> int:
    """The calling thread's own nice value (Linux: per thread)."""
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def lower_this_thread(nice: int) -> int:
    """Raise the calling thread's nice value to ``nice`` (never lowers it: that needs privileges); returns it."""
    tid = threading.get_native_id()
    current = os.getpriority(os.PRIO_PROCESS, tid)
    if nice > current:
        os.setpriority(os.PRIO_PROCESS, tid, nice)
    return os.getpriority(os.PRIO_PROCESS, tid)


def _start_lane() -> None:
    lower_this_thread(settings()["nice"])


def run(fn: Callable[..., T], *args, **kwargs) -> T:
    """``fn(*args, **kwargs)`` in the inference lane (the one low-priority thread); waits for its result."""
    global _lane
    with _lane_lock:
        if _lane is None:
            _lane = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inference", initializer=_start_lane)
    return _lane.submit(fn, *args, **kwargs).result()


APP_LOCK = ".app.lock"  # in the runs folder: held by the app that serves it, so the doctor can find its process


def hold_app_lock(runs_root: Path) -> FileLock | None:
    """Hold ``runs_root/.app.lock`` (its pid inside) while this app serves ``runs_root``; None when another app holds
    it already (the doctor then names that one)."""
    try:
        return FileLock(runs_root / APP_LOCK, "app").acquire()
    except (Busy, OSError):
        return None


def app_pid(runs_root: Path) -> int | None:
    """The pid of the live app serving ``runs_root``, or None."""
    path = runs_root / APP_LOCK
    return holder_pid(path) if path.exists() and is_held(path) else None

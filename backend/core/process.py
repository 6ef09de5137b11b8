"""Process control in one place: detached children, per-folder exclusive locks, liveness of a pid.

Training runs, the queue worker and replications outlive whoever started them (the app, a terminal): each
is spawned in its own session with its output appended to a log file (never a pipe that could fill up).
Who owns a run directory, a queue or a report folder is an ``flock``, which the kernel releases if the
holder dies, so a crash never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import threading
from pathlib import Path

from backend.core.errors import DetourError
from backend.core.paths import REPO_ROOT


class Busy(DetourError):
    """The lock is held by another live process (its pid is in the message)."""


class FileLock:
    """An exclusive ``flock`` on ``path`` holding the owner's pid.

    ``with FileLock(path, "run x"):`` raises ``Busy("run x: already held by pid N")`` when another process holds
    it. ``busy_message`` may use ``{pid}`` and ``{what}``. With ``wait=True`` it blocks until the holder releases
    it (or dies) instead, after calling ``on_wait(message)`` once.
    """

    def __init__(
        self,
        path: str | Path,
        what: str,
        busy_message: str = "{what}: busy (held by pid {pid})",
        wait: bool = False,
        on_wait=None,
    ):
        self.path, self.what, self.busy_message = Path(path), what, busy_message
        self.wait, self.on_wait = wait, on_wait
        self.fd: int | None = None

    def acquire(self) -> FileLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            message = self.busy_message.format(what=self.what, pid=holder)
            if not self.wait:
                os.close(fd)
                raise Busy(message) from None
            if self.on_wait is not None:
                self.on_wait(f"{message}; waiting")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> FileLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def holder_pid(path: str | Path) -> int | None:
    """The pid written in a lock file (whether or not it is still alive), or None."""
    try:
        raw = Path(path).read_text().strip()
    except OSError:
        return None
    return int(raw) if raw.isdigit() else None


def pid_alive(pid: int | None) -> bool:
    """True if ``pid`` runs (a zombie counts as dead)."""
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")  # a zombie child still answers kill(0): look at /proc where it exists
    if stat.exists():
        try:
            return stat.read_text().split(") ", 1)[1][0] != "Z"
        except (OSError, IndexError):
            return True
    return True


def boot_id() -> str:
    """This boot of this machine: the kernel's random boot id (Linux), else psutil's boot time. A pid recorded under
    another boot names nobody (pids restart from 1 after a reboot)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        import psutil

        return f"boot-{psutil.boot_time():.0f}"


def identity(pid: int | None = None) -> dict | None:
    """Who ``pid`` (default: this process) is, in a form that survives pid reuse: its start time (psutil
    ``create_time``, and the same counted from boot, which clock corrections do not move) and the boot id.
    None when no such process runs."""
    import psutil

    pid = os.getpid() if pid is None else int(pid)
    try:
        started = psutil.Process(pid).create_time()
    except (psutil.Error, ValueError):
        return None
    return {"started": started, "since_boot": round(started - psutil.boot_time(), 2), "boot": boot_id()}


def is_process(pid: object, ident: object) -> bool:
    """True only when ``pid`` runs and is the very process ``ident`` (from ``identity``) recorded: same boot, same
    start. A pid without a recorded identity proves nothing (a hand-written or pre-identity status), and a pid
    now held by another process -- after a reboot or pid reuse -- is not it."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or not isinstance(ident, dict):
        return False
    if ident.get("boot") != boot_id() or not pid_alive(pid):
        return False
    now = identity(pid)
    if now is None:
        return False
    try:
        return abs(float(now["since_boot"]) - float(ident["since_boot"])) < 0.015  # psutil's ticks: 1/100 s
    except (KeyError, TypeError, ValueError):
        return False


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment for a ``python -m backend ...`` child: unbuffered, with the repository importable."""
    env = dict(os.environ)
    env.update(extra or {})
    env["PYTHONUNBUFFERED"] = "1"
    pp = env.get("PYTHONPATH", "")
    if str(REPO_ROOT) not in pp.split(os.pathsep):
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), pp]) if pp else str(REPO_ROOT)
    return env


def spawn_detached(argv: list[str], log_path: Path, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``argv`` in its own session, output appended to ``log_path``; never a shell, never a pipe.

    A daemon thread waits on the child, so it is reaped the moment it exits: the app starts a queue worker and
    may start nothing else for hours, and an unwaited child stays a defunct (zombie) entry that long. ``wait``
    stores the exit code in the ``Popen``, so a caller that keeps it still reads it with ``poll``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv,
            cwd=str(REPO_ROOT),
            env=child_env(extra_env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()
    return proc

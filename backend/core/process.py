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
import time
from pathlib import Path

from backend.core.errors import DetourError
from backend.core.paths import REPO_ROOT

LOCK_FD_ENV = "DETOUR_LOCK_FD"  # the fd of a FileLock a parent handed to this process (spawn_detached keep_lock)


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
            _flock_nb(fd, fcntl.LOCK_EX)
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

    def adopt(self, fd: int) -> FileLock:
        """Take over the lock a parent acquired and passed down (``spawn_detached(..., keep_lock=...)``): the
        kernel held it for this process from its first instant, so no one saw the run unclaimed in between. The fd
        must be this lock's file (same inode); it is made non-inheritable again, so nothing this process starts
        keeps the lock alive after it."""
        st, want = os.fstat(fd), os.stat(self.path)
        if (st.st_dev, st.st_ino) != (want.st_dev, want.st_ino):
            raise DetourError(f"{self.what}: the inherited lock fd {fd} is not {self.path}")
        os.set_inheritable(fd, False)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self.fd = fd
        return self

    def hand_over(self) -> None:
        """Close this process's copy without unlocking (``LOCK_UN`` would free it for the child too): after
        ``spawn_detached(..., keep_lock=self)`` the child alone holds it, until it exits."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

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


def _flock_nb(fd: int, op: int) -> None:
    """A non-blocking ``flock`` that looks a few times over ~0.1 s before giving up: ``is_held`` probes with a shared
    lock held for microseconds, which must never make a real owner fail as "busy"."""
    for attempt in range(5):
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if attempt == 4:
                raise
            time.sleep(0.02)


def is_held(path: str | Path) -> bool:
    """True while some live process holds the ``FileLock`` at ``path`` (the kernel says so: a holder that died
    released it). Probes with a shared lock taken and dropped at once; a missing file is held by nobody."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops the probe's shared lock
    return False


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


def spawn_detached(
    argv: list[str], log_path: Path, extra_env: dict[str, str] | None = None, keep_lock: FileLock | None = None
) -> subprocess.Popen:
    """Start ``argv`` in its own session, output appended to ``log_path``; never a shell, never a pipe.

    ``keep_lock``: a held ``FileLock`` the child inherits (its fd number in ``DETOUR_LOCK_FD``; the child calls
    ``FileLock.adopt``) and this process then lets go of (``hand_over``): the lock is the child's from the moment it
    exists, so a parent killed before it could write down the child's pid leaves nothing unclaimed.

    A daemon thread waits on the child, so it is reaped the moment it exits: the app starts a queue worker and
    may start nothing else for hours, and an unwaited child stays a defunct (zombie) entry that long. ``wait``
    stores the exit code in the ``Popen``, so a caller that keeps it still reads it with ``poll``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    extra_env = dict(extra_env or {})
    if keep_lock is not None:
        extra_env[LOCK_FD_ENV] = str(keep_lock.fd)
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
            pass_fds=(keep_lock.fd,) if keep_lock is not None else (),
        )
    if keep_lock is not None:
        keep_lock.hand_over()
    threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()
    return proc

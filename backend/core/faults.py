"""The one rule for errors at the top of the CLI, the queue worker and the app, and the space a failure needs.

An error the user can act on -- a ``DetourError`` (a refusal: a config key, a corrupt checkpoint, NaN weights) or a
fault of the machine (``OSError`` such as a full disk, a read-only folder, a permission) -- is one line naming the
file or key and what to do, exit 2. Anything else is a bug: its traceback is printed and it says so, exit 1.

A full disk also makes the failure itself unwritable (status.json stayed ``running``): ``SpaceReserve`` holds a few
blocks from the start of a run and gives them back the moment recording the failure needs them.
"""

from __future__ import annotations

import errno
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TextIO, TypeVar

from backend.core.errors import DetourError

T = TypeVar("T")

EXIT_USER, EXIT_BUG = 2, 1
_SPACE = "free space on that disk (or point DETOUR_RUNS_DIR / --out at another one), then resume or run it again"
_READONLY = (
    "that folder is read-only: remount it writable or point DETOUR_RUNS_DIR / DETOUR_EVALS_DIR / --out elsewhere"
)
_DENIED = "this user may not use it: fix its permissions or choose another folder"
# errno -> what to do; these are faults of the machine or of a path the user gave, never bugs of ours
HINTS: dict[int, str] = {
    errno.ENOSPC: _SPACE,
    errno.EDQUOT: _SPACE,
    errno.EFBIG: "the file outgrew this filesystem's (or the process's) size limit; " + _SPACE,
    errno.EROFS: _READONLY,
    errno.EACCES: _DENIED,
    errno.EPERM: _DENIED,
    errno.ENOENT: "it does not exist (deleted or moved?): check the path",
    errno.ENOTDIR: "a part of that path is a file, not a folder: move the file or choose another folder",
    errno.EISDIR: "that is a folder where a file was expected: choose a file",
    errno.ENAMETOOLONG: "the path is too long: choose a shorter name or folder",
    errno.ELOOP: "too many symbolic links (a loop?): fix the link",
    errno.EIO: "the disk reported an input/output error: check the disk, then resume",
    errno.EMFILE: "too many open files: raise the limit (ulimit -n) and run it again",
}
NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
# what a library may wrap (a save in a thread): only the machine's own faults; a wrapped missing file may be a bug
MACHINE = (*NO_SPACE, errno.EROFS, errno.EIO)


def _os_line(exc: OSError) -> str:
    what = (exc.strerror or os.strerror(exc.errno)).lower() if exc.errno else str(exc)  # NoSpace: the bytes too
    where = f": {exc.filename}" if exc.filename else ""
    if exc.filename2:
        where += f" -> {exc.filename2}"
    return f"{what}{where}; {HINTS[exc.errno]}"


def user_message(exc: BaseException) -> str | None:
    """One line for an error the user can act on, or None when it is a bug (its traceback is wanted)."""
    if isinstance(exc, DetourError):
        return " ".join(str(exc).split())
    if isinstance(exc, OSError) and exc.errno in HINTS:
        return _os_line(exc)
    cause = exc.__cause__ or exc.__context__  # a library that wraps the OSError (a save in a thread, a loader)
    if isinstance(cause, OSError) and cause.errno in MACHINE:
        return _os_line(cause)
    return None


_TEXTS = {  # how libraries that wrap the OSError (safetensors, torch.save in a thread) still say it
    "no space left on device": errno.ENOSPC,
    "disk quota exceeded": errno.EDQUOT,
    "file too large": errno.EFBIG,
    "read-only file system": errno.EROFS,
}


def machine_fault(exc: BaseException) -> int | None:
    """The errno of a machine fault behind ``exc`` (its cause chain, or the text a wrapping library kept), or None."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in MACHINE:
            return e.errno
        text = str(e).lower()
        for words, number in _TEXTS.items():
            if words in text:
                return number
        e = e.__cause__ or e.__context__
    return None


def hint(number: int) -> str:
    """What to do about the errno ``number``."""
    return HINTS[number]


def report(exc: BaseException, out: TextIO | None = None) -> int:
    """Print ``exc`` by the rule (one line, or the traceback and 'this is a bug') and return the exit code."""
    out = out or sys.stderr
    line = user_message(exc)
    if line is not None:
        print(f"error: {line}", file=out, flush=True)
        return EXIT_USER
    traceback.print_exception(type(exc), exc, exc.__traceback__, file=out)
    print(f"internal error (a bug in Detour Lab, please report it): {type(exc).__name__}: {exc}", file=out, flush=True)
    return EXIT_BUG


def is_bug(exc: BaseException) -> bool:
    """Neither a refusal nor a fault of the machine (however a library wrapped it)."""
    return user_message(exc) is None and machine_fault(exc) is None


class SpaceReserve:
    """``size`` bytes of real blocks held in ``path`` while a run writes, released when recording its end needs them.

    Written (not sparse) and fsynced, so the filesystem has allocated them; ``release`` unlinks the file, and on a
    full disk that frees exactly what a status.json and a last log line take."""

    def __init__(self, path: str | Path, size: int = 256 * 1024):
        self.path, self.size = Path(path), size

    def hold(self) -> bool:
        """Reserve the space; False when even that no longer fits (the disk is full already)."""
        try:
            with open(self.path, "wb") as f:
                f.write(b"\0" * self.size)
                f.flush()
                os.fsync(f.fileno())
            return True
        except OSError:
            self.release()
            return False

    def release(self) -> None:
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass

    def write(self, fn: Callable[[], T]) -> T:
        """``fn()``; when it runs out of space, release the reserve and try once more."""
        try:
            return fn()
        except OSError as exc:
            if exc.errno not in NO_SPACE:
                raise
            self.release()
            return fn()

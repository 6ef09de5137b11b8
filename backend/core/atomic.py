"""Atomic file writes: temp file in the same folder, fsync, rename.

A reader (the app polling a run, a resume after kill -9) sees either the old
complete file or the new complete one, never a torn write.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from backend.core.faults import NO_SPACE
from backend.core.paths import open_confined, read_text_confined


class NoSpace(OSError):
    """A write the disk had no room for, naming the file and the bytes it needed (an ``OSError`` with the same
    errno, so whoever frees space and tries again still recognises it)."""

    def __init__(self, number: int, path: Path, needed: int):
        try:
            free = f"{shutil.disk_usage(path.parent if path.parent.exists() else path.anchor).free:,} bytes free"
        except OSError:
            free = "free space unknown"
        super().__init__(number, f"{os.strerror(number)} (writing {needed:,} bytes; {free} there)", str(path))
        self.needed = needed


def write_bytes(path: str | Path, data: bytes, make_parents: bool = True) -> None:
    """``make_parents`` False: a missing folder is an error, never recreated (a run folder moved away meanwhile).
    A failed write removes its temporary file (on a full disk it would keep the disk full) and a full disk is
    ``NoSpace``, naming the file and the bytes it needed."""
    path = Path(path)
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        if exc.errno in NO_SPACE:
            raise NoSpace(exc.errno, path, len(data)) from exc
        raise
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno in NO_SPACE:
            raise NoSpace(exc.errno, path, len(data)) from exc
        raise


def write_text(path: str | Path, text: str, make_parents: bool = True) -> None:
    write_bytes(path, text.encode("utf-8"), make_parents)


def write_json(path: str | Path, obj: Any, make_parents: bool = True) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n", make_parents)


# libyaml's emitter where it is installed: the pure-Python one took 80 ms per run config, most of the time a
# 1,000-run sweep spent queueing; both write the same YAML for the same data (safe types only)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def write_yaml(path: str | Path, obj: Any, make_parents: bool = True) -> None:
    write_text(path, yaml.dump(obj, Dumper=_DUMPER, sort_keys=False, allow_unicode=True), make_parents)


def json_line(row: dict) -> str:
    return json.dumps(row, default=str) + "\n"


def append_jsonl(path: str | Path, row: dict, make_parents: bool = True) -> None:
    """Append one JSON line with a single write() + fsync.

    A line is written whole or (after a hard kill) as a partial last line that
    readers skip, so earlier rows are never damaged.
    """
    path = Path(path)
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    line = json_line(row).encode("utf-8")
    try:
        with open(path, "ab") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:  # a partial last line is skipped by readers; the message says what did not fit
        if exc.errno in NO_SPACE:
            raise NoSpace(exc.errno, path, len(line)) from exc
        raise


def read_json(path: str | Path) -> Any:
    """The JSON in ``path``, or None when it is missing or unreadable (not written yet, or not JSON). A file that
    links out of its folder is refused (``paths.OutsideRoot``), never read."""
    try:
        return json.loads(read_text_confined(path))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def read_jsonl(path: str | Path) -> list[dict]:
    """Read JSON lines, skipping a torn last line left by a hard kill, and any line that is not one JSON object
    (bytes that are not UTF-8, a list or a number written by something else: every reader takes rows as mappings).
    A file that links out of its folder is refused (``paths.OutsideRoot``), never read."""
    rows: list[dict] = []
    path = Path(path)
    if not path.exists():
        return rows
    with open_confined(path, "r", encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def replace_dir(tmp_dir: str | Path, final_dir: str | Path) -> None:
    """Move a fully written temp directory into place; the old one is removed only after."""
    tmp_dir, final_dir = Path(tmp_dir), Path(final_dir)
    old = None
    if final_dir.exists():
        old = final_dir.with_name(f".{final_dir.name}.old")
        if old.exists():
            shutil.rmtree(old)
        os.replace(final_dir, old)
    os.replace(tmp_dir, final_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)

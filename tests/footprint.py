"""The suite leaves the machine as it found it: neither the user's cache folder (token stores, measured rates) nor
the checkout (``runs/.app.lock``, an empty ``uploads/``) may change while it runs. ``start`` takes a listing of both
(every file's size and modification time, every folder) before the first test; ``finish`` compares after the last one
and fails the session naming what changed. Files git tracks are left out of the checkout's comparison (an edit made
by hand meanwhile is no test's doing). Under pytest-xdist the controller takes both listings, around all workers."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from backend.core.paths import REPO_ROOT

SESSION_ENV = "DETOUR_TEST_SESSION_ROOT"  # set by the process that chose the session's roots (its children keep them)
SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", ".hypothesis"}
_BEFORE: dict = {}


def user_cache(env_value: str | None) -> Path:
    """The cache folder the user's own runs use: ``DETOUR_CACHE_DIR`` as the shell set it, else the default."""
    return Path(env_value or Path.home() / ".cache" / "detour-lab").expanduser()


def session_root() -> Path:
    return Path(tempfile.mkdtemp(prefix="detour-tests-"))


def listing(root: Path) -> dict[str, tuple]:
    """relative path -> (size, mtime) of every file, ('dir',) of every folder, under ``root`` (bytecode caches left
    out: importing writes them)."""
    out: dict[str, tuple] = {}
    if not root.is_dir():
        return out
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS]
        rel = os.path.relpath(d, root)
        if rel != ".":
            out[rel] = ("dir",)
        for f in files:
            if f.endswith(".pyc") or f.startswith(".coverage"):
                continue
            p = os.path.join(d, f)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
    return out


def tracked() -> set[str]:
    """The checkout's files git tracks (edited by hand while the suite runs, they are no test's doing), or none."""
    import subprocess

    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return set()
    return {p for p in out.stdout.decode("utf-8", "replace").split("\0") if p}


def _controller(config) -> bool:
    return not hasattr(config, "workerinput")


def start(config, cache: Path) -> None:
    if _controller(config):
        _BEFORE.update(checkout=listing(REPO_ROOT), cache=listing(cache), tracked=tracked())


def changes(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    added = [f"+ {p}" for p in sorted(set(after) - set(before))]
    gone = [f"- {p}" for p in sorted(set(before) - set(after))]
    changed = [f"~ {p}" for p in sorted(set(before) & set(after)) if before[p] != after[p]]
    return added + gone + changed


def finish(session, cache: Path, session_dir: Path | None) -> None:
    """Compare, fail the session on any change (naming it), and remove the session's temporary folder (in the process
    that made it)."""
    if session_dir is not None:
        shutil.rmtree(session_dir, ignore_errors=True)
    if not _controller(session.config) or not _BEFORE:
        return
    keep = lambda d: {p: v for p, v in d.items() if p not in _BEFORE["tracked"]}  # noqa: E731
    found = [(REPO_ROOT, changes(keep(_BEFORE["checkout"]), keep(listing(REPO_ROOT)))),
             (cache, changes(_BEFORE["cache"], listing(cache)))]  # fmt: skip
    found = [(where, c) for where, c in found if c]
    if not found:
        return
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = ["the tests changed folders they must never write (every file goes under the test's own tmp folder):"]
    for where, c in found:
        lines += (
            [f"  in {where}:"] + [f"    {x}" for x in c[:30]] + ([f"    ... {len(c) - 30} more"] if len(c) > 30 else [])
        )
    for ln in lines:
        (tr.write_line if tr else print)(ln)
    session.exitstatus = 1

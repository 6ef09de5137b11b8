"""What a process that died inside a first compiled call leaves in its run folder, read without importing torch (the
queue worker and every reader of a run's status read it; ``backend.engine.compiling`` writes it)."""

from __future__ import annotations

import contextlib
import json
import signal
from pathlib import Path

from backend.core.errors import DetourError
from backend.core.paths import read_text_confined

ABORT_MARK = ".compile-first-call.json"  # in the run folder while a first compiled call of a kind runs


def aborted_call(run_dir: Path) -> dict | None:
    """The first compiled call a process of this run was in when it died (``ABORT_MARK``), or None. Read before
    this process trains: one trainer per run folder, so a mark found then is a dead process's."""
    try:
        found = json.loads(read_text_confined(Path(run_dir) / ABORT_MARK))
    except (OSError, ValueError, DetourError):  # absent, torn, or a link out of the run folder: not read
        return None
    return found if isinstance(found, dict) else None


def died(mark: dict, returncode: int | None = None) -> str:
    """One line: which compiled call ended the run's process, and how when known."""
    how = ""
    if returncode is not None and returncode < 0:
        with contextlib.suppress(ValueError):
            how = f" ({signal.Signals(-returncode).name})"
    where = f" at step {mark['step']}" if mark.get("step") is not None else ""
    return f"the first compiled {mark.get('kind', 'call')}{where} ended the training process{how}"

"""The one checked reader of a JSON file that must hold an object (a results.json, a sweep.json): unreadable,
torn and wrong-kind files are one line naming the file and what is wrong, in the caller's error class, with the
caller's fix appended; what the object must contain stays with each caller."""

from __future__ import annotations

import json
from pathlib import Path

from backend.core.paths import read_text_confined


def read_json_object(path: Path, error: type[Exception], what: str, fix: str, fix_when_unreadable: bool = True) -> dict:
    """The JSON object in ``path`` (read confined: a link out of its folder is refused), or ``error`` saying
    ``{path}: unreadable (...)``, ``{path}: not valid JSON (...)`` or ``{path}: holds a JSON list, not {what}``."""
    try:
        text = read_text_confined(path, encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = f"{path}: unreadable ({getattr(exc, 'strerror', None) or exc})"
        raise error(f"{why}; {fix}" if fix_when_unreadable else why) from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(
            f"{path}: not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno}: torn or edited?); {fix}"
        ) from None
    if not isinstance(obj, dict):
        raise error(f"{path}: holds a JSON {type(obj).__name__}, not {what}; {fix}")
    return obj

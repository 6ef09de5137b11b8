"""Detour Lab browser app (``python -m app``). The UI holds no training logic: every action calls a backend function
that the CLI also uses.

This module has no gradio import: it holds what every tab shares, the models the dropdowns offer and the app's
path policy. Every path typed or uploaded in the UI is resolved inside the allowed roots -- the runs folder, the
uploads folder, the bundled assets, the evaluations folder and whatever ``DETOUR_ALLOWED_ROOTS`` lists
(``:``-separated, e.g. ``../shared/data``) -- or refused with a message that names the roots.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from backend.core.errors import DetourError
from backend.core.paths import ASSETS_DIR, evals_dir, runs_dir, uploads_dir

ALLOWED_ROOTS_ENV = "DETOUR_ALLOWED_ROOTS"
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")


class PathNotAllowed(DetourError):
    def __init__(self, what: str, value: str, message: str):
        self.key, self.value = what, value
        super().__init__(message)


def allowed_roots() -> list[Path]:
    roots = [runs_dir(), uploads_dir(), ASSETS_DIR.resolve(), evals_dir()]
    for part in os.environ.get(ALLOWED_ROOTS_ENV, "").split(os.pathsep):
        if part.strip():
            roots.append(Path(part.strip()).expanduser().resolve())
    return roots


def _inside(p: Path, root: Path) -> bool:
    return p == root or p.is_relative_to(root)


def check_path(value: str | Path, what: str = "path", must_exist: bool = True) -> Path:
    """Resolve ``value`` (symlinks included) and require it inside an allowed root."""
    raw = str(value).strip()
    if not raw:
        raise PathNotAllowed(what, raw, f"{what}: empty path")
    p = Path(raw).expanduser()
    p = (p if p.is_absolute() else Path.cwd() / p).resolve()
    roots = allowed_roots()
    if not any(_inside(p, r) for r in roots):
        listed = ", ".join(str(r) for r in roots)
        raise PathNotAllowed(
            what,
            raw,
            f"{what}: '{raw}' is outside the folders this app may read ({listed}); "
            f"add its folder to {ALLOWED_ROOTS_ENV} (':'-separated) to allow it",
        )
    if must_exist and not p.exists():
        raise PathNotAllowed(what, raw, f"{what}: '{raw}' does not exist")
    return p


def looks_like_path(value: str) -> bool:
    v = value.strip()
    return v.startswith(("/", ".", "~")) or Path(v).expanduser().exists() or v.count("/") > 1 or "\\" in v


def check_model_spec(spec: str, what: str = "model") -> str:
    """A model as typed in the UI -> the spec the backend gets: a bundled name, a run name (-> its folder), an
    allowed path, or a hub id (loaded only when an action asks for it)."""
    from backend.engine.models import bundled_models

    spec = (spec or "").strip()
    if not spec:
        raise PathNotAllowed(what, spec, f"{what}: choose a model")
    if spec in bundled_models():
        return spec
    run = runs_dir() / spec
    if "/" not in spec and (run / "config.yaml").exists():
        return str(run)
    if looks_like_path(spec):
        return str(check_path(spec, what))
    if HUB_ID.match(spec):
        return spec
    raise PathNotAllowed(what, spec, f"{what}: '{spec}' is not a bundled model, a run, an allowed folder or a hub id")


def check_corpus_spec(spec: str, what: str = "data.corpus") -> str:
    spec = (spec or "").strip()
    if spec in ("", "demo"):
        return "demo"
    if looks_like_path(spec):
        return str(check_path(spec, what))
    if HUB_ID.match(spec):
        return spec
    raise PathNotAllowed(what, spec, f"{what}: '{spec}' is not 'demo', an allowed file or folder, or a hub dataset id")


def trained_runs() -> list:
    """Runs that have saved a model (a checkpoint or ``final/``), newest first: a run that has not saved anything
    yet would only fail to load."""
    from backend.engine.rundir import list_runs

    runs = [r for r in list_runs(runs_dir()) if (r.path / "final").exists() or (r.path / "checkpoints").exists()]
    return sorted(runs, key=lambda r: r.status.get("created_at") or 0, reverse=True)


def model_choices() -> list[str]:
    """The models every tab's dropdown offers: the bundled ones, then each run that has saved a model, newest
    first. Read again on every call: the tabs refresh their lists with it (``app.refresh.keep_fresh``)."""
    from backend.engine.models import bundled_models

    return bundled_models() + [r.name for r in trained_runs()]


def default_picks(choices: list[str], slots: int) -> list[str | None]:
    """What side-by-side slots start with: the bundled base, then the newest detour/MLM pair's two runs (else the
    newest runs): the three models a class compares."""
    from backend.core.paths import DEFAULT_MODEL

    picks = [DEFAULT_MODEL] if DEFAULT_MODEL in choices else choices[:1]
    pairs = [c.removesuffix("-detour") for c in choices if c.endswith("-detour")]
    pairs = [p for p in pairs if f"{p}-mlm" in choices]
    if pairs:
        newest = max(pairs, key=lambda p: (runs_dir() / f"{p}-detour").stat().st_mtime)
        picks += [f"{newest}-detour", f"{newest}-mlm"]
    else:
        picks += [c for c in choices if c not in picks][:2]
    return (picks + [None] * slots)[:slots]


def fill_empty_picks(picks: list, choices: list[str]) -> list:
    """A tab's slot values after its lists are read again: with nothing picked beside the first slot (the page as
    built, before any run), the ``default_picks``; otherwise the picks as they are."""
    if any(picks[1:]):
        return list(picks)
    defaults = default_picks(choices, len(picks))
    return [picks[0] or defaults[0], *defaults[1:]]


def md_escape(text: object) -> str:
    """Text for a gr.Markdown: '<mask>' and friends must show, not vanish as HTML tags."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def warn(exc: object) -> str:
    """An error as one Markdown line."""
    return f"⚠ {md_escape(exc)}"

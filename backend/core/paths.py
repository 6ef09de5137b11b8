"""Where things live, and what a folder under them may be called. One place, so the CLI, the app and the tests
agree. Each root has an environment variable that moves it (tests point them at temporary folders)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from backend.core.errors import DetourError

REPO_ROOT = Path(__file__).resolve().parents[2]
ASSETS_DIR = REPO_ROOT / "assets"
BUNDLED_MODELS_DIR = ASSETS_DIR / "models"
BUNDLED_TOKENIZER_DIR = ASSETS_DIR / "tokenizer"
DEMO_DIR = ASSETS_DIR / "demo"
DEMO_CORPUS = DEMO_DIR / "bio_corpus.txt"
DEMO_NER_DIR = DEMO_DIR / "ner"
DEFAULT_MODEL = "detour-tiny-en"
SHARED_ENV = "DETOUR_SHARED_DATA"


RUNS_ENV, REPORTS_ENV, EVALS_ENV, UPLOADS_ENV = (
    "DETOUR_RUNS_DIR",
    "DETOUR_REPORTS_DIR",
    "DETOUR_EVALS_DIR",
    "DETOUR_UPLOADS_DIR",
)
CACHE_ENV = "DETOUR_CACHE_DIR"
SWEEPS_ENV = "DETOUR_SWEEPS_DIR"
EXPORTS_ENV = "DETOUR_EXPORTS_DIR"
MAX_NAME_LEN = 100
NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.-]{{0,{MAX_NAME_LEN - 1}}}")  # a run or report name: one plain folder


_SAID: set[str] = set()  # the variables whose value this process has said it reads otherwise


def folder_from_env(env: str, default: Path) -> Path:
    """The folder an environment variable names, absolute. Empty (``DETOUR_RUNS_DIR=''`` put a whole run into the
    working directory) means the default; relative means that folder under the working directory of the process
    that read it first. Either is said once, on stderr, and the absolute folder is put back in the environment so
    the processes this one starts (the queue worker, the trainers: another working directory) use the same one."""
    import sys

    raw = os.environ.get(env)
    if raw is None:
        return Path(default).expanduser().resolve()
    if not raw.strip():
        path, said = Path(default).expanduser().resolve(), f"{env} is set but empty: using the default {{path}}"
    elif not Path(raw).expanduser().is_absolute():
        path = Path(raw).expanduser().resolve()
        said = f"{env}={raw} is a relative path: using {{path}} (under the working directory {Path.cwd()})"
    else:
        return Path(raw).expanduser().resolve()
    if env not in _SAID:
        _SAID.add(env)
        print("note: " + said.format(path=path), file=sys.stderr, flush=True)
    os.environ[env] = str(path)
    return path


def _root(env: str, default: str) -> Path:
    return folder_from_env(env, REPO_ROOT / default)


def runs_dir() -> Path:
    """Root of run directories (``DETOUR_RUNS_DIR``; default ``<repo>/runs``)."""
    return _root(RUNS_ENV, "runs")


def reports_dir() -> Path:
    """Root of replication reports (``DETOUR_REPORTS_DIR``; default ``<repo>/reports``)."""
    return _root(REPORTS_ENV, "reports")


def evals_dir() -> Path:
    """Root of downstream evaluations (``DETOUR_EVALS_DIR``; default ``<repo>/evals``)."""
    return _root(EVALS_ENV, "evals")


def sweeps_dir() -> Path:
    """Root of sweep folders (``DETOUR_SWEEPS_DIR``; default ``<repo>/sweeps``)."""
    return _root(SWEEPS_ENV, "sweeps")


def exports_dir() -> Path:
    """Where the app exports models (``python -m backend export --out`` may write anywhere new)."""
    return _root(EXPORTS_ENV, "exports")


def uploads_dir() -> Path:
    """Where the app stores uploaded corpora and configs (``DETOUR_UPLOADS_DIR``; default ``<repo>/uploads``)."""
    return _root(UPLOADS_ENV, "uploads")


def cache_dir() -> Path:
    """Root of rebuildable caches such as token stores (``DETOUR_CACHE_DIR``; default ``~/.cache/detour-lab``)."""
    return folder_from_env(CACHE_ENV, Path.home() / ".cache" / "detour-lab")


def shared_data_dir() -> Path:
    """``../shared/data`` beside the checkout (``DETOUR_SHARED_DATA``): real public data for tests and benchmarks,
    never copied in."""
    return folder_from_env(SHARED_ENV, REPO_ROOT.parent / "shared" / "data")


def is_plain_name(name: object) -> bool:
    """A name that is one folder: letters, digits, '_', '-', '.'; no '/', no '..', not hidden."""
    return isinstance(name, str) and bool(NAME.fullmatch(name)) and ".." not in name  # fullmatch: '$' allows a "\n"


def shared_data(name: str) -> Path | None:
    """Path to a ``../shared/data`` set, or None when absent (tests skip with a reason)."""
    p = shared_data_dir() / name
    return p if p.exists() else None


class OutsideRoot(DetourError):
    """A file that links (itself, or a folder on its way) out of the folder it is read from: refused, never read."""


def confined(path: str | Path, root: str | Path | None = None) -> Path:
    """``path`` resolved, when it stays inside ``root`` (default: the folder that holds it); else ``OutsideRoot``.

    Every file the app, the CLI or the doctor reads from a run, sweep, report, evaluation or hub-cache folder goes
    through here: ``runs/X/train.log`` made a link to ``/etc/passwd`` is one refused line, never shown. A link that
    stays inside (a hub snapshot's file -> ``../../blobs/...`` with the model's cache folder as root) is followed."""
    path = Path(path)
    base = Path(root) if root is not None else path.parent
    try:
        real, inside = path.resolve(), base.resolve()
    except (OSError, RuntimeError) as exc:  # a link loop: Python 3.11 raises RuntimeError
        raise OutsideRoot(f"{path}: its links go round in a loop ({exc}); remove the link") from None
    if not real.is_relative_to(inside):
        raise OutsideRoot(f"{path} links to {real}, outside {inside}; refused: remove the link or copy the file in")
    return real


def open_confined(path: str | Path, mode: str = "rb", root: str | Path | None = None, **kw):
    """``open`` of a file that must stay inside ``root`` (see ``confined``)."""
    return open(confined(path, root), mode, **kw)  # noqa: SIM115 (the caller closes it)


def read_text_confined(path: str | Path, root: str | Path | None = None, **kw) -> str:
    return confined(path, root).read_text(**kw)


def read_bytes_confined(path: str | Path, root: str | Path | None = None) -> bytes:
    return confined(path, root).read_bytes()


def tail_text(path: str | Path, max_bytes: int = 64_000, root: str | Path | None = None) -> str:
    """The last ``max_bytes`` of a log, decoded leniently, read only if it stays inside ``root``."""
    with open_confined(path, "rb", root) as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - max_bytes))
        return f.read().decode("utf-8", errors="replace")

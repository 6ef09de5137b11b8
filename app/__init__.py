"""Detour Lab browser app (``python -m app``). The UI holds no training logic: every action calls a backend function
that the CLI also uses.

This module has no gradio import: it holds what every tab shares, the models the dropdowns offer and the app's
path policy. Every path typed or uploaded in the UI is resolved inside the allowed roots -- the folders the lab
writes its artifacts into (``backend.core.catalogue.roots``: runs, sweeps and their runs, evaluations and suite
evaluations, reports, uploads), the bundled assets and whatever ``DETOUR_ALLOWED_ROOTS`` lists (``:``-separated,
e.g. ``../shared/data``) -- or refused with a message that names the roots.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from backend.core import catalogue
from backend.core.errors import DetourError
from backend.core.paths import ASSETS_DIR, evals_dir, is_plain_name, runs_dir, uploads_dir  # noqa: F401 (tabs import them here)

ALLOWED_ROOTS_ENV = "DETOUR_ALLOWED_ROOTS"
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
# every run name a list has offered in this app: picked after its folder was deleted, it is a missing run, never a
# hub id (the hub's "Offline?" was the answer to a run deleted while the app listed it)
_LISTED_RUNS: set[str] = set()


# the pickers whose typed text is a value (a model, a run, a corpus): Enter keeps it (``main.JS``), never the first
# option the filter shows
TYPED_PICKER = ["typed-picker"]


class PathNotAllowed(DetourError):
    def __init__(self, what: str, value: str, message: str):
        self.key, self.value = what, value
        super().__init__(message)


def allowed_roots() -> list[Path]:
    roots = [*catalogue.roots(), ASSETS_DIR.resolve()]  # what the lab wrote itself (a sweep's runs too) is readable
    for part in os.environ.get(ALLOWED_ROOTS_ENV, "").split(os.pathsep):
        if part.strip():
            roots.append(Path(part.strip()).expanduser().resolve())
    return roots


def _inside(p: Path, root: Path) -> bool:
    return p == root or p.is_relative_to(root)


def check_path(value: str | Path, what: str = "path", must_exist: bool = True) -> Path:
    """Resolve ``value`` (symlinks included) and require it inside an allowed root (and, with ``must_exist``, on
    disk: a missing file is said to be missing first, wherever it was looked for)."""
    raw = str(value).strip()
    if not raw:
        raise PathNotAllowed(what, raw, f"{what}: empty path")
    try:
        p = Path(raw).expanduser()
        p = (p if p.is_absolute() else Path.cwd() / p).resolve()
    except (RuntimeError, OSError) as exc:  # a symbolic link loop (RuntimeError on Python 3.11), a bad '~user'
        raise PathNotAllowed(
            what, raw, f"{what}: '{raw}' cannot be resolved ({exc}); fix the link or the path"
        ) from None
    roots = allowed_roots()
    inside = any(_inside(p, r) for r in roots)
    listed = ", ".join(str(r) for r in roots)
    if must_exist and not p.exists():  # the first thing to fix: a file named "outside" sent users to the wrong fix
        where = "" if inside else f" (this app reads files in {listed})"
        raise PathNotAllowed(what, raw, f"{what}: '{raw}' does not exist{where}")
    if not inside:
        raise PathNotAllowed(
            what,
            raw,
            f"{what}: '{raw}' is outside the folders this app may read ({listed}); "
            f"add its folder to {ALLOWED_ROOTS_ENV} (':'-separated) to allow it",
        )
    return p


def run_folder(name: str, what: str = "run") -> Path | None:
    """The folder of run ``name`` (a plain name, its config.yaml present) resolved inside the runs folder, or None
    when there is no such run. A run folder that is a link out of the runs folder is refused, not followed."""
    if not is_plain_name(name):
        return None
    root = runs_dir()
    run = root / name
    if not (run / "config.yaml").exists():
        return None
    real = run.resolve()
    if not _inside(real, root):
        raise PathNotAllowed(
            what, name, f"{what}: run '{name}' is a link to {real}, outside the runs folder {root}; it is not read"
        )
    return real


def looks_like_path(value: str) -> bool:
    v = value.strip()
    return v.startswith(("/", ".", "~")) or Path(v).expanduser().exists() or v.count("/") > 1 or "\\" in v


def _resolve_field(spec: str, what: str):
    """(the ``ModelRef``, the checked path where a path was typed, else None): the one resolution a field gets."""
    from backend.core.errors import ModelSpecError
    from backend.engine.model_ref import resolve_model

    spec = (spec or "").strip()
    if not spec:
        raise PathNotAllowed(what, spec, f"{what}: choose a model")
    if spec in _LISTED_RUNS and not (runs_dir() / spec).exists():
        from backend.engine.rundir import no_run

        raise PathNotAllowed(what, spec, f"{what}: {no_run(spec)} (renamed, moved or deleted since it was listed)")
    path = check_path(spec, what) if looks_like_path(spec) else None  # nothing outside the roots is even read
    try:
        ref = resolve_model(str(path) if path else spec)
    except ModelSpecError as exc:
        raise PathNotAllowed(what, spec, f"{what}: {str(exc).replace(str(path), spec) if path else exc}") from None
    return ref, path


def model_ref(spec: str, what: str = "model"):
    """A model as typed in any field of the app -> the checked ``ModelRef`` the backend gets, by the backend's one
    resolver (``backend.engine.model_ref``): a bundled name, a run, a sweep's run, a hub id (a picker's cached label
    -> its hub id), a folder. What is typed as a path must also lie inside the allowed roots; the reference then
    carries the path as typed for its name (``../runs/x``, not the absolute folder). A name that resolves to
    nothing is refused here, with the names it was close to. An action resolves each name once, here, and passes
    the reference down."""
    from dataclasses import replace

    ref, path = _resolve_field(spec, what)
    return replace(ref, spec=spec.strip()) if path else ref


def check_model_spec(spec: str, what: str = "model") -> str:
    """``model_ref`` as the string a command line takes: a run by its name -> its folder (found in the lab's own
    folders), a path -> its checked absolute path, anything else its resolved name (a cached label -> its hub id)."""
    ref, path = _resolve_field(spec, what)
    if path:
        return str(path)
    return ref.run or ref.spec


def model_name(spec: str | None) -> str:
    """What results, tables and chart labels call a model picked in a field: the name, never a picker's label (a
    cached model's ``org/name (cached, 5.5M params)`` is ``org/name``)."""
    from backend.engine.hub_cache import strip_label

    return strip_label((spec or "").strip())


def local_corpora() -> dict[str, str]:
    """The corpora a bare word may have meant, by name -> what to type: 'demo', and each file or folder directly in
    the uploads folder and in the folders ``DETOUR_ALLOWED_ROOTS`` adds (``../shared/data``'s corpora)."""
    found = {"demo": "demo"}
    extra = [Path(p.strip()).expanduser() for p in os.environ.get(ALLOWED_ROOTS_ENV, "").split(os.pathsep) if p.strip()]
    for root in (uploads_dir(), *extra):
        try:
            found.update({p.name: str(p) for p in sorted(root.iterdir())[:200] if not p.name.startswith(".")})
        except OSError:  # a root that is missing, a file or unreadable offers nothing
            continue
    return found


def check_corpus_spec(spec: str, what: str = "data.corpus") -> str:
    """A corpus as typed in the Launch form -> the spec the config gets. A bare word close to a local corpus
    ('demp', a corpus folder's name without its path) is refused naming it: it passed as a hub dataset id and
    failed only at launch, offline or not."""
    from backend.engine.model_ref import close_names

    spec = (spec or "").strip()
    if spec in ("", "demo"):
        return "demo"
    if looks_like_path(spec):
        return str(check_path(spec, what))
    if HUB_ID.match(spec):
        local = local_corpora()
        if "/" not in spec and (near := close_names(spec, list(local))):
            shown = ", ".join(f"'{local[n]}'" for n in near)
            raise PathNotAllowed(what, spec, f"{what}: '{spec}' is not 'demo', an allowed file or folder, or a hub "
                                 f"dataset id (org/name); did you mean {shown}?")  # fmt: skip
        return spec
    raise PathNotAllowed(what, spec, f"{what}: '{spec}' is not 'demo', an allowed file or folder, or a hub dataset id")


def trained_runs() -> list:
    """Runs that have saved a model (a checkpoint or ``final/``), newest first: a run that has not saved anything
    yet would only fail to load."""
    from backend.engine.rundir import list_runs

    root = runs_dir()
    runs = [r for r in list_runs(root) if (r.path / "final").exists() or (r.path / "checkpoints").exists()]
    runs = [r for r in runs if _inside(r.path.resolve(), root)]  # a link out of the runs folder is not offered
    _LISTED_RUNS.update(r.name for r in runs)
    return sorted(runs, key=lambda r: r.status.get("created_at") or 0, reverse=True)


def model_choices() -> list[str]:
    """The models every tab's dropdown offers: the bundled ones, then each run that has saved a model, newest
    first, then the masked-LM encoders of the user's Hugging Face cache labelled ``org/name (cached, size)``. Read
    again on every call: the tabs refresh their lists with it (``app.refresh.keep_fresh``)."""
    from backend.engine.hub_cache import cached_encoders
    from backend.engine.models import bundled_models

    return bundled_models() + [r.name for r in trained_runs()] + [m.label for m in cached_encoders()]


def base_of(cfg: dict) -> str | None:
    """The model a run started from, as the model lists name it: a run's name for a run folder, else the spec."""
    spec = str((cfg.get("model") or {}).get("name") or "").strip()
    if not spec or spec == "from_scratch":
        return None
    p = Path(spec)
    if p.is_absolute() and p.parent == runs_dir() and (p / "config.yaml").exists():
        return p.name
    return spec


def newest_pair() -> tuple[str | None, str | None, bool]:
    """The one rule every tab's default models follow (Analyze, Detour, Fill-mask): (the detour run, its MLM
    sibling, True) of the newest pair whose two runs both saved a model; without one, (the newest run, the base
    model it started from, False); with no run, (None, None, False)."""
    from backend.engine.rundir import pairs, read_config

    runs = trained_runs()  # newest first
    if found := pairs(runs):  # the catalogue's pairs, the newest first
        _, detour, mlm = found[0]
        return detour, mlm, True
    for r in runs:
        try:
            return r.name, base_of(read_config(r.path)), False
        except (DetourError, OSError, ValueError):  # an unknown key, an empty file, a link out: skipped, never fatal
            continue
    return None, None, False


def training_step(name: str | None) -> int | None:
    """For a run that is still training (no ``final/`` yet): the step of its newest saved model, the one a tab
    loads for it; else None."""
    from backend.engine.rundir import RunInfo, read_status, saved_models

    if not name or "/" in name:
        return None
    d = runs_dir() / name
    if not (d / "config.yaml").exists() or (d / "final" / "config.json").exists():
        return None
    if RunInfo(name, d, read_status(d)).state != "running":
        return None
    saved = saved_models(d)
    return saved[-1]["step"] if saved else None


def labelled(name: str | None) -> str:
    """A model's name as the tabs show it: a run still training says so, with the step of the model used."""
    step = training_step(name)
    return f"{name} (training, step {step})" if step is not None else str(name or "")


def labelled_choices(choices: list[str]) -> list[tuple[str, str]]:
    """Dropdown choices (label, value): the value stays the name, the label says which runs are still training."""
    return [(labelled(c), c) for c in choices]


def default_picks(choices: list[str], slots: int) -> list[str | None]:
    """What side-by-side slots start with (``newest_pair``): the bundled base and the newest pair's two runs: the
    three models a class compares; without a pair, the newest run's base and the run."""
    from backend.core.paths import DEFAULT_MODEL

    base = DEFAULT_MODEL if DEFAULT_MODEL in choices else (choices[:1] or [None])[0]
    a, b, paired = newest_pair()
    if a is None:
        picks = [base]
    elif paired:
        picks = [base, a, b]
    else:
        picks = [b or base, a]
    return (picks + [None] * slots)[:slots]


def follow_defaults(picks: list, shown: list | None, defaults: list) -> list:
    """A group of pickers' values when its lists are read again (page load, tab select, the tab's Refresh button):
    while every picker of the group still holds the default it was last given (``shown``, the defaults a tab keeps
    per page), the group takes the new ``defaults``; once the user has changed one of them (emptied it too), the
    group keeps its picks: they are a comparison the user chose. A slot filled once used to stay as it was: a page
    opened while a pair trained showed the detour run beside the base, and never the MLM run once it had saved."""
    shown = list(shown) if shown is not None else [None] * len(picks)
    untouched = all((p or None) == (s or None) for p, s in zip(picks, shown, strict=True))
    return list(defaults) if untouched else list(picks)


def md_escape(text: object) -> str:
    """Text for a gr.Markdown: '<mask>' and friends must show, not vanish as HTML tags."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def warn(exc: object) -> str:
    """An error as one Markdown line; a fault of the machine (a full disk, a read-only folder) by the CLI's rule:
    what happened, the path and what to do (``backend.core.faults``)."""
    from backend.core.faults import user_message

    line = user_message(exc) if isinstance(exc, BaseException) else None
    return f"⚠ {md_escape(line or exc)}"

"""The catalogue of what the lab makes: for each kind of artifact (run, pair, sweep, suite evaluation, evaluation,
CKA result, report, upload) what it is, where it lives, how it is named, how a folder or file is known to be one,
how the kinds are listed, and where a command may write one.

Data only, low in the layers: the CLI commands and every app tab read it, so they agree on three rules.

- **Writing** (``check_out_folder`` / ``claim_folder`` / ``check_out_file``): an output goes to a path that is new,
  or that an artifact of the same kind owns (its marker file says what wrote it). An existing file of another kind,
  a folder that holds anything else, a link, or a path inside a run's folder is refused in one line, before any
  work, naming the path and a free alternative. A suite evaluation owns its folder by its suite's name: another
  suite's evaluation is refused there.
- **Listing** (``entries``): every folder of a kind under its root, each either readable or listed as unreadable
  with its reason; a folder that cannot be read is never fatal to a list.
- **Roots** (``roots``): the folders the lab itself writes (runs, sweeps and their runs, evaluations and suite
  evaluations, reports, uploads); the app's allowed roots start from them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from backend.core.errors import DetourError
from backend.core.paths import evals_dir, exports_dir, reports_dir, runs_dir, sweeps_dir, uploads_dir

MARKER = ".detour-artifact.json"  # {"kind": ..., "name": ...}: written into a folder when a command claims it


class OutTaken(DetourError):
    """An output path that belongs to something else (a file, a foreign folder, another kind, a link)."""


def suites_dir() -> Path:
    """Where the app starts suite evaluations (``<evals>/suites/<name>``); the CLI's ``--out`` may be anywhere."""
    return evals_dir() / "suites"


@dataclass(frozen=True)
class Kind:
    """One kind of artifact. ``markers``: files whose presence in a folder says it is this kind (besides ``MARKER``),
    checked in ``KINDS`` order; ``shape``: a folder, a file, or derived (a pair is two runs)."""

    name: str
    what: str
    shape: str  # folder | file | derived
    root: Callable[[], Path] | None
    naming: str
    markers: tuple[str, ...] = ()


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("run", "one training run: config, status, metrics, checkpoints, final model", "folder", runs_dir,
             "runs/<name>/ (config name, or <pair>-detour / <pair>-mlm)", ("config.yaml",)),
        Kind("pair", "a detour run and its matched MLM run", "derived", runs_dir,
             "two runs whose config _meta names the same pair (or <pair>-detour / <pair>-mlm); rundir.pairs"),
        Kind("sweep", "a grid of matched runs x seeds with its report", "folder", sweeps_dir,
             "sweeps/<name>/ (sweep.json, runs/, report.md|html|json)", ("sweep.json",)),
        Kind("suite", "several fine-tuning tasks with the same models, one pooled report", "folder", suites_dir,
             "evals/suites/<suite name>/ from the app, any --out from the CLI (tasks/<task>/, suite.md|json|html)",
             ("suite.json",)),
        Kind("evaluation", "models fine-tuned x seeds on one task, compared pairwise", "folder", evals_dir,
             "evals/<timestamp>/ or any --out (results.json, results.md, models/)", ("results.json",)),
        Kind("cka", "a CKA, trajectory or weight-change result", "file", None, "any --out FILE.json (cka.json)"),
        Kind("report", "a study (the detour study or the hybrid-splits study) with its report", "folder", reports_dir,
             "reports/<name>/ or any --out path (settings.json, report.md|html|json)", ("settings.json",)),
        Kind("upload", "a corpus or config uploaded in the app", "file", uploads_dir, "uploads/<file>"),
        Kind("export", "a finished model as a self-contained Hub folder: weights, tokenizer, README.md model card",
             "folder", exports_dir, "exports/<run> from the app, any new --out from the CLI (never rewritten)"),
    )
}  # fmt: skip


# ------------------------------------------------------------------------------------------------ what a path is


def read_marker(folder: Path) -> dict | None:
    """The folder's marker (``{"kind", "name", ...}``), or None when there is none or it is not one."""
    p = Path(folder) / MARKER
    if p.is_symlink() or not p.is_file():
        return None
    try:
        m = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return m if isinstance(m, dict) and m.get("kind") in KINDS else None


def _recorded_name(folder: Path, kind: str) -> str | None:
    """The name a folder of ``kind`` was written for, from its marker, else its own files (a suite's suite.json)."""
    m = read_marker(folder)
    if m and m.get("name"):
        return str(m["name"])
    if kind == "report":  # a replication, or the hybrid-splits study (settings.json says which)
        try:
            st = json.loads((folder / "settings.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None
        return str(st.get("study") or "replication") if isinstance(st, dict) else None
    if kind == "suite":
        try:
            rep = json.loads((folder / "suite.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None
        return str(rep["suite"]) if isinstance(rep, dict) and rep.get("suite") else None
    return None


def kind_of(path: str | Path) -> str | None:
    """Which kind of artifact ``path`` is (a folder by its marker or its kind's files, a file by its content), or
    None: new, empty, or something else."""
    p = Path(path)
    if p.is_dir():
        if m := read_marker(p):
            return m["kind"]
        if (p / "config.yaml").is_file() and (p / "status.json").is_file():
            return "run"
        for k in KINDS.values():
            if k.name != "run" and any((p / f).is_file() for f in k.markers):
                return k.name
        if (p / "suite.log").is_file():  # a suite the app started before folders had a marker
            return "suite"
        return None
    if p.is_file() and p.suffix == ".json":
        return "cka" if _is_cka_json(p) else None
    return None


CKA_RESULT_KINDS = ("cka", "cka_trajectory", "weight_change")  # the "kind" each result of ``cka`` records


def _is_cka_json(p: Path) -> bool:
    """A JSON file ``cka`` wrote: a pair's matrix, a trajectory or a weight change (by the keys each one has)."""
    try:
        if p.stat().st_size > 64 * 2**20:
            return False
        d = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(d, dict) and d.get("kind") in CKA_RESULT_KINDS


def run_owning(path: str | Path) -> Path | None:
    """The run folder ``path`` is in (itself included), or None: a run owns everything under its folder."""
    p = Path(path).expanduser().absolute()
    for d in (p, *p.parents):
        if (d / "config.yaml").is_file() and (d / "status.json").is_file():
            return d
    return None


def _looks_ours(folder: Path, kind: str) -> bool:
    """A folder found by a kind's file that other programs also write (``settings.json``, ``results.json``) is one of
    ours only when that file says so; the lab's marker, ``sweep.json`` and ``suite.json`` are ours by name."""
    if read_marker(folder) is not None or kind not in ("report", "evaluation"):
        return True
    name = "settings.json" if kind == "report" else "results.json"
    try:
        d = json.loads((folder / name).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    keys = ("preset", "study") if kind == "report" else ("models", "task")
    return isinstance(d, dict) and any(k in d for k in keys)


def artifact_above(path: str | Path, part_of: str | Path | None = None) -> tuple[Path, str] | None:
    """The nearest folder above ``path`` that is an artifact of the lab, with its kind, or None. ``part_of``: the
    artifact that is writing ``path`` as one of its own parts (a suite's ``tasks/T``, a sweep's ``evals/RUN``, a
    study's ``sweep/``): it and the folders above it are not looked at."""
    p = Path(path).expanduser().absolute()
    stop = Path(part_of).expanduser().absolute() if part_of is not None else None
    for d in p.parents:
        if stop is not None and stop.is_relative_to(d):
            return None
        if d.is_dir() and (k := kind_of(d)) is not None and _looks_ours(d, k):
            return d, k
    return None


def _beside(above: tuple[Path, str], name: str) -> Path:
    """A free ``name`` beside the outermost artifact that holds ``above`` (an alternative outside all of them)."""
    top = above[0]
    while (outer := artifact_above(top)) is not None:
        top = outer[0]
    return first_free(top.parent / name)


def free_alternative(path: str | Path) -> Path:
    """The first of ``path-2``, ``path-3`` ... (``name-2.json`` for a file) that does not exist."""
    p = Path(path)
    i = 2
    while True:
        alt = p.with_name(f"{p.stem}-{i}{p.suffix}") if p.suffix and not p.is_dir() else p.with_name(f"{p.name}-{i}")
        if not alt.exists() and not alt.is_symlink():
            return alt
        i += 1


def first_free(path: str | Path) -> Path:
    """``path`` itself when nothing is there, else ``free_alternative``."""
    p = Path(path)
    return p if not p.exists() and not p.is_symlink() else free_alternative(p)


def _a(word: str) -> str:
    return f"an {word}" if word[:1] in "aeiou" else f"a {word}"


def _not_blank(path: str | Path, flag: str) -> None:
    """An empty ``--out ''`` is no folder: ``Path('')`` is the working directory, where an export was written."""
    if isinstance(path, str) and not path.strip():
        raise OutTaken(f"{flag} is empty; give a folder (or leave {flag} out for the default)")


def _refuse(flag: str, path: Path, why: str, alt: Path | None = None) -> OutTaken:
    alt = alt or free_alternative(path)
    return OutTaken(f"{flag} {path}: {why}; nothing was written (a free one: {flag} {alt})")


# ------------------------------------------------------------------------------------------------ where to write


def check_out_folder(
    path: str | Path, kind: str, name: str | None = None, flag: str = "--out", part_of: str | Path | None = None
) -> Path:
    """``path`` (absolute) when an artifact of ``kind`` may be written there: new, empty, or owned by ``kind`` (and,
    for a kind with names such as a suite, by the same ``name``); otherwise ``OutTaken`` in one line. A new one is
    never made inside another artifact (a suite's ``tasks/``, a sweep's ``runs/``), except as a part of the artifact
    ``part_of`` that writes it. Writes nothing: call it before any work."""
    assert kind in KINDS, kind
    _not_blank(path, flag)
    raw = Path(path).expanduser()
    p = raw.absolute()
    if raw.is_symlink():
        raise _refuse(flag, p, f"is a link (to {raw.resolve()}); give a real folder")
    if p.exists() and not p.is_dir():
        raise _refuse(flag, p, "is a file, not a folder")
    if (run := run_owning(p)) is not None:
        alt = first_free(run.parent.parent / f"{run.name}-{kind}")
        where = "is the run folder" if run == p else "is inside the run folder"
        raise _refuse(flag, p, f"{where} {run} (a run owns its folder)", alt)
    _check_parents(p, flag)
    if not p.exists() or not any(p.iterdir()):
        if (above := artifact_above(p, part_of)) is not None:
            raise _refuse(flag, p, _inside(above), _beside(above, p.name))
        return p
    if (p / MARKER).is_symlink():
        raise _refuse(flag, p, f"its {MARKER} is a link; remove it, or choose another folder")
    found = kind_of(p)
    if found is None:
        names = sorted(c.name for c in p.iterdir())
        held = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise _refuse(flag, p, f"holds other files ({held}), not {_a(kind)}")
    if found != kind:
        raise _refuse(flag, p, f"holds {_a(found)} ({KINDS[found].what}), not {_a(kind)}")
    if name is not None and (held := _recorded_name(p, kind)) not in (None, name):
        raise _refuse(flag, p, f"holds the {kind} '{held}', not '{name}'")
    return p


def _check_parents(p: Path, flag: str) -> None:
    """The nearest folder on the way to ``p`` that exists must be a folder. A root folder the environment sets that
    is a file is said as that (``DETOUR_SWEEPS_DIR`` a file was 'choose another --out' with no --out given)."""
    from backend.core import paths

    envs = {paths.runs_dir(): paths.RUNS_ENV, paths.sweeps_dir(): paths.SWEEPS_ENV, paths.evals_dir(): paths.EVALS_ENV,
            paths.reports_dir(): paths.REPORTS_ENV, paths.uploads_dir(): paths.UPLOADS_ENV}  # fmt: skip
    for parent in p.parents:
        if parent.exists() or parent.is_symlink():
            if parent.is_dir():
                return
            if env := envs.get(parent.absolute()):
                raise OutTaken(f"{env}={parent} is a file, not a folder: nothing can be written under it; move the "
                               f"file away or point {env} at a folder")  # fmt: skip
            raise OutTaken(f"{flag} {p}: {parent} is a file, not a folder; choose another {flag}")


def _inside(above: tuple[Path, str]) -> str:
    d, k = above
    return f"is inside {_a(k)} {d} ({KINDS[k].what}); an output goes into a new folder or one of its own kind"


def claim_folder(
    path: str | Path, kind: str, name: str | None = None, flag: str = "--out", part_of: str | Path | None = None
) -> Path:
    """``check_out_folder``, then make the folder and write its marker: from now on it is a ``kind`` (named
    ``name``), so a later command of another kind, or another suite, is refused there."""
    from backend.core import atomic

    p = check_out_folder(path, kind, name, flag, part_of)
    p.mkdir(parents=True, exist_ok=True)
    if read_marker(p) is None or (name and read_marker(p).get("name") != name):
        atomic.write_json(p / MARKER, {"kind": kind, "name": name})
    return p


def check_new_folder(path: str | Path, kind: str = "export", flag: str = "--out") -> Path:
    """``path`` (absolute) when a folder that is never rewritten (an export) may be made there: new, or an empty
    folder; not a link, not a file, and not inside another artifact (a run, or a folder a command claimed, or an
    artifact in the lab's own folders). ``OutTaken`` in one line otherwise; writes nothing."""
    p = check_out_folder(path, kind, flag=flag)  # a link, a file, a run's folder, a folder holding anything
    lab = [r.resolve() for r in roots()]
    for parent in p.parents:
        found = read_marker(parent)
        held = found["kind"] if found else None
        if held is None and any(parent.resolve().is_relative_to(r) and parent.resolve() != r for r in lab):
            held = kind_of(parent)  # in the lab's folders an artifact is known by its files too
        if held is not None:
            alt = first_free(parent.parent / f"{parent.name}-{kind}")
            raise _refuse(flag, p, f"is inside {_a(held)} ({parent}: {KINDS[held].what})", alt)
    return p


def check_out_file(path: str | Path, kind: str = "cka", flag: str = "--out") -> Path:
    """``path`` (absolute) when a file artifact of ``kind`` may be written there: a new file, or one the same kind
    wrote (rewritten); not a folder, not a link, not inside a run's folder. ``OutTaken`` otherwise."""
    _not_blank(path, flag)
    raw = Path(path).expanduser()
    p = raw.absolute()
    if raw.is_symlink():
        raise _refuse(flag, p, f"is a link (to {raw.resolve()}); give a real file name")
    if p.is_dir():
        raise OutTaken(f"{flag} {p}: is a folder; give a file name, e.g. {flag} {p / f'{kind}.json'}")
    _check_parents(p, flag)
    if (run := run_owning(p.parent)) is not None:
        alt = first_free(Path.cwd() / f"{kind}.json")
        raise _refuse(flag, p, f"is inside the run folder {run} (a run owns its folder)", alt)
    if (above := artifact_above(p)) is not None:
        raise _refuse(flag, p, _inside(above), _beside(above, p.name))
    if p.exists() and kind_of(p) != kind:
        alt = first_free(Path.cwd() / f"{kind}.json") if kind_of(p.parent) else None  # not into another's folder
        raise _refuse(flag, p, f"exists and is not {_a(kind)} result", alt)
    return p


# ------------------------------------------------------------------------------------------------ listing


@dataclass
class Entry:
    """One listed artifact; ``problem`` says why it cannot be read (it is listed all the same, never fatal)."""

    kind: str
    name: str
    path: Path
    problem: str | None = None
    value: object = None  # what ``entries``' ``read`` returned for it (None when unreadable or not read)

    @property
    def readable(self) -> bool:
        return self.problem is None

    def label(self) -> str:
        return self.name if self.readable else f"{self.name} (unreadable: {self.problem})"


def entries(kind: str, root: str | Path | None = None, read: Callable[[Path], object] | None = None) -> list[Entry]:
    """Every folder of ``kind`` under ``root`` (default: the kind's root), by name, each with what ``read`` returned
    for it (``Entry.value``). A folder that links out of the root, or that ``read`` raises on (DetourError, OSError,
    ValueError), is listed with its reason."""
    k = KINDS[kind]
    root = Path(root) if root is not None else (k.root() if k.root else None)
    if root is None or not root.is_dir():
        return []
    out = []
    try:
        children = sorted(root.iterdir())
    except OSError:
        return []
    for d in children:
        if d.name.startswith(".") or not d.is_dir():
            continue
        if kind_of(d) != kind and not (kind == "run" and (d / "config.yaml").exists()):
            continue
        e = Entry(kind, d.name, d)
        try:
            real = d.resolve()
            if not real.is_relative_to(root.resolve()):
                e.problem = f"links to {real}, outside {root}; it is not read"
            elif read is not None:
                e.value = read(d)
        except (DetourError, OSError, ValueError, RuntimeError) as exc:
            e.problem = " ".join(str(exc).split()) or type(exc).__name__
        out.append(e)
    return out


def sweep_run_roots() -> list[Path]:
    """The ``runs/`` folder of every sweep (a sweep trains its runs there)."""
    root = sweeps_dir()
    return sorted(p for p in root.glob("*/runs") if p.is_dir()) if root.is_dir() else []


def roots() -> list[Path]:
    """The folders the lab writes its artifacts into: runs, sweeps (and so their runs), evaluations (and so suite
    evaluations), reports, uploads, exports."""
    return [runs_dir(), sweeps_dir(), evals_dir(), reports_dir(), uploads_dir(), exports_dir()]

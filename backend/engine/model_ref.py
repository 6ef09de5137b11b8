"""One name -> one model. Whatever a user types where a model is asked for -- in any field of the app, in any
command -- is turned into a ``ModelRef`` here, and only here; the loaders (``engine.models``) take the reference.

A name may be, in this order:

* a bundled model (``detour-tiny-en``);
* a run (``class-demo-detour``: a folder of the runs folder), standing for its ``final/`` model, else its newest
  complete checkpoint; a pair's name (``class-demo``) stands for two models, so it is refused naming both runs;
* a sweep's run (``SWEEP/RUN``: ``<sweeps>/SWEEP/runs/RUN``);
* a path: a model folder, a checkpoint (its ``model/``), a run folder;
* a hub id (``org/name``); one in the Hugging Face cache loads from its snapshot, offline; a picker's label for it
  (``org/name (cached, 5.5M params)``) is its hub id.

The folder found is checked whole once, here (config.json, weight headers; a cached snapshot too), so a broken
model is named where it is typed. A name that resolves to nothing is refused with the names it was close to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import backend.presets as presets
from backend.core.errors import ModelSpecError
from backend.core.names import close_names  # noqa: F401 (the app imports it here)
from backend.core.paths import BUNDLED_MODELS_DIR, DEFAULT_MODEL, is_plain_name, runs_dir, sweeps_dir
from backend.engine import hub_cache, model_files

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
KINDS = ("bundled", "run", "sweep_run", "checkpoint", "local", "hub")
PAIR_ROLES = tuple(presets.get("pair")["runs"])  # a pair's runs are '<pair>-<role>'; the detour run first


@dataclass(frozen=True)
class ModelRef:
    """A model, resolved and checked: what every loader takes.

    ``kind``: one of ``KINDS``. ``path``: the local model folder (with config.json), or the hub id for ``hub``.
    ``spec``: the name results, folders and charts carry: what was typed, a picker's label reduced to the hub id.
    ``snapshot``: for a hub model in the cache, its checked snapshot folder (it loads from there, offline).
    ``run``: for a run or a sweep's run named by its name, the run's folder."""

    kind: str
    path: str
    spec: str
    snapshot: str | None = None
    run: str | None = None

    @property
    def label(self) -> str:
        return self.spec

    @property
    def folder(self) -> str:
        """What ``from_pretrained`` reads: the local folder, the cached snapshot, else the hub id."""
        return self.snapshot or self.path

    @property
    def local(self) -> bool:
        """Its files are on this disk (a hub model only when cached)."""
        return self.kind != "hub" or self.snapshot is not None


def bundled_models() -> list[str]:
    if not BUNDLED_MODELS_DIR.exists():
        return []
    return sorted(p.name for p in BUNDLED_MODELS_DIR.iterdir() if (p / "config.json").exists())


def run_model_dir(run_dir: Path) -> Path | None:
    """The model a run directory stands for: ``final/``, else its newest complete checkpoint."""
    if (run_dir / "final" / "config.json").exists():
        return run_dir / "final"
    ckpts = sorted((run_dir / "checkpoints").glob("step-*")) if (run_dir / "checkpoints").exists() else []
    for ck in reversed(ckpts):
        if (ck / "model" / "config.json").exists() and (ck / "COMPLETE").exists():
            return ck / "model"
    return None


def _run_ref(run: Path, spec: str, kind: str, root: Path) -> ModelRef:
    real = run.resolve()
    if not real.is_relative_to(root.resolve()):
        where = "runs folder" if kind == "run" else "sweep's runs folder"
        raise ModelSpecError(
            f"model '{spec}': run {run.name} is a link to {real}, outside the {where} {root}; not read"
        )
    m = run_model_dir(real)
    if m is None:
        raise ModelSpecError(f"model '{spec}': run {run} has no finished model or complete checkpoint yet")
    return ModelRef(kind, str(m), spec, run=str(real))


def _named(spec: str) -> ModelRef | None:
    """A bundled model, a run or a sweep's run by its name; None when ``spec`` names none of them."""
    if is_plain_name(spec):
        if (BUNDLED_MODELS_DIR / spec / "config.json").exists():
            return ModelRef("bundled", str(BUNDLED_MODELS_DIR / spec), spec)
        root = runs_dir()
        if (root / spec / "config.yaml").exists():
            return _run_ref(root / spec, spec, "run", root)
        pair = [f"{spec}-{r}" for r in PAIR_ROLES if (root / f"{spec}-{r}" / "config.yaml").exists()]
        if len(pair) == len(PAIR_ROLES):
            raise ModelSpecError(f"model '{spec}': is a pair of two runs; name one of them: {' or '.join(pair)}")
    sweep, _, run = spec.partition("/")
    if run and is_plain_name(sweep) and is_plain_name(run) and (sweeps_dir() / sweep / "runs").is_dir():
        root = sweeps_dir() / sweep / "runs"
        if (root / run / "config.yaml").exists():
            return _run_ref(root / run, spec, "sweep_run", root)
        near = _close(spec, [f"{sweep}/{r}" for r in _sweep_runs(sweeps_dir() / sweep)])
        raise ModelSpecError(f"model '{spec}': sweep '{sweep}' has no run '{run}'{near}")
    return None


def _folder(spec: str, p: Path) -> ModelRef:
    if not p.is_dir():
        raise ModelSpecError(f"model '{spec}': is a file, not a model folder (expected a folder with config.json)")
    if (p / "config.json").exists():
        return ModelRef("local", str(p.resolve()), spec)
    if (p / "model" / "config.json").exists():
        return ModelRef("checkpoint", str((p / "model").resolve()), spec)
    if (p / "status.json").exists() or (p / "config.yaml").exists():
        m = run_model_dir(p)
        if m is None:
            raise ModelSpecError(f"model '{spec}': run directory has no finished model or complete checkpoint yet")
        return ModelRef("run", str(m.resolve()), spec)
    raise ModelSpecError(f"model '{spec}': folder is not a model (no config.json), a checkpoint or a run directory")


def _hub(spec: str) -> ModelRef:
    """A hub id: from its checked snapshot when cached; else fetched when loaded, where the hub can be reached."""
    if hub_cache.snapshot_of(spec) is not None:
        snap = hub_cache.check_snapshot(spec)
        return ModelRef("hub", spec, spec, str(snap) if snap else None)
    if "/" not in spec:  # the hub names models org/name; a bare word is a run (renamed, moved?) or a name mistyped
        raise ModelSpecError(
            f"model '{spec}': no run named {spec} in {runs_dir()}, and no bundled, local or cached model of that "
            f"name (a hub id names its organisation, e.g. answerdotai/ModernBERT-base){_close(spec, _runs_first())}"
        )
    if hub_cache.offline():
        raise ModelSpecError(hub_cache.not_available(spec) + _close(spec, candidates()))
    return ModelRef("hub", spec, spec)


def _as_ref(spec: str) -> ModelRef:
    if not spec:
        raise ModelSpecError("model: empty; give a bundled name, a run, a local model folder or a hub id")
    if (ref := _named(spec)) is not None:
        return ref
    p = Path(spec).expanduser()
    if p.exists():
        return _folder(spec, p)
    if spec.startswith((".", "/", "~")) or spec.count("/") > 1 or "\\" in spec:
        raise ModelSpecError(f"model '{spec}': no such path{_close(spec, candidates())}")
    if HUB_ID.match(spec):
        return _hub(spec)
    raise ModelSpecError(
        f"model '{spec}': not a bundled model ({', '.join(bundled_models()) or 'none installed'}), a run, "
        f"an existing folder, or a hub id like 'answerdotai/ModernBERT-base'{_close(spec, candidates())}"
    )


def resolve_model(text: str | ModelRef | None) -> ModelRef:
    """What a user typed -> a checked ``ModelRef``; a ``ModelRef`` is returned as it is. ModelSpecError says why
    not, naming the close candidates. Empty or None: the bundled default."""
    if isinstance(text, ModelRef):
        return text
    spec = hub_cache.strip_label(str(text if text is not None else DEFAULT_MODEL).strip())
    ref = _as_ref(spec)
    if ref.local:  # whole: config.json and weight headers, here once (a truncated file is named where it is typed)
        model_files.check_weights(Path(ref.folder), spec)
    return ref


def resolve_tokenizer(text: str | ModelRef) -> ModelRef:
    """Like resolve_model, but a bare tokenizer folder (tokenizer.json, no config.json) is fine too."""
    if not isinstance(text, str):
        return resolve_model(text)
    p = Path(text).expanduser()
    if p.is_dir() and ((p / "tokenizer.json").exists() or (p / "tokenizer_config.json").exists()):
        return ModelRef("local", str(p.resolve()), text)
    if p.is_dir() and not any(p.iterdir()):  # "not a model (no config.json)" sent users looking for the wrong file
        raise ModelSpecError(f"tokenizer '{text}': the folder is empty (a tokenizer folder holds tokenizer.json)")
    try:
        return resolve_model(text)
    except ModelSpecError as exc:
        if p.is_dir():
            raise ModelSpecError(
                f"tokenizer '{text}': no tokenizer.json or tokenizer_config.json in the folder, and it is not a model "
                "or run either"
            ) from exc
        raise


# --- the names a user may mean: what a refusal offers ------------------------------------------------------------


def _sweep_runs(sweep: Path) -> list[str]:
    from backend.engine.rundir import list_runs

    return [r.name for r in list_runs(sweep / "runs")]


def candidates() -> list[str]:
    """Every name that resolves to one model here: bundled models, runs, sweeps' runs (``SWEEP/RUN``), cached
    models (encoders and taggers). A pair's name is not one (it is refused naming its two runs): offered, it led to a
    second refusal."""
    from backend.engine.rundir import list_runs

    runs = [r.name for r in list_runs(runs_dir())]
    root = sweeps_dir()
    sweeps = sorted(p for p in root.iterdir() if (p / "runs").is_dir()) if root.is_dir() else []
    swept = [f"{s.name}/{r}" for s in sweeps for r in _sweep_runs(s)]
    cached = [m.hub_id for m in [*hub_cache.cached_encoders(), *hub_cache.cached_taggers()]]
    return [*bundled_models(), *runs, *swept, *cached]


def _runs_first() -> list[str]:
    """``candidates`` with the runs first: a bare name that is no run is most often a run renamed."""
    from backend.engine.rundir import list_runs

    return list(dict.fromkeys([*(r.name for r in list_runs(runs_dir())), *candidates()]))


def _close(spec: str, names: list[str]) -> str:
    near = close_names(spec, names)
    return f"; did you mean: {', '.join(near)}?" if near else ""

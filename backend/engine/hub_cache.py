"""Encoders already in the user's Hugging Face cache: the models people inspecting released encoders have.

``cached_encoders()`` lists the masked-LM models of the hub cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``, read at
call time) and ``cached_taggers()`` its token-classification models (released NER taggers), each with its parameter
count (from the safetensors headers: nothing is loaded), through huggingface_hub's own cache scan; a hub id in it
loads offline. The app's model pickers offer them as ``org/name (cached, 149.6M params)``: a label for the eye
only; ``strip_label`` (called by ``model_ref.resolve_model``) gives the hub id back.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from backend.core.errors import DetourError, ModelSpecError
from backend.core.paths import confined, read_text_confined
from backend.engine import model_files

CACHE_ENVS = "HF_HUB_CACHE, else HF_HOME/hub"

# model types whose checkpoints are encoders trained with a masked-LM head (when config.json names no architecture)
MLM_TYPES = {
    "albert",
    "bert",
    "camembert",
    "deberta",
    "deberta-v2",
    "distilbert",
    "electra",
    "modernbert",
    "roberta",
    "xlm-roberta",
    "eurobert",
    "neobert",
}
LABEL = re.compile(r"^(?P<id>\S+) \(cached, [^)]*\)$")


@dataclass(frozen=True)
class CachedModel:
    hub_id: str
    params: str  # '5.5M': its parameters, not its size on disk (a tied or fp32 copy is not a bigger model)
    snapshot: Path
    task: str = "fill-mask"  # or "token-classification"

    @property
    def label(self) -> str:
        return f"{self.hub_id} (cached, {self.params} params)"


def cache_dir() -> Path:
    """The hub cache this process uses, read now (tests and users move it with HF_HUB_CACHE / HF_HOME)."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    return Path(home).expanduser() / "hub"


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _task(config: dict) -> str | None:
    """'fill-mask' for a masked-LM encoder, 'token-classification' for a tagger, None for anything else."""
    archs = [str(a) for a in config.get("architectures") or []]
    if any(a.endswith("ForTokenClassification") for a in archs):
        return "token-classification"
    if archs:
        return "fill-mask" if any(a.endswith("ForMaskedLM") for a in archs) else None
    return "fill-mask" if config.get("model_type") in MLM_TYPES else None


_memo: dict[tuple, tuple[list[CachedModel], list[str]]] = {}


def _scan(root: Path) -> tuple[list[CachedModel], list[str]]:
    """Each model folder of the cache scanned on its own: one that cannot be read (a snapshot linking to itself, a
    missing config.json, a file where a folder belongs) is named in the second list and skipped; the rest stay."""
    from huggingface_hub.errors import CorruptedCacheException
    from huggingface_hub.utils._cache_manager import _scan_cached_repo  # what scan_cache_dir runs per folder

    if not root.is_dir():
        return [], [f"the Hugging Face cache {root} ({CACHE_ENVS}) is a file, not a folder: no cached model is listed"]
    out, skipped = [], []
    for repo_path in sorted(root.iterdir()):
        if not repo_path.name.startswith("models--"):
            continue
        try:
            repo = _scan_cached_repo(repo_path)
            if not repo.revisions:
                continue
            newest = max(repo.revisions, key=lambda r: r.last_modified)
            config = json.loads(read_text_confined(newest.snapshot_path / "config.json", root=repo_path))
        except (CorruptedCacheException, OSError, ValueError, RuntimeError, DetourError) as exc:
            why = " ".join(str(exc).split()) or type(exc).__name__
            skipped.append(f"cached model folder {repo_path} skipped: {why}")
            continue
        if isinstance(config, dict) and (task := _task(config)):
            params = model_files.human_count(model_files.parameter_count(newest.snapshot_path))
            out.append(CachedModel(repo.repo_id, params, newest.snapshot_path, task))
    out.sort(key=lambda m: m.hub_id.lower())
    return out, skipped


def _scanned() -> tuple[list[CachedModel], list[str]]:
    root = cache_dir()
    try:
        key = (str(root), root.stat().st_mtime_ns)
    except OSError:
        return [], []
    if key not in _memo:
        _memo.clear()
        _memo[key] = _scan(root)
    return _memo[key]


def cached_encoders() -> list[CachedModel]:
    """Masked-LM models in the hub cache, by hub id; [] when there is no cache. A model folder that cannot be read
    is skipped (``cache_problems`` names it), never the whole list. Read again when the cache's folder changes (a
    model downloaded since), else served from memory: the pickers ask on every focus."""
    return [m for m in _scanned()[0] if m.task == "fill-mask"]


def cached_taggers() -> list[CachedModel]:
    """Token-classification models (released NER taggers) in the hub cache, by hub id, as ``cached_encoders``."""
    return [m for m in _scanned()[0] if m.task == "token-classification"]


def cache_problems() -> list[str]:
    """One line per cached model folder that ``cached_encoders`` skipped, or for a cache that is a file."""
    return _scanned()[1]


def snapshot_of(hub_id: str) -> tuple[Path, Path] | None:
    """(the model's cache folder, the snapshot ``refs/main`` names or else the newest), or None when the cache has
    no folder for ``hub_id``."""
    repo = cache_dir() / ("models--" + hub_id.replace("/", "--"))
    if not repo.is_dir():
        return None
    snaps = repo / "snapshots"
    try:
        rev = read_text_confined(repo / "refs" / "main", root=repo).strip()
    except (OSError, DetourError):
        rev = ""
    if rev and (snaps / rev).is_dir():
        return repo, snaps / rev
    try:
        found = sorted((p for p in snaps.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    except OSError:
        found = []
    if not found:
        raise ModelSpecError(
            f"model '{hub_id}': its folder in the Hugging Face cache ({repo}) holds no snapshot (an interrupted "
            f"download?); download it again: hf download {hub_id}"
        )
    return repo, found[-1]


def check_snapshot(hub_id: str) -> Path | None:
    """The cached snapshot of ``hub_id``, checked whole before anything loads it: config.json present, and weights
    present and not truncated (their headers). None when the model is not in the cache (it is then fetched, or
    ``not_available`` says why not). Every file must stay inside the model's cache folder."""
    found = snapshot_of(hub_id)
    if found is None:
        return None
    repo, snap = found
    again = f"download it again: hf download {hub_id}"
    try:
        config = confined(snap / "config.json", root=repo)
    except DetourError as exc:
        raise ModelSpecError(f"model '{hub_id}': {exc}") from None
    if not config.is_file():
        raise ModelSpecError(
            f"model '{hub_id}': its cached snapshot {snap} has no config.json (an interrupted download?); {again}"
        )
    for f in snap.iterdir():
        try:
            confined(f, root=repo)
        except DetourError as exc:
            raise ModelSpecError(f"model '{hub_id}': {exc}") from None
    try:
        model_files.check_weights(snap, hub_id)
    except ModelSpecError as exc:
        raise ModelSpecError(f"{exc}; {again}") from None
    return snap


def strip_label(spec: str) -> str:
    """``org/name (cached, 12.3M params)`` -> ``org/name``; anything else unchanged."""
    m = LABEL.match(spec.strip())
    return m.group("id") if m else spec


def is_cached(hub_id: str) -> bool:
    """The hub id has a config.json in the cache (it loads offline)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(hub_id, "config.json", cache_dir=str(cache_dir()))
    except (ValueError, OSError):
        return False
    return isinstance(found, str)


def not_available(hub_id: str) -> str:
    """The plain sentence for a hub id that is neither cached nor reachable."""
    names = ", ".join(m.hub_id for m in cached_encoders()[:5])
    problems = "".join(f"; {p}" for p in cache_problems()[:2])
    return (
        f"model '{hub_id}': not in your Hugging Face cache ({cache_dir()}) and the hub is not reachable"
        + (" (HF_HUB_OFFLINE is set)" if offline() else "")
        + f"; download it where there is a network (hf download {hub_id}) or pick a model you have"
        + (f" (cached: {names})" if names else "")
        + problems
    )

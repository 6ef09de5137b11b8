"""Encoders already in the user's Hugging Face cache: the models people inspecting released encoders have.

``cached_encoders()`` lists the masked-LM models of the hub cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``, read at
call time) with their size, through huggingface_hub's own ``scan_cache_dir``; a hub id in it loads offline. The app's
model pickers offer them as ``org/name (cached, 149.6M)``: ``strip_label`` gives the hub id back.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

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
    size: str
    snapshot: Path

    @property
    def label(self) -> str:
        return f"{self.hub_id} (cached, {self.size})"


def cache_dir() -> Path:
    """The hub cache this process uses, read now (tests and users move it with HF_HUB_CACHE / HF_HOME)."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    return Path(home).expanduser() / "hub"


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _is_masked_lm(config: dict) -> bool:
    archs = config.get("architectures") or []
    if archs:
        return any(str(a).endswith("ForMaskedLM") for a in archs)
    return config.get("model_type") in MLM_TYPES


_memo: dict[tuple, list[CachedModel]] = {}


def cached_encoders() -> list[CachedModel]:
    """Masked-LM models in the hub cache, by hub id; [] when there is no cache. Read again when the cache's
    folder changes (a model downloaded since), else served from memory: the pickers ask on every focus."""
    root = cache_dir()
    try:
        key = (str(root), root.stat().st_mtime_ns)
    except OSError:
        return []
    if key in _memo:
        return _memo[key]
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(root)
    except (CacheNotFound, OSError, ValueError):
        return []
    out = []
    for repo in info.repos:
        if repo.repo_type != "model" or not repo.revisions:
            continue
        newest = max(repo.revisions, key=lambda r: r.last_modified)
        try:
            config = json.loads((newest.snapshot_path / "config.json").read_text())
        except (OSError, ValueError):
            continue
        if isinstance(config, dict) and _is_masked_lm(config):
            out.append(CachedModel(repo.repo_id, repo.size_on_disk_str, newest.snapshot_path))
    out.sort(key=lambda m: m.hub_id.lower())
    _memo.clear()
    _memo[key] = out
    return out


def strip_label(spec: str) -> str:
    """``org/name (cached, 12.3M)`` -> ``org/name``; anything else unchanged."""
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
    return (
        f"model '{hub_id}': not in your Hugging Face cache ({cache_dir()}) and the hub is not reachable"
        + (" (HF_HUB_OFFLINE is set)" if offline() else "")
        + f"; download it where there is a network (hf download {hub_id}) or pick a model you have"
        + (f" (cached: {names})" if names else "")
    )

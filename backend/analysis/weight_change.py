"""Per-layer relative weight change ``||W_b - W_a||_F / ||W_a||_F`` between two models of one architecture.

Parameters are read straight from the safetensors files (one tensor at a time, float64 sums), so no
model is instantiated and memory stays at about one tensor. Parameter names are normalised so a bare
encoder and the same encoder saved with its MLM head compare (``model.`` / ``bert.`` / ``roberta.``
prefixes are dropped).

Groups (every parameter falls in exactly one): ``embeddings``; ``block_i`` (transformer block i: the
same name as CKA layer index i + 1, whose output it produces); ``head`` (MLM head / decoder, when both
models have one); ``other`` (final norm, pooler, ...). A group's change is computed over all its
parameters together: ``sqrt(Σ ||b - a||²) / sqrt(Σ ||a||²)``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path

import torch

from backend.core.errors import ModelSpecError
from backend.engine import model_files
from backend.engine.models import ModelRef, resolve_model

_PREFIXES = ("model.", "bert.", "roberta.")
_BLOCK = re.compile(r"(?:^|\.)(?:layers|layer)\.(\d+)\.")
_HEAD = ("head.", "decoder.", "cls.", "lm_head.")


def normalize_name(name: str) -> str:
    for p in _PREFIXES:
        if name.startswith(p):
            return name[len(p) :]
    return name


def param_group(name: str) -> str:
    """``embeddings`` | ``block_<i>`` | ``head`` | ``other`` for a (normalised) parameter name."""
    name = normalize_name(name)
    if name.startswith(_HEAD):
        return "head"
    m = _BLOCK.search(name)
    if m:
        return f"block_{int(m.group(1))}"
    if name.startswith("embeddings.") or ".embeddings." in name:
        return "embeddings"
    return "other"


def _model_dir(source: ModelRef) -> Path:
    if source.local:  # a local folder, or a cached hub model's snapshot
        return Path(source.folder)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(source.path, allow_patterns=["*.safetensors", "*.json"]))
    except Exception as exc:  # network, auth, missing repo: one clean message
        raise ModelSpecError(
            f"model '{source.spec}': could not fetch weights from the Hugging Face hub "
            f"({type(exc).__name__}). Offline? Use a local folder or a run directory."
        ) from exc


class WeightReader:
    """Lazy name -> tensor access over a model folder's safetensors files (names normalised)."""

    def __init__(self, spec: str | Path | ModelRef):
        self.source = spec if isinstance(spec, ModelRef) else resolve_model(str(spec))
        self.dir = _model_dir(self.source)
        self._where: dict[str, tuple[Path, str]] = {}
        from safetensors import safe_open

        model_files.check(self.dir, self.source.spec)  # whole, and a run's final/ or checkpoint as it was written
        for f in model_files.weight_files(self.dir, self.source.spec):
            with safe_open(str(f), framework="pt") as h:
                for key in h.keys():
                    self._where[normalize_name(key)] = (f, key)

    def names(self) -> list[str]:
        return list(self._where)

    def shape(self, name: str) -> tuple[int, ...]:
        from safetensors import safe_open

        f, key = self._where[name]
        with safe_open(str(f), framework="pt") as h:
            return tuple(h.get_slice(key).get_shape())

    def get(self, name: str) -> torch.Tensor:
        from safetensors import safe_open

        f, key = self._where[name]
        with safe_open(str(f), framework="pt") as h:
            return h.get_tensor(key)


def _group_order(groups: list[str]) -> list[str]:
    blocks = sorted((g for g in groups if g.startswith("block_")), key=lambda g: int(g.split("_")[1]))
    rest = [g for g in ("embeddings", "other", "head") if g in groups]
    return rest[:1] + blocks + rest[1:] if "embeddings" in rest else blocks + rest


def _pairs(a: WeightReader, b: WeightReader) -> Iterator[tuple[str, torch.Tensor, torch.Tensor]]:
    for name in a.names():
        if name in b._where:
            yield name, a.get(name), b.get(name)


def relative_weight_change(a: str | Path | ModelRef, b: str | Path | ModelRef, *, detail: bool = False) -> dict:
    """Relative weight change of ``b`` against ``a`` per block, embeddings, head and other; JSON-ready.

    Raises ModelSpecError when the two are not the same architecture (a shared parameter with different
    shapes, or different numbers of blocks).
    """
    ra, rb = WeightReader(a), WeightReader(b)
    names_a, names_b = set(ra.names()), set(rb.names())
    blocks_a = {param_group(n) for n in names_a if param_group(n).startswith("block_")}
    blocks_b = {param_group(n) for n in names_b if param_group(n).startswith("block_")}
    if len(blocks_a) != len(blocks_b):
        raise ModelSpecError(
            f"weight change needs the same architecture: '{ra.source.spec}' has {len(blocks_a)} blocks, "
            f"'{rb.source.spec}' has {len(blocks_b)}"
        )
    sq_a: dict[str, float] = {}
    sq_d: dict[str, float] = {}
    count: dict[str, int] = {}
    per_param: dict[str, float | None] = {}
    for name, ta, tb in _pairs(ra, rb):
        if ta.shape != tb.shape:
            raise ModelSpecError(
                f"weight change needs the same architecture: '{name}' is {tuple(ta.shape)} in "
                f"'{ra.source.spec}' but {tuple(tb.shape)} in '{rb.source.spec}'"
            )
        ta64, tb64 = ta.to(torch.float64), tb.to(torch.float64)
        na = torch.sum(ta64 * ta64).item()
        nd = torch.sum((tb64 - ta64) ** 2).item()
        g = param_group(name)
        sq_a[g] = sq_a.get(g, 0.0) + na
        sq_d[g] = sq_d.get(g, 0.0) + nd
        count[g] = count.get(g, 0) + ta.numel()
        if detail:
            per_param[name] = math.sqrt(nd) / math.sqrt(na) if na > 0 else None
    if not count:
        raise ModelSpecError(f"'{ra.source.spec}' and '{rb.source.spec}' share no parameter names")

    def rel(g: str) -> float | None:
        return math.sqrt(sq_d[g]) / math.sqrt(sq_a[g]) if sq_a.get(g, 0.0) > 0 else None

    order = _group_order(list(count))
    blocks = [g for g in order if g.startswith("block_")]
    total_a, total_d = sum(sq_a.values()), sum(sq_d.values())
    out = {
        "kind": "weight_change",
        "models": {"a": ra.source.spec, "b": rb.source.spec},
        "paths": {"a": str(ra.dir), "b": str(rb.dir)},
        "formula": "||W_b - W_a||_F / ||W_a||_F over all parameters of a group",
        "layer_names": blocks,
        "layers": [rel(g) for g in blocks],
        "embeddings": rel("embeddings") if "embeddings" in count else None,
        "head": rel("head") if "head" in count else None,
        "other": rel("other") if "other" in count else None,
        "total": math.sqrt(total_d) / math.sqrt(total_a) if total_a > 0 else None,
        "groups": {
            g: {
                "rel_change": rel(g),
                "norm_a": math.sqrt(sq_a[g]),
                "norm_diff": math.sqrt(sq_d[g]),
                "n_params": count[g],
            }
            for g in order
        },
        "only_in_a": sorted(names_a - names_b),
        "only_in_b": sorted(names_b - names_a),
    }
    if detail:
        out["params"] = per_param
    return out

"""Freeze interventions: which parameters a phase leaves untouched.

A frozen parameter must come out of the phase bit-identical. Zeroing its gradient is not enough
once optimizer state exists (AdamW's momentum and weight decay still move it), so we drop its
gradient entirely (``p.grad = None``): torch's AdamW skips such parameters — no update, no decay,
no state change. Gradients are still computed (DDP needs a fixed set of parameters that require
grad), then discarded before clipping and stepping.

Groups: ``layers`` (transformer blocks by index), ``embeddings`` (the embedding module; with tied
weights this also fixes the decoder matrix), ``head`` (everything above the blocks: final norm,
prediction head, decoder bias).
"""

from __future__ import annotations

from torch import nn

from .config import parse_layer_range
from .models import transformer_blocks


def parameter_groups(hf_model: nn.Module) -> dict[str, list[str]]:
    """Parameter names by group: 'layer.<i>', 'embeddings', 'head'."""
    owner: dict[int, str] = {}
    for i, block in enumerate(transformer_blocks(hf_model)):
        for p in block.parameters():
            owner[id(p)] = f"layer.{i}"
    base = getattr(hf_model, "model", None) or getattr(hf_model, "bert", None) or getattr(hf_model, "roberta", None)
    emb = getattr(base, "embeddings", None)
    if emb is not None:
        for p in emb.parameters():
            owner.setdefault(id(p), "embeddings")
    groups: dict[str, list[str]] = {}
    for name, p in hf_model.named_parameters():
        groups.setdefault(owner.get(id(p), "head"), []).append(name)
    return groups


def frozen_names(hf_model: nn.Module, freeze: dict | None, key: str = "freeze") -> set[str]:
    """Names of parameters frozen by a phase's ``freeze`` mapping."""
    if not freeze:
        return set()
    n_layers = len(transformer_blocks(hf_model))
    layers = parse_layer_range(freeze.get("layers"), f"{key}.layers", n_layers)
    groups = parameter_groups(hf_model)
    names: set[str] = set()
    for i in layers:
        names.update(groups.get(f"layer.{i}", []))
    if freeze.get("embeddings"):
        names.update(groups.get("embeddings", []))
    if freeze.get("head"):
        names.update(groups.get("head", []))
    return names


def drop_frozen_grads(params: list[nn.Parameter]) -> None:
    for p in params:
        p.grad = None

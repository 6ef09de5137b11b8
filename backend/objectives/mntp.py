"""MNTP, masked next-token prediction (LLM2Vec, BehnamGhader et al. 2024): bidirectional attention over a masked
row, and a masked token at ``t`` is predicted from the output at ``t - 1`` (a decoder's habit kept while it learns
to read both ways). Masking is BERT's (``mlm_probability``, 80/10/10); the labels are MLM's shifted left by one,
none where ``t`` opens a document (its previous position belongs to another one)."""

from __future__ import annotations

import torch

from backend.objectives.base import IGNORE, Batch, Objective, Setting
from backend.objectives.masking import mask_with


def shift_left(labels: torch.Tensor, doc_start: torch.Tensor) -> torch.Tensor:
    """``out[t - 1] = labels[t]``: position ``t - 1`` predicts the masked token at ``t``."""
    out = torch.full_like(labels, IGNORE)
    out[:, :-1] = torch.where(doc_start[:, 1:], torch.full_like(labels[:, 1:], IGNORE), labels[:, 1:])
    return out


def _make(ids, doc_start, settings, masking, generator) -> Batch:
    inputs, labels = mask_with(masking, ids, settings["mlm_probability"], generator)
    return Batch(inputs, shift_left(labels, doc_start), False)


OBJECTIVE = Objective(
    name="mntp",
    title="MNTP",
    colour="#2BA59A",
    explanation="masked next token (bidirectional, LLM2Vec): a masked token is predicted from the position before it",
    attention="bidirectional",
    make=_make,
    settings=(Setting("mlm_probability", 0.2, "its masking rate"),),
    label=lambda s: f"MNTP {s['mlm_probability'] * 100:g}%",
    held_out={"mlm_probability": 0.15},
    accuracy=True,
    predicted_share=lambda s: s["mlm_probability"],
    picture=lambda t: False,
)

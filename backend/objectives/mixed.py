"""Mixed batches (GPT-BERT, Charpentier & Samuel 2024): in each micro-batch a share of the rows is causal next-token
prediction and the rest masked (bidirectional, ``mlm_probability``), one forward with per-row attention, one head,
one optimizer step, the data order of every other phase. GPT-BERT trains about 1 causal row to 15 masked ones.

Which rows: ``causal_share`` x rows, rounded at random (so small batches keep the share on average), the first rows
of the (already shuffled) micro-batch. The loss is the mean over every labelled position of the micro-batch, causal
and masked alike (what one forward gives): a causal row labels nearly all its tokens, a masked row its masked ones."""

from __future__ import annotations

import torch

from backend.objectives.base import Batch, Objective, Setting, next_token_labels
from backend.objectives.masking import mask_with


def causal_rows(rows: int, share: float, generator: torch.Generator) -> int:
    """How many rows of this micro-batch are causal: ``share * rows`` rounded down or up at random."""
    whole = int(share * rows)
    return whole + int(torch.rand((), generator=generator).item() < share * rows - whole)


def _make(ids, doc_start, settings, masking, generator) -> Batch:
    b, t = ids.shape
    n = causal_rows(b, settings["causal_share"], generator)
    inputs, labels = mask_with(masking, ids, settings["mlm_probability"], generator)
    inputs[:n], labels[:n] = ids[:n], next_token_labels(ids[:n], doc_start[:n])
    prefix = torch.full((b,), t, dtype=torch.long)  # a whole-row prefix: bidirectional
    prefix[:n] = 0  # no prefix: causal
    return Batch(inputs, labels, prefix)


OBJECTIVE = Objective(
    name="mixed",
    title="Mixed (GPT-BERT)",
    colour="#8E6CC9",
    explanation="mixed batches (GPT-BERT): some rows next-token (causal), the rest masked (bidirectional), one step",
    attention="per-sequence",
    make=_make,
    settings=(
        Setting("causal_share", 1 / 16, "the share of rows trained causally", lo_open=False, hi_open=False),
        Setting("mlm_probability", 0.15, "the masking rate of the masked rows"),
    ),
    label=lambda s: f"mixed {s['causal_share'] * 100:.3g}% causal, MLM {s['mlm_probability'] * 100:g}%",
    held_out={"causal_share": 1 / 16, "mlm_probability": 0.15},
    predicted_share=lambda s: s["causal_share"] + (1 - s["causal_share"]) * s["mlm_probability"],
    picture=lambda t: torch.tensor([0]),
    picture_note="a causal row (the masked rows: bidirectional, as MLM)",
)

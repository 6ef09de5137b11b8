"""Prefix LM: bidirectional attention over the first ``prefix_share`` of each row, causal after it; the tokens after
the prefix are predicted, each from the position before it (the prefix is read, never predicted). The middle
ground between the two attentions (T5's and UniLM's prefix LM)."""

from __future__ import annotations

import torch

from backend.objectives.base import IGNORE, Batch, Objective, Setting, next_token_labels


def prefix_length(seq_len: int, share: float) -> int:
    """At least one token of prefix, at least one predicted."""
    return min(max(1, round(share * seq_len)), seq_len - 1)


def _make(ids, doc_start, settings, masking, generator) -> Batch:
    b, t = ids.shape
    n = prefix_length(t, settings["prefix_share"])
    labels = next_token_labels(ids, doc_start)
    labels[:, : n - 1] = IGNORE  # position n - 1 (the prefix's last) predicts the first token after the prefix
    return Batch(ids, labels, torch.full((b,), n, dtype=torch.long))


OBJECTIVE = Objective(
    name="prefix",
    title="Prefix LM",
    colour="#B2569E",
    explanation="prefix LM: bidirectional over the first part of the row, causal after it; the rest predicted token "
    "by token",
    attention="prefix",
    make=_make,
    settings=(Setting("prefix_share", 0.5, "the share of each row read bidirectionally (the prefix)"),),
    label=lambda s: f"prefix LM {s['prefix_share'] * 100:g}%",
    held_out={"prefix_share": 0.5},
    predicted_share=lambda s: 1 - s["prefix_share"],
    picture=lambda t: torch.tensor([prefix_length(t, 0.5)]),
    picture_note="prefix of half the row",
)

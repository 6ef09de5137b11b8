"""CLM, the detour: causal attention, every token predicts the next one through the MLM head."""

from __future__ import annotations

from backend.objectives.base import Batch, Objective, next_token_labels


def _make(ids, doc_start, settings, masking, generator) -> Batch:
    return Batch(ids, next_token_labels(ids, doc_start), True)


OBJECTIVE = Objective(
    name="clm",
    title="CLM detour",
    colour="#EF8A3C",  # warm; the masked objectives are cool
    explanation="next token (causal): each position sees only the keys before it and predicts the token after it",
    attention="causal",
    make=_make,
    label=lambda s: "CLM",
    always_evaluated=True,
    picture=lambda t: True,
    per_token="next-token",
    per_token_text="next token (causal)",
    order=1,
)

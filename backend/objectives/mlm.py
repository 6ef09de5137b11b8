"""MLM: bidirectional attention, ``mlm_probability`` of the tokens selected and predicted where they stand."""

from __future__ import annotations

from backend.objectives.base import Batch, Objective, Setting
from backend.objectives.masking import mask_with

# a phase list gives it; the presets have their own
RATE = Setting("mlm_probability", None, "its masking rate", column="mask rate")


def _make(ids, doc_start, settings, masking, generator) -> Batch:
    inputs, labels = mask_with(masking, ids, settings["mlm_probability"], generator)
    return Batch(inputs, labels, False)


OBJECTIVE = Objective(
    name="mlm",
    title="MLM",
    colour="#3C7FD1",
    explanation="masked tokens (bidirectional): every position sees every key; the masked ones are predicted",
    attention="bidirectional",
    make=_make,
    settings=(RATE,),
    label=lambda s: f"MLM {s['mlm_probability'] * 100:g}%",
    held_out={"mlm_probability": 0.15},  # fixed masks at 15%: comparable across recipes
    always_evaluated=True,
    accuracy=True,
    predicted_share=lambda s: s["mlm_probability"],
    picture=lambda t: False,
    per_token="masked-alone",
    per_token_text="masked (bidirectional)",
    order=0,
)

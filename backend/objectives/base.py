"""What an objective is: one declaration (``Objective``) that the trainer, the held-out evaluation, the config
checks, the timeline and the Detour tab all read. Each objective is one module of this package that defines
``OBJECTIVE``; ``__init__.py`` finds them.

An objective turns a packed batch (token ids and document starts, a pure function of seed and step) into a
``Batch``: the model's inputs, the labels (``IGNORE`` where nothing is predicted) and the attention of each row.
The attention is ``False`` (bidirectional), ``True`` (causal) or a tensor of per-row prefix lengths: row ``b`` sees
every key before ``prefix[b]`` and, after it, only keys up to the query (``0`` is causal, the row length is
bidirectional). ``EncoderLM`` takes the three as its ``causal`` argument.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

IGNORE = -100  # a position without a label: the loss and the count skip it (HF's convention)

__all__ = ["IGNORE", "ATTENTIONS", "Batch", "Masking", "Objective", "Setting", "next_token_labels"]

ATTENTIONS = ("bidirectional", "causal", "prefix", "per-sequence")


@dataclass(frozen=True)
class Masking:
    """What masking needs from the tokenizer: special ids (never masked), the mask id, the replacement vocabulary."""

    special: list[int]
    mask_id: int
    vocab: torch.Tensor


@dataclass(frozen=True)
class Batch:
    inputs: torch.Tensor
    labels: torch.Tensor
    attention: bool | torch.Tensor  # False: bidirectional, True: causal, tensor: per-row prefix lengths


@dataclass(frozen=True)
class Setting:
    """One setting of a phase with this objective (a key of the phase), a number in (lo, hi)."""

    name: str
    default: float | None  # None: the phase must give it (a phase list; the presets fill it in)
    help: str  # what it is, e.g. "its masking rate"
    lo: float = 0.0
    hi: float = 1.0
    lo_open: bool = True
    hi_open: bool = True
    column: str = ""  # its column in the app's timeline editor (default: the name, in words)

    @property
    def heading(self) -> str:
        return self.column or self.name.replace("_", " ")

    def range_text(self) -> str:
        return f"{'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"


@dataclass(frozen=True)
class Objective:
    name: str  # the config's word for it (``objective: <name>``)
    title: str  # how people read it: "MLM", "CLM detour"
    colour: str  # one colour wherever it is drawn
    explanation: str  # one line: what is predicted from what
    attention: str  # one of ATTENTIONS
    make: Callable[..., Batch]  # (ids, doc_start, settings dict, Masking, torch.Generator) -> Batch
    settings: tuple[Setting, ...] = ()
    label: Callable[[dict], str] | None = None  # short text of a phase, e.g. "MLM 15%" (default: the title)
    held_out: dict = field(default_factory=dict)  # fixed settings of its held-out loss (comparable across runs)
    always_evaluated: bool = False  # its held-out loss is measured in every run, not only where it trains
    accuracy: bool = False  # the held-out evaluation also reports its accuracy
    predicted_share: Callable[[dict], float] = lambda s: 1.0  # share of positions projected on the vocabulary
    picture: Callable[[int], bool | torch.Tensor] = lambda t: False  # the attention of one row of t tokens, drawn
    picture_note: str = ""  # what the drawn row stands for, when the objective has several
    per_token: str = ""  # the per-token surprise view ``explain`` reads a text with ("next-token" or "masked-alone",
    # ``backend/explain/surprise.py``), "" for none
    per_token_text: str = ""  # that view's name for people, e.g. "next token (causal)"
    order: int = 100  # where it comes in lists (the two existing ones first)

    def defaults(self) -> dict:
        return {s.name: s.default for s in self.settings}

    def text(self, settings: dict) -> str:
        return self.label(settings) if self.label else self.title

    def batch(self, ids: torch.Tensor, doc_start: torch.Tensor, settings: dict, masking: Masking,
              generator: torch.Generator) -> Batch:  # fmt: skip
        return self.make(ids, doc_start, {**self.defaults(), **settings}, masking, generator)


def next_token_labels(input_ids: torch.Tensor, doc_start: torch.Tensor, pad_mask: torch.Tensor | None = None):
    """``labels[t] = input_ids[t+1]``; -100 at the last position, at padding and where the next token starts a new
    document (``ModernBertForMaskedLM`` does not shift labels itself)."""
    labels = torch.full_like(input_ids, IGNORE)
    labels[:, :-1] = input_ids[:, 1:]
    labels[:, :-1][doc_start[:, 1:]] = IGNORE  # next token opens a new document
    if pad_mask is not None:
        nxt_pad = torch.zeros_like(pad_mask, dtype=torch.bool)
        nxt_pad[:, :-1] = ~pad_mask[:, 1:].bool()
        labels[nxt_pad | ~pad_mask.bool()] = IGNORE
    return labels

"""The two objectives' data: how a packed batch becomes inputs and labels.

* CLM (the detour): causal attention, ``labels[t] = input_ids[t+1]``, loss on every token;
  -100 at the last position, at padding and where the next token starts a new document.
  ``ModernBertForMaskedLM`` does not shift labels itself, so we do it here.
* MLM: bidirectional attention, 80/10/10 masking, special tokens never masked, random tokens
  drawn from the real vocabulary without specials, deterministic for a given generator.

The model side (one forward from inputs and labels to the loss, through the same MLM head) is ``encoder_lm.py``.
"""

from __future__ import annotations

import torch

from backend.detour.encoder_lm import IGNORE

__all__ = ["IGNORE", "clm_labels", "mlm_mask", "replacement_vocab", "special_ids"]


def clm_labels(input_ids: torch.Tensor, doc_start: torch.Tensor, pad_mask: torch.Tensor | None = None) -> torch.Tensor:
    labels = torch.full_like(input_ids, IGNORE)
    labels[:, :-1] = input_ids[:, 1:]
    labels[:, :-1][doc_start[:, 1:]] = IGNORE  # next token opens a new document
    if pad_mask is not None:
        nxt_pad = torch.zeros_like(pad_mask, dtype=torch.bool)
        nxt_pad[:, :-1] = ~pad_mask[:, 1:].bool()
        labels[nxt_pad | ~pad_mask.bool()] = IGNORE
    return labels


def special_ids(tokenizer) -> list[int]:
    return sorted({i for i in tokenizer.all_special_ids if i is not None})


def replacement_vocab(tokenizer) -> torch.Tensor:
    """Ids a random replacement may take: the real vocabulary without special tokens."""
    specials = set(special_ids(tokenizer))
    return torch.tensor([i for i in range(len(tokenizer)) if i not in specials], dtype=torch.long)


def mlm_mask(
    input_ids: torch.Tensor,
    probability: float,
    special: list[int] | torch.Tensor,
    mask_id: int,
    vocab: torch.Tensor,
    generator: torch.Generator,
    pad_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT masking. Returns (masked inputs, labels with -100 where not selected)."""
    special_t = torch.as_tensor(special, dtype=torch.long)
    can_mask = ~torch.isin(input_ids, special_t)
    if pad_mask is not None:
        can_mask &= pad_mask.bool()
    u = torch.rand(input_ids.shape, generator=generator)
    selected = (u < probability) & can_mask
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE))
    action = torch.rand(input_ids.shape, generator=generator)
    to_mask = selected & (action < 0.8)
    to_random = selected & (action >= 0.8) & (action < 0.9)
    random_tokens = vocab[torch.randint(len(vocab), input_ids.shape, generator=generator)]
    out = torch.where(to_mask, torch.full_like(input_ids, mask_id), input_ids)
    out = torch.where(to_random, random_tokens, out)
    return out, labels

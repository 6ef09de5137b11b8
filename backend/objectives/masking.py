"""BERT masking, shared by every objective that masks: 80/10/10, special tokens never masked, random tokens drawn
from the real vocabulary without specials, deterministic for a given generator.

The model side (one forward from inputs and labels to the loss, through the same MLM head) is ``encoder_lm.py``.
"""

from __future__ import annotations

import torch

from backend.objectives.base import IGNORE, Masking

__all__ = ["IGNORE", "mask_with", "mlm_mask", "replacement_vocab", "special_ids"]


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


def mask_with(masking: Masking, input_ids: torch.Tensor, probability: float, generator: torch.Generator):
    """``mlm_mask`` with the tokenizer's ids that ``masking`` holds: what every objective that masks calls."""
    return mlm_mask(input_ids, probability, masking.special, masking.mask_id, masking.vocab, generator)

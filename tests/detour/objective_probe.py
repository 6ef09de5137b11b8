"""Shared by the objectives' tests: a tiny model, and its last hidden states under an objective's attention."""

from __future__ import annotations

import torch

from backend.detour.attention import causal_attention
from backend.detour.encoder_lm import EncoderLM
from conftest import TINY_MODERNBERT, bundled_tokenizer


def tiny_lm(attn_implementation: str = "sdpa", seed: int = 0) -> EncoderLM:
    from backend.engine.models import build_from_scratch

    torch.manual_seed(seed)
    return EncoderLM(build_from_scratch(TINY_MODERNBERT, bundled_tokenizer(), attn_implementation=attn_implementation))


@torch.no_grad()
def hidden(lm: EncoderLM, ids: torch.Tensor, attention) -> torch.Tensor:
    """The encoder's last hidden states of ``ids`` under ``attention`` (as the trainer's forward builds it)."""
    lm.eval()
    with causal_attention(lm.hf_model, ids, None, attention) as attn:
        return lm.encoder()(input_ids=ids, attention_mask=attn).last_hidden_state

"""The two objectives, through the same MLM head.

* CLM (the detour): causal attention, ``labels[t] = input_ids[t+1]``, loss on every token;
  -100 at the last position, at padding and where the next token starts a new document.
  ``ModernBertForMaskedLM`` does not shift labels itself, so we do it here.
* MLM: bidirectional attention, 80/10/10 masking, special tokens never masked, random tokens
  drawn from the real vocabulary without specials, deterministic for a given generator.

Vocabulary logits are computed only where a label exists (masked positions for MLM): on CPU the
vocabulary projection dominates the cost otherwise.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from backend.detour.attention import causal_attention

IGNORE = -100


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


def _base_and_head(model: nn.Module):
    """(encoder, head callable) for an HF MLM model: lets us project only the labelled positions."""
    if hasattr(model, "model") and hasattr(model, "decoder"):  # ModernBERT
        return model.model, lambda h: model.decoder(model.head(h))
    if hasattr(model, "bert") and hasattr(model, "cls"):
        return model.bert, model.cls
    for attr in ("roberta", "camembert"):
        if hasattr(model, attr) and hasattr(model, "lm_head"):
            return getattr(model, attr), model.lm_head
    raise TypeError(f"unsupported MLM model {type(model).__name__}")


# Above this many logits (labelled tokens x vocabulary) the loss is computed in chunks whose logits are recomputed
# in backward instead of kept: CLM labels every token, so ModernBERT-base at 64 x 1024 tokens would otherwise hold
# 65,536 x 50,368 fp32 logits (13 GB) plus their gradient. Small runs stay below it and pay nothing.
LOGITS_CHUNK_ELEMENTS = 1 << 28  # 1 GiB of fp32 logits


def _loss_sum(head, hidden: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed cross-entropy, number right) of one chunk of labelled positions."""
    logits = head(hidden).float()
    loss = F.cross_entropy(logits, target, reduction="sum")
    with torch.no_grad():  # "target scores the max" (ties count as right): amax is ~15x faster than argmax on CPU
        correct = (logits.gather(1, target[:, None]).squeeze(1) >= logits.amax(-1)).sum()
    return loss, correct


class EncoderLM(nn.Module):
    """Wraps an HF MLM model so one ``forward`` (what DDP/FSDP see) gives the objective's loss."""

    def __init__(self, hf_model: nn.Module):
        super().__init__()
        self.hf_model = hf_model  # the only submodule: state dicts keep HF's parameter names

    def encoder(self) -> nn.Module:
        return _base_and_head(self.hf_model)[0]

    def forward(self, input_ids, labels, causal: bool, pad_mask=None):
        encoder, head = _base_and_head(self.hf_model)
        with causal_attention(self.hf_model, input_ids, pad_mask, causal) as attn:
            hidden = encoder(input_ids=input_ids, attention_mask=attn).last_hidden_state
        sel = labels != IGNORE
        hidden, target = hidden[sel], labels[sel]
        n = target.numel()
        chunk = max(1, LOGITS_CHUNK_ELEMENTS // self.hf_model.config.vocab_size)
        if n <= chunk or not torch.is_grad_enabled():
            loss, correct = _loss_sum(head, hidden, target)
        else:  # same sums, a chunk's logits at a time (recomputed in backward: one more head forward)
            from torch.utils.checkpoint import checkpoint

            parts = [
                checkpoint(_loss_sum, head, hidden[i : i + chunk], target[i : i + chunk], use_reentrant=False)
                for i in range(0, n, chunk)
            ]
            loss, correct = sum(p[0] for p in parts), sum(p[1] for p in parts)
        return loss / max(n, 1), correct, n

"""Padded batches without empty attention rows: every query may also attend to itself.

ModernBERT's local (sliding-window) layers let a query see the keys within ``local_attention // 2`` positions. In a
right-padded batch, a padding query more than that past its sequence's last real token sees no key at all: its row
of the mask is empty. Fine-tuning batches are full of them: one long sentence padded against short ones at
``max_len`` 256 gives thousands of empty rows per local layer. Kernels disagree on an empty row. torch's CPU kernels
(and the CUDA memory-efficient one) return 0 with a finite logsumexp, so CPU trains. On an H100, torch tries cuDNN
attention first for bf16/fp16 with a mask (fp32 never reaches it); its logsumexp for an empty row is -inf, and its
backward is reported to turn such rows into NaN dQ for some lengths (pytorch#196678, ``seq_len % 128 == 64``). That
matches issue 18 (NaN in bf16 on an H100 at max_len 256 and 512, never in fp32, never on CPU), but it is inferred:
no GPU was at hand to confirm the kernel. One NaN gradient, clipped, makes every weight NaN and the next loss NaN.

Rather than trust every kernel with empty rows, this removes them: each query may also attend to itself. A real
query's row already holds itself, so its row, its output and every gradient are unchanged (bit-identical, tested);
a padding query now sees at least one key. Padding outputs still reach no real position (padding keys stay masked)
and no loss (their labels are -100).
"""

from __future__ import annotations

import torch

from backend.engine.models import model_family


def with_diagonal(mask):
    """``mask`` (batch, heads, q, k) with every query allowed to attend to itself; anything else as it is.

    Boolean masks (sdpa: True = attend) get ``| eye``; additive masks (eager: 0 = attend) get 0 on the diagonal.
    None (no padding), flash attention's 2D padding mask (it unpads: no empty rows) and a flex BlockMask pass."""
    if not isinstance(mask, torch.Tensor) or mask.ndim != 4 or mask.shape[-1] != mask.shape[-2]:
        return mask
    eye = torch.eye(mask.shape[-1], dtype=torch.bool, device=mask.device)
    return mask | eye if mask.dtype == torch.bool else mask.masked_fill(eye, 0.0)


def empty_rows(mask) -> int:
    """Query rows of a 4D mask that attend to no key (0 for no mask)."""
    if not isinstance(mask, torch.Tensor) or mask.ndim != 4:
        return 0
    allowed = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
    return int((~allowed.any(-1)).sum())


def _attend_to_self(module, args, kwargs):
    if "attention_mask" in kwargs:
        kwargs["attention_mask"] = with_diagonal(kwargs["attention_mask"])
    return args, kwargs


def padding_attends_to_itself(model) -> int:
    """Let every query of ``model``'s ModernBERT attention layers attend to itself; returns the layers changed.

    A forward pre-hook on each attention module edits the mask the model built (whatever its dtype and kernel), so
    the model, its saved weights and its heads (mean pooling reads the 2D mask) are untouched. Other families
    have no local layers, hence no empty rows: 0."""
    if model_family(model.config) != "modernbert":
        return 0
    attns = [m.attn for m in model.modules() if hasattr(m, "attention_type") and hasattr(m, "attn")]
    for attn in attns:
        attn.register_forward_pre_hook(_attend_to_self, with_kwargs=True)
    return len(attns)

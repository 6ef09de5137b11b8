"""One forward from (inputs, labels, attention kind) to the loss, through the model's own MLM head.

Vocabulary logits are computed only where a label exists (masked positions for MLM): on CPU the
vocabulary projection dominates the cost otherwise. On a GPU with liger-kernel installed (requirements-gpu.txt),
training fuses the vocabulary projection with the cross-entropy (``fused_vocab_loss``): the logits never exist.
Training under CPU bf16 autocast does the same in torch (``cpu_bf16_vocab_loss``): a chunk of rows' logits
become their gradient while in cache (fp32 training keeps autocast-free plain logits, bit for bit).
Which positions are labelled, and with what, is the objective's business (``objectives.py``).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from backend.detour.attention import causal_attention, cpu_bf16_training
from backend.objectives.base import IGNORE  # a position without a label (HF's -100)


def _parts(model: nn.Module) -> tuple[nn.Module, nn.Module, nn.Linear | None]:
    """(encoder, head up to the vocabulary projection, that projection) of an HF MLM model, so that only labelled
    positions are projected. RoBERTa/CamemBERT's ``lm_head`` is one forward: (encoder, lm_head, None)."""
    if hasattr(model, "model") and hasattr(model, "decoder"):  # ModernBERT: decoder(head(h)), decoder tied, with bias
        return model.model, model.head, model.decoder
    if hasattr(model, "bert") and hasattr(model, "cls"):
        return model.bert, model.cls.predictions.transform, model.cls.predictions.decoder
    for attr in ("roberta", "camembert"):
        if hasattr(model, attr) and hasattr(model, "lm_head"):
            return getattr(model, attr), model.lm_head, None
    raise TypeError(f"unsupported MLM model {type(model).__name__}")


# Above this many logits (labelled tokens x vocabulary) the loss is computed in chunks whose logits are recomputed
# in backward instead of kept: CLM labels every token, so ModernBERT-base at 64 x 1024 tokens would otherwise hold
# 65,536 x 50,368 fp32 logits (13 GB) plus their gradient. Small runs stay below it and pay nothing.
LOGITS_CHUNK_ELEMENTS = 1 << 28  # 1 GiB of fp32 logits

# Where liger-kernel's fused linear cross-entropy runs (Triton kernels): it projects a chunk of positions, takes the
# cross-entropy and its gradient in the same pass and keeps only the gradients, so neither the logits nor the chunked
# path's recomputation exist. With CLM's every-token labels that projection is about a third of a ModernBERT-base
# step's FLOPs and most of its activation memory.
FUSED_LOSS_DEVICES = ("cuda",)


@functools.cache
def _liger_fused_linear_cross_entropy():
    try:
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy
    except Exception:  # not installed (CPU machines), or no Triton / a broken build: the chunked path trains the same
        return None
    return liger_fused_linear_cross_entropy


def fused_vocab_loss(device: torch.device):
    """liger's ``liger_fused_linear_cross_entropy(input, weight, target, bias=, reduction=)`` where it runs (CUDA,
    liger-kernel importable), else None: then the plain or chunked path below computes the same sum."""
    return _liger_fused_linear_cross_entropy() if device.type in FUSED_LOSS_DEVICES else None


# Rows per chunk of the CPU bf16 fused loss (``_Bf16VocabLoss``): a chunk's fp32 logits stay a few MiB (in cache
# while they are turned into their gradient) and the bf16 matmuls stay large enough to run at the matmul rate.
FUSED_CPU_LOGITS_ELEMENTS = 1 << 21


class _Bf16VocabLoss(torch.autograd.Function):
    """Summed cross-entropy of ``x @ weight.T + bias`` against ``target``, the vocabulary projection in bf16 (what
    autocast would run), the softmax in fp32, and its gradients taken in the same pass, a chunk of rows at a time.

    Autocast's path writes every labelled token's fp32 logits, their log-softmax, the gradient of both and the bf16
    cast back (five full passes over tokens x vocabulary in memory: ~11% of a CLM step on a 2-core CPU); here a
    chunk's logits become its gradient while still in cache, and backward only scales the kept gradients. The same
    arithmetic as autocast (bf16 operands, fp32 softmax), summed in another order: used for bf16 training only, so
    fp32 runs keep their bit-identical weights."""

    @staticmethod
    def forward(ctx, x, weight, bias, target, rows):
        bf = torch.bfloat16
        with torch.autocast("cpu", enabled=False):
            xb, wb = x.detach().to(bf), weight.detach().to(bf)
            bb = None if bias is None else bias.detach().to(bf)
            gx = torch.empty_like(xb)
            gw_t = torch.zeros(weight.shape[::-1], dtype=torch.float32, device=weight.device)
            gb = None if bias is None else torch.zeros(bias.shape, dtype=torch.float32, device=bias.device)
            loss = torch.zeros((), dtype=torch.float32, device=x.device)
            for i in range(0, xb.shape[0], rows):
                xc, tc = xb[i : i + rows], target[i : i + rows, None]
                logits = (xc @ wb.T if bb is None else torch.addmm(bb, xc, wb.T)).float()
                lse = torch.logsumexp(logits, 1, keepdim=True)
                loss += (lse - logits.gather(1, tc)).sum()
                g = logits.sub_(lse).exp_()  # softmax, in place of the logits
                g.scatter_add_(1, tc, torch.full_like(tc, -1, dtype=g.dtype))  # minus the one-hot target
                if gb is not None:
                    gb += g.sum(0)
                g = g.to(bf)
                torch.mm(g, wb, out=gx[i : i + rows])
                gw_t += xc.T @ g  # (hidden x vocab): the faster orientation of this product on CPU
        ctx.save_for_backward(gx, gw_t.T, gb if gb is not None else torch.empty(0))
        ctx.has_bias, ctx.x_dtype = bias is not None, x.dtype
        return loss

    @staticmethod
    def backward(ctx, grad):
        gx, gw, gb = ctx.saved_tensors
        return (gx * grad).to(ctx.x_dtype), gw * grad, gb * grad if ctx.has_bias else None, None, None


def cpu_bf16_vocab_loss(hidden: torch.Tensor, decoder: nn.Linear, target: torch.Tensor) -> torch.Tensor:
    """Summed cross-entropy of ``decoder(hidden)``: ``_Bf16VocabLoss`` in chunks of ``FUSED_CPU_LOGITS_ELEMENTS``."""
    rows = max(64, FUSED_CPU_LOGITS_ELEMENTS // decoder.weight.shape[0])
    return _Bf16VocabLoss.apply(hidden, decoder.weight, decoder.bias, target, rows)


def _loss_sum(head, hidden: torch.Tensor, target: torch.Tensor, count: bool = True):
    """(summed cross-entropy, number right or None) of one chunk of labelled positions. Training does not count
    (``count=False``): the loop reads only the loss, and the count is one more pass over every logit."""
    logits = head(hidden).float()
    loss = F.cross_entropy(logits, target, reduction="sum")
    if not count:
        return loss, None
    with torch.no_grad():  # "target scores the max" (ties count as right): amax is ~15x faster than argmax on CPU
        correct = (logits.gather(1, target[:, None]).squeeze(1) >= logits.amax(-1)).sum()
    return loss, correct


class EncoderLM(nn.Module):
    """Wraps an HF MLM model so one ``forward`` (what DDP/FSDP see) gives the objective's loss."""

    def __init__(self, hf_model: nn.Module):
        super().__init__()
        self.hf_model = hf_model  # the only submodule: state dicts keep HF's parameter names

    def encoder(self) -> nn.Module:
        return _parts(self.hf_model)[0]

    def forward(self, input_ids, labels, causal: bool, pad_mask=None):
        """(mean cross-entropy over labelled positions, how many the model got right, how many are labelled).

        With grad enabled (training) nothing is counted (None): the training loop reads only the loss; the held-out
        evaluation runs without grad and gets the count."""
        encoder, transform, decoder = _parts(self.hf_model)
        with causal_attention(self.hf_model, input_ids, pad_mask, causal) as attn:
            hidden = encoder(input_ids=input_ids, attention_mask=attn).last_hidden_state
        sel = labels != IGNORE
        hidden, target = hidden[sel], labels[sel]
        n = target.numel()
        fused = fused_vocab_loss(hidden.device) if torch.is_grad_enabled() and decoder is not None and n else None
        if fused is not None:
            loss = fused(transform(hidden), decoder.weight, target, bias=decoder.bias, reduction="sum")
            return loss / n, None, n
        if decoder is not None and n and cpu_bf16_training(hidden.device):
            return cpu_bf16_vocab_loss(transform(hidden), decoder, target) / n, None, n
        head = transform if decoder is None else (lambda h: decoder(transform(h)))
        chunk = max(1, LOGITS_CHUNK_ELEMENTS // self.hf_model.config.vocab_size)
        training = torch.is_grad_enabled()
        if n <= chunk or not training:
            loss, correct = _loss_sum(head, hidden, target, count=not training)
        else:  # same sums, a chunk's logits at a time (recomputed in backward: one more head forward)
            from torch.utils.checkpoint import checkpoint

            parts = [
                checkpoint(_loss_sum, head, hidden[i : i + chunk], target[i : i + chunk], False, use_reentrant=False)
                for i in range(0, n, chunk)
            ]
            loss, correct = sum(p[0] for p in parts), None
        return loss / max(n, 1), correct, n

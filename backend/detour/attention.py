"""The causal switch: the only place where attention masks are built.

ModernBERT (transformers 5.x) has two masks: global layers use ``full_attention`` and local
layers ``sliding_attention`` (keys within ``local_attention // 2`` of the query). Passing a dict
``{"full_attention": ..., "sliding_attention": ...}`` built with ``masking_utils`` and
``and_mask_function=causal_mask_function`` keeps the window AND adds causality. Two traps this
avoids: a single 4D mask is applied to every layer (the window is lost), and ``is_causal=True``
alone is ignored when a mask is present under sdpa/eager. Per attention implementation:

* sdpa / eager: dense masks. Under sdpa with no padding, global layers take ``is_causal`` instead of a mask (sdpa's
  causal kernel); local layers keep their banded mask, which still costs T x T (built by one broadcast comparison
  and kept per shape: the library's builder took a fifth of a small CLM step). On a CPU, rows of 8 reaches or more
  (packed, no padding) skip that cost: ``banded_attention`` gives each block of queries only the keys it can see,
  causal and bidirectional (same outputs up to summation order; ``_banded_here`` says where and why).
* flex_attention: BlockMasks (``masking_utils`` builds them for a flex config), so the blocks outside a window or
  above the diagonal are skipped: local layers cost O(T * w). All four masks (global/local x causal/bidirectional)
  come from one rule whose numbers are tensors: flex compiles one kernel per rule and torch gives up compiling after
  8 (then it falls back to an unfused path that materialises T x T), which a run mixing CLM, MLM and evaluation
  would reach with the library's four separate rules.
* flash_attention_2: no mask; it takes causality from each attention module's ``is_causal`` flag, so for it we flip
  that flag on every layer, and each local module's ``sliding_window`` keeps its window.

BERT / RoBERTa / CamemBERT: a 4D additive causal mask (padding folded in); not with flash_attention_2.

Per-row prefix attention (``causal`` given as a tensor of prefix lengths, one per row: row ``b`` sees every key before
``prefix[b]`` and, from there on, only the keys up to the query; 0 is causal, the row length bidirectional) is what
the prefix LM and mixed batches train with: dense masks for sdpa and eager only (``_prefix_masks``), the window of
ModernBERT's local layers kept. flex_attention and flash_attention_2 are refused for it with a clear error.
"""

from __future__ import annotations

import contextlib
import copy
import functools

import torch
import torch.nn.functional as F

from backend.core.errors import ConfigError
from backend.engine.models import model_family


def _modernbert_masks(model, input_ids: torch.Tensor, pad_mask: torch.Tensor | None, dtype: torch.dtype) -> dict:
    from transformers.masking_utils import (
        causal_mask_function,
        create_bidirectional_mask,
        create_bidirectional_sliding_window_mask,
    )

    b, t = input_ids.shape
    probe = torch.empty(b, t, 1, dtype=dtype, device=input_ids.device)  # shape/dtype/device only
    if pad_mask is None:
        pad_mask = torch.ones(b, t, dtype=torch.long, device=input_ids.device)
    kw = dict(config=model.config, inputs_embeds=probe, attention_mask=pad_mask, and_mask_function=causal_mask_function)
    return {
        "full_attention": create_bidirectional_mask(**kw),
        "sliding_attention": create_bidirectional_sliding_window_mask(**kw),
    }


@functools.lru_cache(maxsize=8)
def _sdpa_sliding_causal(b: int, t: int, reach: int, device: torch.device) -> torch.Tensor:
    """The local layers' causal banded mask without padding, as ``masking_utils`` builds it (key ``k`` visible from
    query ``q`` when ``q - reach <= k <= q``; equal element for element, tested): one broadcast comparison instead
    of the library's per-element mask functions (~0.3 s per CLM step at 16 x 256 on a 2-core CPU, a fifth of the
    step), and built once per shape. The tensor is shared between steps: read-only, like every mask sdpa takes."""
    q = torch.arange(t, device=device)[:, None]
    k = torch.arange(t, device=device)[None, :]
    return ((k <= q) & (q - k <= reach)).expand(b, 1, t, t)


def _flex_rule(causal: torch.Tensor, reach: torch.Tensor):
    """Key ``kv`` is visible from query ``q`` when ``kv <= q`` (if ``causal``) and ``|q - kv| <= reach``."""

    def rule(batch_idx, head_idx, q_idx, kv_idx):
        return ((kv_idx <= q_idx) | ~causal) & ((q_idx - kv_idx).abs() <= reach)

    return rule


def _flex_masks(model, input_ids: torch.Tensor, pad_mask: torch.Tensor | None, causal: bool) -> dict:
    """BlockMasks for both layer kinds, causal or not: reach T on global layers, ``local_attention // 2`` on local
    ones (ModernBERT's window); padded keys are masked by ``masking_utils``."""
    from transformers.masking_utils import create_bidirectional_mask

    b, t = input_ids.shape
    dev = input_ids.device
    probe = torch.empty(b, t, 1, device=dev)  # shape/device only
    flag = torch.tensor(causal, device=dev)
    reach = {"full_attention": t, "sliding_attention": model.config.local_attention // 2}
    return {
        kind: create_bidirectional_mask(
            config=model.config,
            inputs_embeds=probe,
            attention_mask=pad_mask,
            and_mask_function=_flex_rule(flag, torch.tensor(r, device=dev)),
        )
        for kind, r in reach.items()
    }


def _bert_causal_mask(input_ids: torch.Tensor, pad_mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    b, t = input_ids.shape
    allowed = torch.ones(t, t, dtype=torch.bool, device=input_ids.device).tril()
    allowed = allowed.expand(b, 1, t, t)
    if pad_mask is not None:
        allowed = allowed & pad_mask.bool()[:, None, None, :]
    mask = torch.zeros(b, 1, t, t, dtype=dtype, device=input_ids.device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)


def _prefix_masks(model, input_ids: torch.Tensor, pad_mask: torch.Tensor | None, prefix: torch.Tensor, dtype):
    """Dense per-row prefix masks: boolean for sdpa, additive for eager; a dict of both layer kinds for ModernBERT
    (the local layers keep ``|q - k| <= local_attention // 2``), one 4D mask for the BERT family."""
    family = model_family(model.config)
    impl = getattr(model.config, "_attn_implementation", "sdpa")
    if impl not in ("sdpa", "eager"):
        raise ConfigError("model.attn_implementation", impl,
                          "a prefix (or per-sequence) attention mask is built densely: use sdpa or eager")  # fmt: skip
    if family not in ("modernbert", "bert"):
        raise ConfigError("model.name", getattr(model.config, "model_type", "?"),
                          "prefix attention is supported for ModernBERT and BERT/RoBERTa/CamemBERT")  # fmt: skip
    b, t = input_ids.shape
    dev = input_ids.device
    q = torch.arange(t, device=dev)[:, None]
    k = torch.arange(t, device=dev)[None, :]
    allowed = (k <= q)[None, None] | (k[None, None] < prefix.to(dev).view(-1, 1, 1, 1))  # (b, 1, t, t)
    allowed = allowed.expand(b, 1, t, t)
    if pad_mask is not None:
        allowed = allowed & pad_mask.bool()[:, None, None, :]

    def as_mask(m: torch.Tensor) -> torch.Tensor:
        if impl == "sdpa" and family == "modernbert":
            return m
        return torch.zeros(m.shape, dtype=dtype, device=dev).masked_fill(~m, torch.finfo(dtype).min)

    if family == "bert":
        return as_mask(allowed)
    window = (q - k).abs() <= model.config.local_attention // 2
    return {"full_attention": as_mask(allowed), "sliding_attention": as_mask(allowed & window)}


def _modernbert_attention_modules(model, layer_type: str | None = None) -> list:
    """The ModernBERT attention modules (of ``layer_type`` layers only, if given)."""
    return [
        m.attn
        for m in model.modules()
        if hasattr(m, "attention_type") and hasattr(m, "attn") and layer_type in (None, m.attention_type)
    ]


def causal_plan(model, input_ids: torch.Tensor, pad_mask: torch.Tensor | None, causal: bool, dtype=None):
    """-> (``attention_mask`` for the encoder of ``model``, attention modules that need ``is_causal = True``).

    Bidirectional: the plain 2D padding mask (the model builds its own masks, window included), except under
    flex_attention, where both cases get the one-rule BlockMasks. ModernBERT under sdpa without padding: global
    layers get no mask and ``is_causal``, which selects sdpa's causal kernel (it skips the upper triangle: same
    outputs, ~6% faster CLM steps); local layers keep their banded causal mask. Under eager a missing mask would
    mean no causality at all, so eager always gets explicit masks.
    """
    if isinstance(causal, torch.Tensor):  # per-row prefix lengths: dense masks, no flags
        return _prefix_masks(model, input_ids, pad_mask, causal, dtype or next(model.parameters()).dtype), []
    family = model_family(model.config)
    impl = getattr(model.config, "_attn_implementation", "sdpa")
    if family == "modernbert" and impl == "flex_attention":
        return _flex_masks(model, input_ids, pad_mask, causal), []
    if not causal:
        return pad_mask, []
    dtype = dtype or next(model.parameters()).dtype
    if family == "modernbert":
        if impl == "flash_attention_2":
            return pad_mask, _modernbert_attention_modules(model)  # flash reads causality from the module
        if impl == "sdpa" and pad_mask is None:
            b, t = input_ids.shape
            local = _sdpa_sliding_causal(b, t, model.config.local_attention // 2, input_ids.device)
            masks = {"full_attention": None, "sliding_attention": local}
            return masks, _modernbert_attention_modules(model, "full_attention")
        return _modernbert_masks(model, input_ids, pad_mask, dtype), []
    if family == "bert":
        if impl == "flash_attention_2":
            raise ConfigError(
                "model.attn_implementation", impl, "the CLM detour of a BERT-family model needs a 4D mask: use sdpa"
            )
        return _bert_causal_mask(input_ids, pad_mask, dtype), []
    raise ConfigError(
        "model.name",
        getattr(model.config, "model_type", "?"),
        "causal attention is supported for ModernBERT and BERT/RoBERTa/CamemBERT",
    )


CPU_BF16_ATTENTION = "detour_cpu_bf16_matmul"


def _additive(mask: torch.Tensor) -> torch.Tensor:
    """A boolean mask (True: visible) as the fp32 bias softmax adds; the smallest float where hidden, as eager does
    (a row with nothing visible then spreads evenly instead of giving NaN)."""
    return torch.zeros(mask.shape, dtype=torch.float32, device=mask.device).masked_fill_(
        ~mask, torch.finfo(torch.float32).min
    )


@functools.lru_cache(maxsize=8)
def _causal_additive(t: int, device: torch.device) -> torch.Tensor:
    return _additive(torch.ones(t, t, dtype=torch.bool, device=device).tril())


def cpu_bf16_matmul_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Attention as two bf16 batched matmuls around an fp32 softmax (eager's arithmetic under autocast), for ModernBERT
    training under CPU bf16 autocast: at 16 x 256 on this 2-core CPU sdpa's CPU flash kernel takes ~48 ms per layer
    forward+backward with the local band mask (~43 ms causal), these matmuls ~22 ms (``bench/profile_train_step.py
    --attention``). The mask is sdpa's (a boolean, or None with ``module.is_causal``)."""
    scores = torch.matmul(query, key.transpose(-1, -2)).float() * (scaling or query.shape[-1] ** -0.5)
    if attention_mask is not None:
        bias = _additive(attention_mask) if attention_mask.dtype == torch.bool else attention_mask.float()
        scores = scores + bias
    elif getattr(module, "is_causal", False):
        scores = scores + _causal_additive(query.shape[-2], query.device)
    probs = scores.softmax(-1).to(value.dtype)
    if dropout:
        probs = torch.nn.functional.dropout(probs, p=dropout, training=True)
    return torch.matmul(probs, value).transpose(1, 2).contiguous(), None


def cpu_bf16_training(device: torch.device) -> bool:
    """Training (grad on) on a CPU under bf16 autocast: where the matmul attention and ``cpu_bf16_vocab_loss`` stand
    in for sdpa and autocast's logits (fp32 training, evaluation and every other device keep those, bit for bit)."""
    return (
        device.type == "cpu"
        and torch.is_grad_enabled()
        and torch.is_autocast_enabled("cpu")
        and torch.get_autocast_dtype("cpu") == torch.bfloat16
    )


def _matmul_attention_here(model) -> bool:
    """ModernBERT under sdpa, in ``cpu_bf16_training``: where ``cpu_bf16_matmul_attention`` replaces sdpa."""
    return (
        model_family(model.config) == "modernbert"
        and getattr(model.config, "_attn_implementation", None) == "sdpa"
        and cpu_bf16_training(model.device)
    )


@contextlib.contextmanager
def _attention_function(modules: list, name: str, function):
    """Each of ``modules`` reads ``name`` (``function``, registered once) as its attention implementation while inside:
    a copy of its config per name, made once per module so that a compiled encoder sees the same object every step
    (the model's own config, its masks and what is saved stay sdpa)."""
    from transformers import AttentionInterface

    if name not in AttentionInterface._global_mapping:
        AttentionInterface.register(name, function)
    old = [m.config for m in modules]
    try:
        for m in modules:
            swapped = m.__dict__.get("_detour_swapped_configs")
            if swapped is None or swapped[0] is not m.config:
                swapped = m._detour_swapped_configs = (m.config, {})
            if name not in swapped[1]:
                swapped[1][name] = copy.copy(m.config)
                swapped[1][name]._attn_implementation_internal = name
            m.config = swapped[1][name]
        yield
    finally:
        for m, c in zip(modules, old):
            m.config = c


def banded_attention(query, key, value, reach: int, causal: bool, dropout: float = 0.0, scaling=None) -> torch.Tensor:
    """sdpa of a sliding-window layer (key ``k`` visible from query ``q`` when ``|q - k| <= reach``, and ``k <= q`` if
    ``causal``), computed per block of ``reach`` queries against the only keys that block can see: ``3 * reach`` keys
    (``2 * reach`` causal) instead of all T. Same outputs as sdpa with the band mask up to summation order (tested in
    float64). (B, H, T, D) -> (B, H, T, D)."""
    b, h, t, d = query.shape
    blk = reach
    pad_t = -t % blk  # queries padded to whole blocks; padded keys are masked out below
    left, right = reach, (0 if causal else reach) + pad_t
    nb, span = (t + pad_t) // blk, blk + reach + (0 if causal else reach)
    q = F.pad(query, (0, 0, 0, pad_t)).view(b, h, nb, blk, d)
    k = F.pad(key, (0, 0, left, right)).unfold(2, span, blk).transpose(-1, -2)  # (B, H, nb, span, D), a view
    v = F.pad(value, (0, 0, left, right)).unfold(2, span, blk).transpose(-1, -2)
    mask = _band_blocks(nb, blk, span, reach, causal, t, query.device)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, scale=scaling)
    return out.reshape(b, h, nb * blk, d)[:, :, :t]


def _band_blocks(nb: int, blk: int, span: int, reach: int, causal: bool, t: int, device) -> torch.Tensor:
    """(nb, blk, span) visibility of ``banded_attention``'s blocks: query ``blk * i + a`` sees key ``blk * i - reach +
    c`` within the band and inside the sequence. A few thousand booleans, rebuilt per call (no cache for a compiled
    encoder to trip over)."""
    qpos = torch.arange(nb, device=device)[:, None, None] * blk + torch.arange(blk, device=device)[None, :, None]
    kpos = qpos - torch.arange(blk, device=device)[None, :, None] - reach + torch.arange(span, device=device)
    visible = ((qpos - kpos).abs() <= reach) & (kpos >= 0) & (kpos < t)
    return visible & (kpos <= qpos) if causal else visible


CPU_BANDED = {True: "detour_cpu_banded_causal", False: "detour_cpu_banded"}


def _banded_function(causal: bool):
    def attend(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        reach = module.config.local_attention // 2  # the band the model's own mask has (``_sdpa_sliding_causal``)
        out = banded_attention(query, key, value, reach, causal, dropout, scaling)
        return out.transpose(1, 2).contiguous(), None

    return attend


BANDED_MIN_REACHES = 8  # below this many reaches per row the blocks cost more than the band (``_banded_here``)


def _banded_here(model, input_ids: torch.Tensor, pad_mask, causal) -> bool:
    """ModernBERT's local layers on a CPU under sdpa, packed rows (no padding), bidirectional or causal (not per-row
    prefixes), not under CPU bf16 autocast training (the matmul attention runs there), and rows of at least
    ``BANDED_MIN_REACHES`` reaches. sdpa's CPU kernel computes every key of a masked row, so a band pays for all T
    keys; the blocks pay for small matmuls and the copies of their keys instead, which wins from T = 8 reaches on.
    One local layer's forward+backward, fp32, one thread (``bench/profile_train_step.py --attention``), sdpa ->
    banded, bidirectional / causal: T = 4 reaches (32 x 128, reach 32) 89 -> 147 / 88 -> 108 ms (slower); T = 8
    (16 x 256) 153 -> 134 / 233 -> 114 ms; T = 16 (8 x 512) 321 -> 136 / 306 -> 108 ms; T = 1024, reach 64: 3.2x /
    4.6x faster."""
    if isinstance(causal, torch.Tensor) or pad_mask is not None or input_ids.device.type != "cpu":
        return False
    if model_family(model.config) != "modernbert" or getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    reach = model.config.local_attention // 2
    return input_ids.shape[1] >= BANDED_MIN_REACHES * reach and not cpu_bf16_training(input_ids.device)


@contextlib.contextmanager
def causal_attention(model, input_ids: torch.Tensor, pad_mask: torch.Tensor | None, causal: bool, dtype=None):
    """Yields the ``attention_mask`` for the encoder; sets ``is_causal`` where the plan needs it, while inside (and on
    a CPU, the attention that does less than sdpa's masked kernel: training ModernBERT under bf16 autocast, the
    matmul attention on every layer; otherwise the banded attention on the local layers, ``_banded_here``)."""
    mask, modules = causal_plan(model, input_ids, pad_mask, causal, dtype)
    old = [m.is_causal for m in modules]
    if _matmul_attention_here(model):
        swap = _attention_function(
            _modernbert_attention_modules(model), CPU_BF16_ATTENTION, lambda *a, **k: cpu_bf16_matmul_attention(*a, **k)
        )
    elif _banded_here(model, input_ids, pad_mask, causal):
        local = _modernbert_attention_modules(model, "sliding_attention")
        swap = _attention_function(local, CPU_BANDED[bool(causal)], _banded_function(bool(causal)))
    else:
        swap = contextlib.nullcontext()
    try:
        for m in modules:
            m.is_causal = True
        with swap:
            yield mask
    finally:
        for m, o in zip(modules, old):
            m.is_causal = o


def check_causal_supported(config, phase: str | None = None) -> None:
    """A CLM phase (``phase`` names it) needs an architecture whose attention this module can make causal."""
    if model_family(config) is None:
        where = f"phase '{phase}' is CLM, and a CLM phase" if phase else "the CLM detour"
        raise ConfigError(
            "model.name",
            getattr(config, "model_type", "?"),
            f"{where} needs an architecture whose attention can be made causal: ModernBERT, BERT, RoBERTa, "
            "CamemBERT, XLM-RoBERTa (use MLM phases only for others)",
        )

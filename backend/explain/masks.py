"""What each layer may attend to, under each objective (``backend/objectives/``: each says which attention one of
its rows trains with, ``Objective.picture``).

The pattern is read, not drawn: one forward of the encoder under the trainer's own ``causal_attention`` (called as
``EncoderLM`` calls it in training, with no padding mask) records the ``attention_mask`` each block receives and the
``is_causal`` flag of its attention module at that moment, and turns them into a "query i may attend to key j"
matrix. The bidirectional pass is the same forward with ``causal=False``: the model builds its own masks, window
included; a prefix row passes its prefix length, as the trainer does. Then the pattern is *measured*: every block's
input is replaced by one clean copy in which a single key position is pushed hard (+ and -, one copy each), and a key
counts as seen by a query when that query's output changes at all. Within one block only attention mixes positions
(norms, MLP and residual act per position), so the measured matrix is the mask the kernel really applied. Both must
agree; a disagreement is reported, never hidden.
"""

from __future__ import annotations

import contextlib
import inspect
from functools import partial

import torch

from backend import objectives
from backend.core.errors import DetourError
from backend.detour.attention import causal_attention
from backend.detour.encoder_lm import EncoderLM
from backend.engine.models import ModelRef, load_masked_lm, quiet_transformers, resolve_model, transformer_blocks

KIND_NAMES = {"full_attention": "global", "sliding_attention": "local"}
MAX_SEQ_LEN = 512
MEASURED_KEYS = 8  # key positions pushed per measurement: each one checks every query, both window edges included
PUSH = 100.0  # size of the push, in standard deviations of the block's input


class MaskViewError(DetourError):
    pass


def layer_type(block) -> str:
    """'full_attention' or 'sliding_attention' (ModernBERT's names); every BERT-family layer is global."""
    return getattr(block, "attention_type", "full_attention")


def _attention_module(block):
    return next(m for m in block.modules() if hasattr(m, "is_causal"))


def may_attend(mask, is_causal: bool, attn_implementation: str, seq_len: int) -> torch.Tensor:
    """One layer's attention mask as a (query, key) bool matrix.

    ``None`` is no mask: every key, or the causal triangle when the module's ``is_causal`` is set and the kernel
    honours it (sdpa and flash do; eager ignores the flag, which is why the detour never gives eager a missing mask).
    A boolean mask is True where allowed; an additive one is 0 where allowed and very negative elsewhere.
    """
    if mask is None:
        every = torch.ones(seq_len, seq_len, dtype=torch.bool)
        return every.tril() if is_causal and attn_implementation != "eager" else every
    if not isinstance(mask, torch.Tensor):
        raise MaskViewError(f"masks: cannot read an attention mask of type {type(mask).__name__}; load with sdpa")
    m = mask[0, 0] if mask.dim() == 4 else mask  # no padding: the same for every row of the batch and every head
    return m.clone() if m.dtype == torch.bool else m == 0


@contextlib.contextmanager
def _hooked(handles: list):
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _rows(attention, n: int):
    """The attention of one row, for a batch of ``n`` copies of it."""
    return attention.expand(n) if isinstance(attention, torch.Tensor) else attention


def given_patterns(model, ids: torch.Tensor, causal) -> list[torch.Tensor]:
    """The (query, key) pattern each block is given in one forward under the trainer's ``causal_attention``."""
    impl = getattr(model.config, "_attn_implementation", "sdpa")
    blocks = transformer_blocks(model)
    seen: dict[int, torch.Tensor] = {}

    def record(i, block, args, kwargs):
        mask = inspect.signature(block.forward).bind(*args, **kwargs).arguments.get("attention_mask")
        seen[i] = may_attend(mask, _attention_module(block).is_causal, impl, ids.shape[1])

    hooks = [b.register_forward_pre_hook(partial(record, i), with_kwargs=True) for i, b in enumerate(blocks)]
    with _hooked(hooks), torch.inference_mode(), causal_attention(model, ids, None, causal) as attn:
        EncoderLM(model).encoder()(input_ids=ids, attention_mask=attn)
    return [seen[i] for i in range(len(blocks))]


class _Done(Exception):
    """Raised after the last block of interest: the rest of the forward is not needed."""


def measured_patterns(model, ids: torch.Tensor, causal, layers: list[int], keys: list[int]) -> dict:
    """{layer: (query, len(keys)) bool}: which queries' outputs of that block move when one key's input is pushed."""
    n, seq_len = len(keys), ids.shape[1]
    blocks = transformer_blocks(model)
    last = max(layers)
    direction = torch.randn(model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    rows, cols = torch.arange(n), torch.tensor(keys)
    seen: dict[int, torch.Tensor] = {}

    def push(block, args, kwargs):
        x = args[0] if args else kwargs["hidden_states"]
        clean = x[-1:].expand_as(x).clone()  # the last copy is never pushed: every block gets the same clean input
        step = (PUSH * clean.std() * direction).to(clean.dtype)
        clean[rows, cols] += step
        clean[n + rows, cols] -= step
        return ((clean, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": clean})

    def compare(i, block, args, out):
        h = out[0] if isinstance(out, tuple) else out
        moved = (h[:-1] != h[-1:]).any(-1)  # (2n copies, queries)
        seen[i] = (moved[:n] | moved[n:]).T
        if i == last:
            raise _Done

    hooks = []
    for i, b in enumerate(blocks[: last + 1]):
        hooks.append(b.register_forward_pre_hook(push, with_kwargs=True))
        hooks.append(b.register_forward_hook(partial(compare, i)))
    batch = ids.expand(2 * n + 1, seq_len)
    with _hooked(hooks), torch.inference_mode(), contextlib.suppress(_Done):
        with causal_attention(model, batch, None, _rows(causal, len(batch))) as attn:
            EncoderLM(model).encoder()(input_ids=batch, attention_mask=attn)
    return {i: seen[i] for i in layers}


def measured_keys(seq_len: int, count: int = MEASURED_KEYS) -> list[int]:
    """Evenly spaced key positions, the first and the last included."""
    if seq_len <= count:
        return list(range(seq_len))
    return sorted({round(i * (seq_len - 1) / (count - 1)) for i in range(count)})


def _kinds(model) -> list[dict]:
    cfg = model.config
    out: dict[str, dict] = {}
    for i, block in enumerate(transformer_blocks(model)):
        kind = layer_type(block)
        local = kind == "sliding_attention"
        entry = out.setdefault(
            kind,
            {
                "kind": kind,
                "name": KIND_NAMES.get(kind, kind),
                "layers": [],
                "window": getattr(cfg, "local_attention", None) if local else None,  # keys |q - k| <= window // 2
                "reach": getattr(cfg, "sliding_window", None) if local else None,
            },
        )
        entry["layers"].append(i)
    return list(out.values())


def _summary(pattern: torch.Tensor) -> dict:
    seen = pattern.sum(1)
    above = pattern.triu(1).any().item()
    return {"keys_min": int(seen.min()), "keys_max": int(seen.max()), "sees_future": bool(above)}


def _describe(o: objectives.Objective) -> dict:
    return {"name": o.name, "title": o.title, "attention": o.attention, "colour": o.colour,
            "explanation": o.explanation, "note": o.picture_note}  # fmt: skip


def patterns_of(model, seq_len: int, measure: bool = True) -> dict:
    """The attention pattern of each layer kind under each objective, for an already loaded MLM model (objectives
    whose drawn row has the same attention share one measurement).

    The model's ``is_causal`` flags are flipped during the causal forwards (as in training): give it a model that
    nothing else is running at the same time.
    """
    ids = torch.randint(0, model.config.vocab_size, (1, seq_len), generator=torch.Generator().manual_seed(0))
    kinds = _kinds(model)
    keys = measured_keys(seq_len)
    done: dict[object, tuple] = {}
    for o in objectives.all_objectives():
        objective, causal = o.name, o.picture(seq_len)
        same = tuple(causal.tolist()) if isinstance(causal, torch.Tensor) else causal
        if same not in done:
            first = [k["layers"][0] for k in kinds]
            done[same] = (given_patterns(model, ids, causal),
                          measured_patterns(model, ids, causal, first, keys) if measure else {})  # fmt: skip
        given, measured = done[same]
        for k in kinds:
            pattern = given[k["layers"][0]]
            uneven = [i for i in k["layers"] if not torch.equal(given[i], pattern)]
            if uneven:
                raise MaskViewError(f"masks: layers {uneven} of kind {k['kind']} got another pattern than layer "
                                    f"{k['layers'][0]}")  # fmt: skip
            k[objective] = pattern.int().tolist()
            k[f"{objective}_summary"] = _summary(pattern)
            if measure:
                got, want = measured[k["layers"][0]], pattern[:, keys]
                k[f"{objective}_measured"] = {
                    "layer": k["layers"][0],
                    "keys": keys,
                    "mismatches": int((got != want).sum()),
                    "agrees": bool(torch.equal(got, want)),
                }
    return {
        "seq_len": seq_len,
        "model_type": getattr(model.config, "model_type", "?"),
        "attn_implementation": getattr(model.config, "_attn_implementation", "sdpa"),
        "kinds": kinds,
        "objectives": [_describe(o) for o in objectives.all_objectives()],
    }


def attention_patterns(
    spec: str | ModelRef, seq_len: int = 128, measure: bool = True, trust_remote_code: bool = False
) -> dict:
    """``patterns_of`` for a model (bundled name, run, checkpoint, folder, hub id, or the ``ModelRef`` the caller
    resolved), on a private copy loaded for this call: the causal forwards flip flags that another thread's forward
    on a shared copy would see."""
    try:
        seq_len = int(seq_len)
    except (TypeError, ValueError) as exc:
        raise MaskViewError(f"masks: sequence length {seq_len!r} is not a whole number") from exc
    ref = resolve_model(spec)
    with quiet_transformers():
        model = load_masked_lm(ref, trust_remote_code=trust_remote_code).eval()
    longest = min(MAX_SEQ_LEN, getattr(model.config, "max_position_embeddings", MAX_SEQ_LEN))
    if not 2 <= seq_len <= longest:
        raise MaskViewError(f"masks: sequence length {seq_len}; allowed 2-{longest} for this model")
    return {"model": ref.spec, **patterns_of(model, seq_len, measure)}

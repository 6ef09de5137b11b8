"""The causal switch under flex_attention (BlockMasks) and flash_attention_2 (module flags): same outputs as eager
with hand-built masks, no future leak, windows kept and block-sparse.

flex_attention runs here on CPU, compiled by inductor (transformers always wraps it in torch.compile; a C++ compiler
is needed), forward only: torch 2.13 has no flex_attention backward on CPU.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch

from backend.detour.attention import causal_attention, causal_plan
from backend.engine.models import build_from_scratch, load_masked_lm
from conftest import TINY_MODERNBERT, bundled_tokenizer

# local_attention 32 (keys within 16) at seq 320: ten windows, and 3 flex blocks of 128 (the last one partial).
SCRATCH = dict(TINY_MODERNBERT, max_position_embeddings=512, local_attention=32)
SEQ = {"scratch": 320, "detour-tiny-en": 384}  # the bundled model: window 64, six windows and three blocks


def _pair(name: str, impl: str):
    """(model under ``impl``, the same weights under eager), in eval mode."""
    if name == "scratch":
        tok = bundled_tokenizer()
        torch.manual_seed(0)
        model = build_from_scratch(SCRATCH, tok, attn_implementation=impl)
        eager = build_from_scratch(SCRATCH, tok, attn_implementation="eager")
        eager.load_state_dict(model.state_dict())
    else:
        model = load_masked_lm(name, attn_implementation=impl)
        eager = load_masked_lm(name, attn_implementation="eager")
    return model.eval(), eager.eval()


# The bundled model compiles other kernels (head size 64): ~80 s more on 2 cores, so it runs with the slow tests.
@pytest.fixture(scope="module", params=["scratch", pytest.param("detour-tiny-en", marks=pytest.mark.slow)])
def flex(request):
    model, eager = _pair(request.param, "flex_attention")
    return request.param, model, eager


def _inputs(t: int, padded: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 8000, (2, t), generator=g)
    pad = None
    if padded:  # the second row ends in 70 pads: its last local windows see padding only
        pad = torch.ones_like(ids)
        pad[1, -70:] = 0
    return ids, pad


def _explicit(t: int, half: int | None, pad: torch.Tensor | None, causal: bool) -> torch.Tensor:
    """An additive 4D mask written out by hand: causal and/or |q - k| <= half, padded keys hidden."""
    q, k = torch.arange(t)[:, None], torch.arange(t)[None, :]
    allowed = torch.ones(t, t, dtype=torch.bool)
    if causal:
        allowed &= k <= q
    if half is not None:
        allowed &= (q - k).abs() <= half
    allowed = allowed[None, None].expand(2, 1, t, t)
    if pad is not None:
        allowed = allowed & pad.bool()[:, None, None, :]
    return torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)


def _reference(eager, ids, pad, causal, window: bool = True) -> torch.Tensor:
    t, half = ids.shape[1], eager.config.local_attention // 2
    masks = {
        "full_attention": _explicit(t, None, pad, causal),
        "sliding_attention": _explicit(t, half if window else None, pad, causal),
    }
    return eager.model(ids, attention_mask=masks).last_hidden_state


def _encode(model, ids, pad, causal) -> torch.Tensor:
    with causal_attention(model, ids, pad, causal) as mask:
        return model.model(ids, attention_mask=mask).last_hidden_state


@pytest.mark.parametrize("padded", [False, True], ids=["packed", "padded"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@torch.no_grad()
def test_flex_gives_the_hidden_states_of_eager_with_hand_built_masks(flex, causal, padded):
    name, model, eager = flex
    ids, pad = _inputs(SEQ[name], padded)
    valid = torch.ones_like(ids, dtype=torch.bool) if pad is None else pad.bool()  # a pad's own output is unused
    ours = _encode(model, ids, pad, causal)
    ref = _reference(eager, ids, pad, causal)
    torch.testing.assert_close(ours[valid], ref[valid], rtol=1e-5, atol=2e-5)
    # the comparison has teeth: the same masks without the local window give other outputs
    assert (_reference(eager, ids, pad, causal, window=False) - ref)[valid].abs().max() > 1e-3


@pytest.mark.parametrize("padded", [False, True], ids=["packed", "padded"])
@torch.no_grad()
def test_flex_future_tokens_do_not_change_past_outputs(flex, padded):
    name, model, _ = flex
    t, pos = SEQ[name], 200
    a, pad = _inputs(t, padded)
    b = a.clone()
    b[:, pos:] = torch.randint(5, 8000, (2, t - pos), generator=torch.Generator().manual_seed(1))
    ha, hb = _encode(model, a, pad, True), _encode(model, b, pad, True)
    assert torch.equal(ha[:, :pos], hb[:, :pos])
    assert not torch.allclose(ha[0, pos:], hb[0, pos:])  # and the changed tokens do matter
    hb_bidirectional = _encode(model, b, pad, False)
    assert not torch.allclose(_encode(model, a, pad, False)[:, pos - 1], hb_bidirectional[:, pos - 1])


@torch.no_grad()
def test_switching_between_causal_and_bidirectional_compiles_no_new_kernel(flex):
    """A run alternates CLM, MLM and held-out evaluation: every mask is one rule, so after the first compile nothing
    is compiled again (torch stops compiling after 8 variants and falls back to flex's unfused T x T path)."""
    from torch._dynamo.utils import counters

    name, model, _ = flex
    ids, _ = _inputs(SEQ[name], False)
    torch._dynamo.reset()
    _encode(model, ids, None, True)
    compiled = counters["stats"]["unique_graphs"]
    for causal in (False, True, False):
        _encode(model, ids, None, causal)
    assert counters["stats"]["unique_graphs"] == compiled


@torch.no_grad()
def test_flex_block_masks_skip_what_the_window_and_causality_hide():
    """Local layers cost O(T * w): at T = 1024 (8 blocks of 128) a local layer visits at most 2 key blocks per query
    block when causal (3 when not), a causal global layer the lower triangle (36 of 64)."""
    model, _ = _pair("scratch", "flex_attention")
    ids = torch.randint(5, 8000, (1, 1024))

    def visited(mask) -> torch.Tensor:  # key blocks computed per query block
        return (mask.kv_num_blocks + mask.full_kv_num_blocks)[0, 0]

    with torch._dynamo.config.patch(disable=True):  # the same BlockMasks, built without compiling for a new shape
        causal, _ = causal_plan(model, ids, None, True)
        bidirectional, _ = causal_plan(model, ids, None, False)
    assert visited(causal["sliding_attention"]).max() == 2 and visited(bidirectional["sliding_attention"]).max() == 3
    assert visited(causal["full_attention"]).tolist() == list(range(1, 9))
    assert visited(bidirectional["full_attention"]).tolist() == [8] * 8


def test_flash_attention_2_gets_causality_and_keeps_the_window():
    """No flash-attn here: what the causal plan hands flash (module flags) is checked through transformers' own
    translation into flash-attn arguments. Local layers: causal and window (w/2, w/2), i.e. keys [q - w/2, q];
    global layers: causal, no window. bench/bench_gpu.py checks the outputs themselves on a GPU."""
    from transformers.modeling_flash_attention_utils import _process_flash_attention_kwargs

    torch.manual_seed(0)
    model = build_from_scratch(SCRATCH, bundled_tokenizer(), attn_implementation="sdpa")
    model.config._attn_implementation = "flash_attention_2"  # the plan reads only this
    ids = torch.randint(5, 8000, (2, 320))
    half = model.config.local_attention // 2
    layers = list(model.model.layers)
    with causal_attention(model, ids, None, True) as mask:
        assert mask is None
        got = {
            layer.attention_type: _process_flash_attention_kwargs(
                320,
                320,
                is_causal=layer.attn.is_causal,
                sliding_window=layer.attn.sliding_window,
                supports_mapping=defaultdict(lambda: True),
            )
            for layer in layers
        }
    assert got["sliding_attention"]["causal"] and got["sliding_attention"]["window_size"] == (half, half)
    assert got["full_attention"]["causal"] and "window_size" not in got["full_attention"]
    assert not any(layer.attn.is_causal for layer in layers)  # restored for the bidirectional phase

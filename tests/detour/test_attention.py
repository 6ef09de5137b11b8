"""The causal switch: no future leak, window kept, bidirectional restored."""

from __future__ import annotations

import pytest
import torch

from backend.core.errors import ConfigError
from backend.detour.attention import causal_attention
from backend.engine.models import load_masked_lm
from conftest import TINY_BERT, TINY_MODERNBERT, save_tiny_model

SEQ = 64  # 4x the tiny ModernBERT's local window (16)


def _encoder(m):
    return m.model if hasattr(m, "model") else m.bert


def _pair_differing_after(pos: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(5, 8000, (2, SEQ), generator=g)
    b = a.clone()
    b[:, pos:] = torch.randint(5, 8000, (2, SEQ - pos), generator=g)
    return a, b


@pytest.fixture(
    scope="module", params=[("modernbert", "sdpa"), ("modernbert", "eager"), ("bert", "sdpa"), ("bert", "eager")]
)
def model(request, tmp_path_factory):
    family, impl = request.param
    arch = TINY_MODERNBERT if family == "modernbert" else TINY_BERT
    d = save_tiny_model(tmp_path_factory.mktemp(f"{family}_{impl}"), arch, attn_implementation=impl)
    return load_masked_lm(str(d), attn_implementation=impl).eval()


def _encode(model, ids, pad, causal):
    with causal_attention(model, ids, pad, causal) as mask:
        return _encoder(model)(ids, attention_mask=mask).last_hidden_state


@pytest.mark.parametrize("padding", ["no padding mask", "all-ones padding mask"])
@torch.no_grad()
def test_future_tokens_do_not_change_past_outputs_under_causal_mask(model, padding):
    """Both routes: training passes no padding mask (sdpa global layers then use is_causal), others pass one."""
    pos = 40
    a, b = _pair_differing_after(pos)
    pad = None if padding == "no padding mask" else torch.ones_like(a)
    ha, hb = _encode(model, a, pad, True), _encode(model, b, pad, True)
    assert torch.equal(ha[:, :pos], hb[:, :pos])
    assert not torch.allclose(ha[:, pos:], hb[:, pos:])  # and the changed tokens do matter
    # the flags set for the causal pass do not outlive it
    assert not any(getattr(m, "is_causal", False) for m in model.modules() if hasattr(m, "Wqkv"))


@torch.no_grad()
def test_causal_routes_agree(model):
    """No-mask + is_causal (sdpa's causal kernel) gives the same outputs as the explicit causal masks."""
    a, _ = _pair_differing_after(40)
    torch.testing.assert_close(_encode(model, a, None, True), _encode(model, a, torch.ones_like(a), True))


@torch.no_grad()
def test_bidirectional_attention_restored(model):
    """Phase 2 passes the plain padding mask: earlier positions see later tokens again."""
    pos = 40
    a, b = _pair_differing_after(pos)
    pad = torch.ones_like(a)
    ha, hb = _encode(model, a, pad, False), _encode(model, b, pad, False)
    assert (ha[:, pos - 1] - hb[:, pos - 1]).abs().max() > 1e-4


def _additive(allowed: torch.Tensor) -> torch.Tensor:
    m = torch.zeros(allowed.shape, dtype=torch.float32)
    return m.masked_fill(~allowed, torch.finfo(torch.float32).min)[None, None].expand(2, 1, SEQ, SEQ)


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
@torch.no_grad()
def test_modernbert_sliding_layers_stay_windowed_and_causal(impl, tmp_path):
    d = save_tiny_model(tmp_path, TINY_MODERNBERT, attn_implementation=impl)
    model = load_masked_lm(str(d), attn_implementation=impl).eval()
    half = model.config.local_attention // 2
    q = torch.arange(SEQ)[:, None]
    k = torch.arange(SEQ)[None, :]
    causal = k <= q
    banded = causal & (q - k <= half)
    explicit = {"full_attention": _additive(causal), "sliding_attention": _additive(banded)}
    ids, _ = _pair_differing_after(10)
    ours = _encode(model, ids, torch.ones_like(ids), True)
    ref = model.model(ids, attention_mask=explicit).last_hidden_state
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    # The trap: one 4D causal mask for every layer drops the window, and it shows.
    single = model.model(ids, attention_mask=_additive(causal)).last_hidden_state
    assert (single - ref).abs().max() > 1e-4


def test_unsupported_architecture_is_refused():
    from transformers import GPT2Config

    from backend.detour.attention import check_causal_supported

    with pytest.raises(ConfigError, match="causal"):
        check_causal_supported(GPT2Config())


@pytest.mark.parametrize("window", [16, 64, 128])
@pytest.mark.parametrize(("b", "t"), [(2, 64), (3, 257), (1, 16)])
def test_sdpa_local_causal_mask_is_the_library_mask_element_for_element(tmp_path_factory, window, b, t):
    """The CLM step's banded causal mask comes from one broadcast comparison, kept per shape (the library's builder
    took a fifth of a small step); it must be the mask ``masking_utils`` builds, not merely a similar one."""
    from backend.detour.attention import _modernbert_masks, causal_plan

    arch = {**TINY_MODERNBERT, "local_attention": window}
    m = load_masked_lm(str(save_tiny_model(tmp_path_factory.mktemp(f"w{window}"), arch)), attn_implementation="sdpa")
    ids = torch.randint(5, 8000, (b, t))
    fast, modules = causal_plan(m, ids, None, True)
    library = _modernbert_masks(m, ids, None, torch.float32)
    assert fast["full_attention"] is None and len(modules) > 0  # global layers: sdpa's is_causal kernel
    assert fast["sliding_attention"].shape == library["sliding_attention"].shape
    assert torch.equal(fast["sliding_attention"], library["sliding_attention"])
    assert causal_plan(m, ids, None, True)[0]["sliding_attention"] is fast["sliding_attention"]  # built once per shape


@pytest.mark.parametrize("causal", [True, False])
def test_cpu_bf16_training_attention_is_the_matmul_route_and_agrees_with_sdpa(tmp_path, monkeypatch, causal):
    """Training ModernBERT under CPU bf16 autocast swaps sdpa for the bf16 matmul attention on every layer (window,
    causality and no future leak kept; outputs within bf16 rounding of sdpa's); the model's config stays sdpa."""
    from backend.detour import attention

    d = save_tiny_model(tmp_path, TINY_MODERNBERT, attn_implementation="sdpa")
    model = load_masked_lm(str(d), attn_implementation="sdpa").train()
    calls = []
    real = attention.cpu_bf16_matmul_attention
    monkeypatch.setattr(attention, "cpu_bf16_matmul_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    a, b = _pair_differing_after(40)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ha, hb = _encode(model, a, None, causal), _encode(model, b, None, causal)
        n_layers = model.config.num_hidden_layers
        assert len(calls) == 2 * n_layers
        with torch.no_grad():  # evaluation keeps sdpa
            ref = _encode(model, a, None, causal)
        assert len(calls) == 2 * n_layers
    assert model.config._attn_implementation == "sdpa"
    assert all(m.attn.config is model.config for m in model.model.layers)
    assert (ha.float() - ref.float()).abs().max() < 0.1 * ref.float().abs().max()
    if causal:
        assert torch.equal(ha[:, :40], hb[:, :40])
    else:
        assert not torch.equal(ha[:, :39], hb[:, :39])


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("t", [64, 75])  # 8 reaches of the tiny model's window, and one not a whole number of blocks
def test_cpu_banded_local_attention_is_sdpa_with_the_band_mask(tmp_path_factory, causal, t):
    """On a CPU, long packed rows give the local layers ``banded_attention`` (each block of queries against the keys
    it can see) instead of sdpa over T x T with a band mask: the same outputs and gradients (float64, where only the
    summation order differs), the window and causality kept, and only there (padding, short rows: sdpa's masks)."""
    from backend.detour import attention

    d = save_tiny_model(tmp_path_factory.mktemp("banded"), TINY_MODERNBERT, attn_implementation="sdpa")
    model = load_masked_lm(str(d), attn_implementation="sdpa").double().train()
    ids = torch.randint(5, 8000, (2, t), generator=torch.Generator().manual_seed(1))
    reach = model.config.local_attention // 2
    assert attention._banded_here(model, ids, None, causal)
    assert not attention._banded_here(model, ids, torch.ones_like(ids), causal)  # padding: the model's masks
    assert not attention._banded_here(model, ids[:, : 8 * reach - 1], None, causal)  # too short to gain
    assert not attention._banded_here(model, ids, None, torch.full((2,), 9))  # per-row prefixes: dense masks

    calls = []
    real = attention.banded_attention
    counted = lambda *a, **k: calls.append(a[3]) or real(*a, **k)  # noqa: E731
    outs, grads = [], []
    for banded in (True, False):
        model.zero_grad()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(attention, "banded_attention", counted)
            mp.setattr(attention, "_banded_here", attention._banded_here if banded else lambda *a: False)
            h = _encode(model, ids, None, causal)
        h.square().mean().backward()
        outs.append(h.detach())
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    local = sum(1 for m in model.model.layers if m.attention_type == "sliding_attention")
    assert calls == [reach] * local  # the local layers only, once each, with the model's reach
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-10, atol=1e-12)
    assert model.config._attn_implementation == "sdpa"
    assert all(m.attn.config is model.config for m in model.model.layers)  # the swap does not outlive the pass


@pytest.mark.parametrize("causal", [True, False])
def test_banded_attention_matches_the_band_mask_and_leaks_nothing(causal):
    """``banded_attention`` alone, against sdpa with the band mask written out: equal in float64 at several reaches,
    lengths and block remainders; a key outside a query's band (or after it, causal) changes nothing."""
    from backend.detour.attention import banded_attention

    g = torch.Generator().manual_seed(0)
    for reach, t in ((4, 37), (8, 64), (16, 200)):
        q, k, v = (torch.randn(2, 3, t, 8, dtype=torch.float64, generator=g) for _ in range(3))
        i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
        band = ((i - j).abs() <= reach) & ((j <= i) if causal else True)
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=band)
        out = banded_attention(q, k, v, reach, causal)
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
        far = t // 2 + reach + 1  # a key just outside the band of query t // 2 (and after it)
        k2, v2 = k.clone(), v.clone()
        k2[:, :, far], v2[:, :, far] = 7.0, -7.0
        out2 = banded_attention(q, k2, v2, reach, causal)
        assert torch.equal(out2[:, :, t // 2], out[:, :, t // 2])
        assert not torch.equal(out2[:, :, far], out[:, :, far])  # while the changed key does matter where visible

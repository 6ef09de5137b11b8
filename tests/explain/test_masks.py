"""The masks view shows what the trainer's forward really applies: causal zeros above the diagonal, the model's
window on local layers, and a measured pattern that agrees with the drawn one (and exposes a leak when there is one)."""

from __future__ import annotations

import contextlib

import pytest
import torch

from backend.engine.models import load_masked_lm
from backend.explain import masks
from backend.explain.masks import MaskViewError, attention_patterns, measured_patterns, patterns_of
from conftest import TINY_BERT, save_tiny_model

SEQ = 64  # 4x the tiny ModernBERT's window (16: keys |q - k| <= 8)


def _expected(seq: int, reach: int | None, causal: bool) -> torch.Tensor:
    q, k = torch.arange(seq)[:, None], torch.arange(seq)[None, :]
    allowed = torch.ones(seq, seq, dtype=torch.bool)
    if reach is not None:
        allowed &= (q - k).abs() <= reach
    if causal:
        allowed &= k <= q
    return allowed


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_modernbert_patterns_per_layer_kind(tiny_modernbert_dir, impl):
    res = patterns_of(load_masked_lm(str(tiny_modernbert_dir), attn_implementation=impl).eval(), SEQ)
    assert res["attn_implementation"] == impl
    glob, local = res["kinds"]
    assert (glob["name"], glob["layers"], glob["window"]) == ("global", [0, 2], None)
    assert (local["name"], local["layers"], local["window"], local["reach"]) == ("local", [1, 3], 16, 8)
    for kind, reach in ((glob, None), (local, 8)):
        for objective, causal in (("mlm", False), ("clm", True)):
            got = torch.tensor(kind[objective], dtype=torch.bool)
            assert torch.equal(got, _expected(SEQ, reach, causal)), (kind["name"], objective)
            assert kind[f"{objective}_measured"]["agrees"] and kind[f"{objective}_measured"]["mismatches"] == 0
        assert not torch.tensor(kind["clm"]).triu(1).any()  # zeros above the diagonal
    assert local["clm_summary"] == {"keys_min": 1, "keys_max": 9, "sees_future": False}
    assert local["mlm_summary"] == {"keys_min": 9, "keys_max": 17, "sees_future": True}
    assert glob["clm_summary"]["keys_max"] == SEQ and glob["mlm_summary"]["keys_min"] == SEQ


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_every_objective_is_drawn_with_the_attention_it_trains_with(tiny_modernbert_dir, impl):
    """Each registered objective's row (``Objective.picture``): bidirectional, causal, or bidirectional over a prefix
    and causal after it, the local window kept, and the measurement agrees with what is drawn."""
    from backend import objectives

    res = patterns_of(load_masked_lm(str(tiny_modernbert_dir), attn_implementation=impl).eval(), SEQ)
    assert [o["name"] for o in res["objectives"]] == list(objectives.names())
    q, k = torch.arange(SEQ)[:, None], torch.arange(SEQ)[None, :]
    for o in objectives.all_objectives():
        pic = o.picture(SEQ)
        for kind, reach in zip(res["kinds"], (None, 8), strict=True):
            if isinstance(pic, torch.Tensor):  # a prefix: every key before it, then causal
                want = (k <= q) | (k < int(pic[0]))
                if reach is not None:
                    want &= (q - k).abs() <= reach
            else:
                want = _expected(SEQ, reach, pic)
            assert torch.equal(torch.tensor(kind[o.name], dtype=torch.bool), want), (o.name, kind["name"])
            assert kind[f"{o.name}_measured"]["agrees"], (o.name, kind["name"])
    glob = res["kinds"][0]
    assert glob["prefix_summary"]["sees_future"] and glob["prefix_summary"]["keys_min"] == SEQ // 2


def test_every_key_measured_matches_the_window_edges(tiny_modernbert_dir):
    """All 64 keys pushed, not a sample: the causal local layer sees exactly 0 <= q - k <= 8."""
    model = load_masked_lm(str(tiny_modernbert_dir)).eval()
    ids = torch.randint(0, 8000, (1, SEQ), generator=torch.Generator().manual_seed(1))
    got = measured_patterns(model, ids, True, [1, 2], list(range(SEQ)))
    assert torch.equal(got[1], _expected(SEQ, 8, True))
    assert torch.equal(got[2], _expected(SEQ, None, True))
    bidirectional = measured_patterns(model, ids, False, [1], list(range(SEQ)))[1]
    assert torch.equal(bidirectional, _expected(SEQ, 8, False))  # the measurement tells the two apart


def test_bert_family_has_one_kind(tmp_path):
    model = load_masked_lm(str(save_tiny_model(tmp_path / "bert", TINY_BERT))).eval()
    res = patterns_of(model, 24)
    (kind,) = res["kinds"]
    assert kind["name"] == "global" and kind["layers"] == [0, 1, 2] and kind["window"] is None
    assert torch.equal(torch.tensor(kind["clm"], dtype=torch.bool), _expected(24, None, True))
    assert torch.equal(torch.tensor(kind["mlm"], dtype=torch.bool), _expected(24, None, False))
    assert kind["clm_measured"]["agrees"] and kind["mlm_measured"]["agrees"]


def test_the_view_exposes_the_is_causal_alone_trap(tiny_modernbert_dir, monkeypatch):
    """The README's trap: setting ``is_causal`` on every layer while passing the plain padding mask. Under sdpa the
    global layers turn causal, but the local layers get the model's own windowed mask and read the future."""

    @contextlib.contextmanager
    def flag_only(model, ids, pad_mask, causal, dtype=None):
        mods = [m for m in model.modules() if hasattr(m, "is_causal")] if causal is True else []
        for m in mods:
            m.is_causal = True
        try:
            yield pad_mask
        finally:
            for m in mods:
                m.is_causal = False

    monkeypatch.setattr(masks, "causal_attention", flag_only)
    res = patterns_of(load_masked_lm(str(tiny_modernbert_dir)).eval(), SEQ)
    glob, local = res["kinds"]
    assert not glob["clm_summary"]["sees_future"]
    assert local["clm_summary"]["sees_future"] and local["clm_measured"]["agrees"]  # drawn and measured: a leak


def test_sequence_length_is_checked(tiny_modernbert_dir):
    with pytest.raises(MaskViewError, match=r"sequence length 4096; allowed 2-256"):
        attention_patterns(str(tiny_modernbert_dir), 4096)
    with pytest.raises(MaskViewError, match="not a whole number"):
        attention_patterns(str(tiny_modernbert_dir), "many")
    res = attention_patterns(str(tiny_modernbert_dir), 12, measure=False)
    assert res["seq_len"] == 12 and "clm_measured" not in res["kinds"][0]

"""Prefix LM: bidirectional inside the prefix, causal after it (nothing after a position changes it), under sdpa and
eager; the prefix is read, the rest predicted; flex and flash are refused with a clear error."""

from __future__ import annotations

import pytest
import torch
from objective_probe import hidden, tiny_lm

from backend import objectives
from backend.core.errors import ConfigError
from backend.objectives.prefix import prefix_length
from conftest import bundled_tokenizer

PREFIX = objectives.get("prefix")


def test_labels_start_at_the_prefix_end():
    tok = bundled_tokenizer()
    ids = torch.randint(10, len(tok), (2, 40), generator=torch.Generator().manual_seed(0))
    starts = torch.zeros_like(ids, dtype=torch.bool)
    b = PREFIX.batch(ids, starts, {"prefix_share": 0.25}, objectives.masking_of(tok), torch.Generator())
    n = prefix_length(40, 0.25)
    assert n == 10 and b.attention.tolist() == [n, n] and torch.equal(b.inputs, ids)
    assert (b.labels[:, : n - 1] == objectives.IGNORE).all()
    assert torch.equal(b.labels[:, n - 1 : -1], ids[:, n:])  # from the prefix's last position on: the next token


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_bidirectional_in_the_prefix_causal_after_it(impl):
    lm = tiny_lm(impl)
    t, n = 40, 20
    ids = torch.randint(10, 500, (1, t), generator=torch.Generator().manual_seed(2))
    prefix = torch.tensor([n])
    base = hidden(lm, ids, prefix)
    for p in (n, n + 7, t - 1):  # a token after the prefix changes no position before it
        changed = ids.clone()
        changed[0, p] += 1
        out = hidden(lm, changed, prefix)
        assert torch.equal(out[0, :p], base[0, :p]) and not torch.equal(out[0, p:], base[0, p:])
    changed = ids.clone()
    changed[0, n - 1] += 1  # the prefix's last token is read by its first one
    assert not torch.allclose(hidden(lm, changed, prefix)[0, 0], base[0, 0])
    # the two ends of the range are the two attentions
    assert torch.allclose(hidden(lm, ids, torch.tensor([0])), hidden(lm, ids, True), atol=1e-5)
    assert torch.allclose(hidden(lm, ids, torch.tensor([t])), hidden(lm, ids, False), atol=1e-5)


def test_flex_is_refused_for_a_prefix_mask():
    lm = tiny_lm()
    lm.hf_model.config._attn_implementation = "flex_attention"
    with pytest.raises(ConfigError, match="sdpa or eager"):
        hidden(lm, torch.randint(10, 500, (1, 16)), torch.tensor([8]))

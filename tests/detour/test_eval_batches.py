"""The held-out evaluation fills a short last batch up to the training batch (a compiled encoder then meets no new
shape) without changing a number: the filler rows are labelled nowhere."""

from __future__ import annotations

import pytest
import torch

from backend import objectives
from backend.detour.encoder_lm import EncoderLM
from backend.detour.trainer import _full_batch
from conftest import TINY_MODERNBERT, bundled_tokenizer


@pytest.mark.parametrize("objective", objectives.names())
def test_a_filled_batch_gives_the_numbers_of_its_rows(objective):
    from backend.engine.models import build_from_scratch

    tok = bundled_tokenizer()
    torch.manual_seed(0)
    lm = EncoderLM(build_from_scratch(TINY_MODERNBERT, tok)).eval()
    ids = torch.randint(10, len(tok), (3, 48))
    spec = objectives.get(objective)
    g = torch.Generator().manual_seed(1)
    b = spec.batch(ids, torch.zeros_like(ids, dtype=torch.bool), spec.held_out, objectives.masking_of(tok), g)
    full_inputs, full_labels, full_attention = _full_batch(b, 5)
    assert full_inputs.shape == full_labels.shape == (5, 48)
    assert torch.equal(full_inputs[:3], b.inputs) and torch.equal(full_labels[:3], b.labels)
    with torch.no_grad():
        want = lm(b.inputs, b.labels, causal=b.attention)
        got = lm(full_inputs, full_labels, causal=full_attention)
    assert got[2] == want[2] > 0  # the same labelled positions
    if spec.accuracy:
        assert int(got[1]) == int(want[1])  # the same hits
    assert float(got[0]) == pytest.approx(float(want[0]), rel=1e-5)
    same_inputs, same_labels, _ = _full_batch(b, 3)  # a full batch is left as it is
    assert same_inputs is b.inputs and same_labels is b.labels

"""The held-out evaluation fills a short last batch up to the training batch (a compiled encoder then meets no new
shape) without changing a number: the filler rows are labelled nowhere."""

from __future__ import annotations

import pytest
import torch

from backend.detour.encoder_lm import EncoderLM
from backend.detour.objectives import clm_labels, mlm_mask, replacement_vocab, special_ids
from backend.detour.trainer import _full_batch
from conftest import TINY_MODERNBERT, bundled_tokenizer


@pytest.mark.parametrize("objective", ["mlm", "clm"])
def test_a_filled_batch_gives_the_numbers_of_its_rows(objective):
    from backend.engine.models import build_from_scratch

    tok = bundled_tokenizer()
    torch.manual_seed(0)
    lm = EncoderLM(build_from_scratch(TINY_MODERNBERT, tok)).eval()
    ids = torch.randint(10, len(tok), (3, 48))
    if objective == "mlm":
        g = torch.Generator().manual_seed(0)
        inputs, labels = mlm_mask(ids, 0.15, special_ids(tok), tok.mask_token_id, replacement_vocab(tok), g)
    else:
        inputs, labels = ids, clm_labels(ids, torch.zeros_like(ids, dtype=torch.bool))
    full_inputs, full_labels = _full_batch(inputs, labels, 5)
    assert full_inputs.shape == full_labels.shape == (5, 48)
    assert torch.equal(full_inputs[:3], inputs) and torch.equal(full_labels[:3], labels)
    with torch.no_grad():
        want = lm(inputs, labels, causal=objective == "clm")
        got = lm(full_inputs, full_labels, causal=objective == "clm")
    assert got[2] == want[2] > 0 and int(got[1]) == int(want[1])  # the same labelled positions, the same hits
    assert float(got[0]) == pytest.approx(float(want[0]), rel=1e-5)
    same_inputs, same_labels = _full_batch(inputs, labels, 3)  # a full batch is left as it is
    assert same_inputs is inputs and same_labels is labels

"""Mixed batches (GPT-BERT): a share of the rows causal next-token, the rest masked, in one forward; the loss is the
mean over every labelled position of both kinds."""

from __future__ import annotations

import pytest
import torch
from objective_probe import tiny_lm

from backend import objectives
from backend.objectives.masking import mlm_mask
from backend.objectives.mixed import causal_rows
from conftest import bundled_tokenizer

MIXED = objectives.get("mixed")


def _batch(share: float, rows: int = 8, seed: int = 3):
    tok = bundled_tokenizer()
    m = objectives.masking_of(tok)
    ids = torch.randint(10, len(tok), (rows, 40), generator=torch.Generator().manual_seed(0))
    starts = torch.zeros_like(ids, dtype=torch.bool)
    b = MIXED.batch(ids, starts, {"causal_share": share, "mlm_probability": 0.3}, m,
                    torch.Generator().manual_seed(seed))  # fmt: skip
    return ids, starts, b, m


def test_the_first_share_of_rows_is_causal_the_rest_masked():
    ids, starts, b, m = _batch(0.25)
    t = ids.shape[1]
    assert b.attention.tolist() == [0, 0] + [t] * 6  # 2 of 8 rows causal: prefix 0; the rest see the whole row
    assert torch.equal(b.inputs[:2], ids[:2])
    assert torch.equal(b.labels[:2], objectives.next_token_labels(ids[:2], starts[:2]))
    g = torch.Generator().manual_seed(3)
    causal_rows(8, 0.25, g)  # the same draws as the objective: the row count first, then BERT masking
    inputs, labels = mlm_mask(ids, 0.3, m.special, m.mask_id, m.vocab, g)
    assert torch.equal(b.inputs[2:], inputs[2:]) and torch.equal(b.labels[2:], labels[2:])


def test_a_fractional_share_is_kept_on_average():
    counts = [causal_rows(4, 1 / 16, torch.Generator().manual_seed(s)) for s in range(400)]
    assert set(counts) == {0, 1} and sum(counts) / 400 == pytest.approx(0.25, abs=0.06)
    assert causal_rows(4, 0.0, torch.Generator()) == 0 and causal_rows(4, 1.0, torch.Generator()) == 4


def test_the_loss_weights_every_labelled_position_alike():
    ids, _, b, _ = _batch(0.25)
    lm = tiny_lm().eval()
    with torch.no_grad():
        loss, _, n = lm(b.inputs, b.labels, causal=b.attention)
        lc, _, nc = lm(b.inputs[:2], b.labels[:2], causal=True)  # the causal rows alone
        lb, _, nb = lm(b.inputs[2:], b.labels[2:], causal=False)  # the masked rows alone
    assert n == nc + nb and nc > nb / 6 > 0
    assert float(loss) == pytest.approx((float(lc) * nc + float(lb) * nb) / (nc + nb), rel=1e-5)

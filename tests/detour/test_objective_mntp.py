"""MNTP (LLM2Vec): bidirectional attention over a masked row; the masked token at ``t`` is the label of ``t - 1``."""

from __future__ import annotations

import torch
from objective_probe import hidden, tiny_lm

from backend import objectives
from backend.objectives.masking import mlm_mask
from conftest import bundled_tokenizer

MNTP = objectives.get("mntp")


def test_masked_tokens_are_predicted_from_the_position_before():
    tok = bundled_tokenizer()
    m = objectives.masking_of(tok)
    ids = torch.randint(10, len(tok), (4, 48), generator=torch.Generator().manual_seed(0))
    starts = torch.zeros_like(ids, dtype=torch.bool)
    starts[:, 0] = starts[:, 30] = True  # a second document opens at 30
    b = MNTP.batch(ids, starts, {"mlm_probability": 0.3}, m, torch.Generator().manual_seed(5))
    inputs, mlm_labels = mlm_mask(ids, 0.3, m.special, m.mask_id, m.vocab, torch.Generator().manual_seed(5))
    assert torch.equal(b.inputs, inputs)  # the same masking as MLM at the same rate and seed
    assert b.attention is False
    masked = mlm_labels != objectives.IGNORE
    for r, t in masked.nonzero().tolist():
        want = objectives.IGNORE if t in (0, 30) else ids[r, t].item()
        if t:
            assert b.labels[r, t - 1].item() == want  # position t - 1 predicts the masked token at t
    assert (b.labels[:, -1] == objectives.IGNORE).all()
    labelled = b.labels != objectives.IGNORE
    assert labelled.sum() == masked[:, 1:].sum() - masked[:, 30].sum()
    assert torch.equal(labelled[:, :-1], masked[:, 1:] & ~starts[:, 1:])


def test_mntp_attention_is_bidirectional():
    lm = tiny_lm()
    ids = torch.randint(10, 500, (1, 40), generator=torch.Generator().manual_seed(1))
    changed = ids.clone()
    changed[0, 39] = ids[0, 39] + 1
    a, b = hidden(lm, ids, False), hidden(lm, changed, False)
    assert not torch.equal(a[0, 0], b[0, 0])  # the first position reads the last one

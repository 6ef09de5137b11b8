"""Hooks (one tensor per layer index for ModernBERT and BERT), pooling, padding / special-token invariance."""

from __future__ import annotations

import shutil

import pytest
import torch

from backend.analysis.cka import StreamingSimilarity, linear_cka
from backend.analysis.hidden_states import (
    LayerCapture,
    check_same_tokenization,
    encode_texts,
    encoder_base,
    feature_mask,
    iter_layer_features,
    layer_hidden_states,
    layer_names,
    max_positions,
    pool,
)
from backend.core.errors import DataError
from backend.engine.models import load_encoder, load_masked_lm, load_tokenizer

TEXTS = [
    "The patient was admitted with fever.",
    "Aspirin",
    "A biopsy of the renal lesion showed a benign tumour, and the cardiac trial cohort was dosed twice daily.",
    "Therapy resumed.",
    "Dose escalation in the second cohort was stopped after a renal adverse event in two patients.",
]


@pytest.fixture(scope="module")
def models(tiny_modernbert_dir, tiny_bert_dir):
    out = {}
    for name, d in (("modernbert", tiny_modernbert_dir), ("bert", tiny_bert_dir)):
        out[name] = (load_encoder(str(d)).eval(), load_masked_lm(str(d)).eval(), load_tokenizer(str(d)))
    return out


@pytest.mark.parametrize("family,blocks", [("modernbert", 4), ("bert", 3)])
def test_hooks_one_tensor_per_block_plus_embeddings(models, family, blocks):
    enc_model, mlm_model, tok = models[family]
    enc = encode_texts(tok, TEXTS[:3], 64)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    for model in (enc_model, mlm_model):  # bare encoder and MLM wrapper (.model / .bert) alike
        hs = layer_hidden_states(model, ids, mask)
        assert len(hs) == blocks + 1 == len(layer_names(model))
        assert all(isinstance(h, torch.Tensor) and h.shape == (3, ids.shape[1], 64) for h in hs)
    assert layer_names(enc_model) == ["embeddings"] + [f"block_{i}" for i in range(blocks)]
    base = encoder_base(mlm_model)
    hs = layer_hidden_states(mlm_model, ids, mask)
    with torch.inference_mode():
        emb = base.embeddings(input_ids=ids)
        last = base(input_ids=ids, attention_mask=mask).last_hidden_state
        normed = base.final_norm(hs[-1]) if family == "modernbert" else None
    assert torch.equal(hs[0], emb)  # index 0 = embedding output
    if family == "modernbert":  # last index = last block, before the final norm
        assert torch.allclose(normed, last, atol=1e-6)
    else:
        assert torch.allclose(hs[-1], last, atol=1e-6)
    with LayerCapture(enc_model) as cap:
        assert len(cap._handles) == blocks + 1
    assert not cap._handles  # hooks removed on exit


def test_pooling_ignores_padding_and_special_positions_exactly():
    g = torch.Generator().manual_seed(0)
    b, t, d = 4, 9, 6
    lengths = [9, 5, 7, 3]
    attn = torch.tensor([[1] * n + [0] * (t - n) for n in lengths])
    special = torch.zeros(b, t, dtype=torch.long)
    for i, n in enumerate(lengths):
        special[i, 0] = special[i, n - 1] = 1  # [CLS] ... [SEP]
    enc = {"attention_mask": attn, "special_tokens_mask": special}
    h = torch.randn(b, t, d, generator=g)
    h2 = h.clone()
    tok_mask = feature_mask(enc, "token")
    h2[~tok_mask] = 1e6 * torch.randn(int((~tok_mask).sum()), d, generator=g)  # garbage at pad and specials
    rows, rows2 = pool(h, tok_mask, "token"), pool(h2, tok_mask, "token")
    assert rows.shape == (sum(n - 2 for n in lengths), d)
    assert torch.equal(rows, rows2)
    y = torch.randn(rows.shape[0], 3, generator=g)
    assert linear_cka(rows, y) == linear_cka(rows2, y)
    mean = pool(h, feature_mask(enc, "mean"), "mean")
    assert mean.dtype == torch.float64 and mean.shape == (b, d)
    for i, n in enumerate(lengths):
        assert torch.allclose(mean[i], h[i, :n].double().mean(0))
    with pytest.raises(DataError):
        feature_mask(enc, "max")


def _rows(model, tok, texts, pooling, batch_size, max_len=64):
    feats = list(iter_layer_features(model, tok, texts, pooling=pooling, max_len=max_len, batch_size=batch_size))
    return [torch.cat([f[k] for f in feats]) for k in range(len(feats[0]))]


@pytest.mark.parametrize("family", ["modernbert", "bert"])
def test_token_cka_unchanged_by_padding_and_specials(models, family):
    model, _, tok = models[family]
    other = models["modernbert" if family == "bert" else "bert"][0]
    alone = _rows(model, tok, TEXTS, "token", batch_size=1)  # no padding at all
    padded = _rows(model, tok, TEXTS, "token", batch_size=5)  # heavy padding
    n_tokens = sum(len(tok(t)["input_ids"]) - 2 for t in TEXTS)
    assert all(r.shape == (n_tokens, 64) for r in alone + padded)
    for a, p in zip(alone, padded):
        assert torch.allclose(a, p, atol=1e-5)
    ref = _rows(other, tok, TEXTS, "token", batch_size=2)
    acc_alone, acc_padded = StreamingSimilarity(), StreamingSimilarity()
    acc_alone.update(alone, ref)
    acc_padded.update(padded, ref)
    assert torch.allclose(acc_alone.matrix(), acc_padded.matrix(), atol=1e-6)
    mean_alone = _rows(model, tok, TEXTS, "mean", batch_size=1)
    mean_padded = _rows(model, tok, TEXTS, "mean", batch_size=5)
    assert all(torch.allclose(a, p, atol=1e-5) for a, p in zip(mean_alone, mean_padded))
    assert mean_alone[0].shape == (len(TEXTS), 64)


def test_truncation_and_position_limit(models):
    model, _, tok = models["bert"]
    enc = encode_texts(tok, TEXTS, 8)
    assert enc["input_ids"].shape[1] == 8
    assert max_positions(model) == 256
    rows = _rows(model, tok, TEXTS, "token", batch_size=2, max_len=8)
    assert rows[0].shape[0] == sum(min(len(tok(t)["input_ids"]), 8) - 2 for t in TEXTS)


def test_bf16_model_rows(tiny_modernbert_dir):
    model = load_encoder(str(tiny_modernbert_dir), dtype=torch.bfloat16).eval()
    tok = load_tokenizer(str(tiny_modernbert_dir))
    tok_rows = next(iter_layer_features(model, tok, TEXTS[:2], pooling="token", max_len=32, batch_size=2))
    mean_rows = next(iter_layer_features(model, tok, TEXTS[:2], pooling="mean", max_len=32, batch_size=2))
    assert tok_rows[1].dtype == torch.bfloat16 and mean_rows[1].dtype == torch.float64
    acc = StreamingSimilarity()
    acc.update(tok_rows, tok_rows)
    assert torch.allclose(acc.diagonal(), torch.ones(5, dtype=torch.float64), atol=1e-10)


def _word_level_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = sorted({w.strip(".,").lower() for t in TEXTS for w in t.split()})
    vocab = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[UNK]": 3, "[MASK]": 4}
    vocab.update({w: i + 5 for i, w in enumerate(words)})
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 1), ("[SEP]", 2)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]", unk_token="[UNK]",
        mask_token="[MASK]",
    )  # fmt: skip


def test_token_pooling_requires_identical_tokenizers(models, tiny_modernbert_dir, tmp_path):
    from backend.analysis.api import cka_between

    _, _, tok = models["modernbert"]
    check_same_tokenization(tok, load_tokenizer(str(tiny_modernbert_dir)), TEXTS, 64)  # same: fine
    other = _word_level_tokenizer()
    with pytest.raises(DataError, match="identical tokenizers.*pooling 'mean'"):
        check_same_tokenization(tok, other, TEXTS, 64)
    odd = tmp_path / "odd_tokenizer_model"
    shutil.copytree(tiny_modernbert_dir, odd)
    for f in odd.glob("tokenizer*"):
        f.unlink()
    other.save_pretrained(odd)
    with pytest.raises(DataError, match="identical tokenizers"):
        cka_between(str(tiny_modernbert_dir), str(odd), TEXTS, pooling="token", n_texts=None, max_len=32)
    res = cka_between(str(tiny_modernbert_dir), str(odd), TEXTS, pooling="mean", n_texts=None, max_len=32)
    assert res["inputs"]["n_rows"] == [len(TEXTS)] and len(res["divergence"]) == 5

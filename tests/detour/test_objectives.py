"""CLM label shifting, MLM masking statistics, and the vocabulary loss: plain, chunked and fused (liger-kernel)."""

from __future__ import annotations

import pytest
import torch

from backend.engine.data import pack
from backend.objectives import IGNORE, clm_labels, mlm_mask, replacement_vocab, special_ids
from conftest import TINY_BERT, TINY_MODERNBERT, bundled_tokenizer, save_tiny_model


def test_clm_labels_shift_by_one_and_stop_at_document_boundaries():
    cls, sep = 1, 2
    packed = pack([[10, 11, 12], [20, 21], [30, 31, 32, 33]], seq_len=8, cls_id=cls, sep_id=sep)
    ids, starts = packed.input_ids, packed.doc_start
    # stream: CLS | 10 11 12 SEP 20 21 SEP | (30 ... dropped tail)
    assert ids[0].tolist() == [cls, 10, 11, 12, sep, 20, 21, sep]
    labels = clm_labels(ids, starts)[0].tolist()
    # CLS->10 (10 starts doc 1), 10->11, 11->12, 12->SEP, SEP->20 (new doc: ignored), 20->21, 21->SEP, last: ignored
    assert labels == [IGNORE, 11, 12, sep, IGNORE, 21, sep, IGNORE]


def test_clm_labels_ignore_padding():
    ids = torch.tensor([[1, 10, 11, 12, 3, 3]])
    pad = torch.tensor([[1, 1, 1, 1, 0, 0]])
    labels = clm_labels(ids, torch.zeros_like(ids, dtype=torch.bool), pad)[0].tolist()
    assert labels == [10, 11, 12, IGNORE, IGNORE, IGNORE]


def test_mlm_masking_statistics_and_determinism():
    tok = bundled_tokenizer()
    specials = special_ids(tok)
    vocab = replacement_vocab(tok)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, len(tok), (64, 256), generator=g)
    ids[:, 0] = tok.cls_token_id
    ids[:, 100] = tok.sep_token_id
    p = 0.30
    masked, labels = mlm_mask(ids, p, specials, tok.mask_token_id, vocab, torch.Generator().manual_seed(1))
    sel = labels != IGNORE
    rate = sel.float().mean().item() * 256 / 254  # two special positions per row are never eligible
    assert abs(rate - p) < 0.01
    assert not sel[:, 0].any() and not sel[:, 100].any()  # specials never masked
    assert torch.equal(labels[sel], ids[sel])
    n = sel.sum().item()
    frac_mask = (masked[sel] == tok.mask_token_id).float().mean().item()
    frac_keep = (masked[sel] == ids[sel]).float().mean().item()
    assert abs(frac_mask - 0.8) < 0.02 and abs(frac_keep - 0.1) < 0.02 and n > 4000
    replaced = masked[sel & (masked != tok.mask_token_id) & (masked != ids)]
    assert not torch.isin(replaced, torch.tensor(specials)).any()  # random tokens are real vocabulary
    assert torch.equal(masked[~sel], ids[~sel])
    again, labels2 = mlm_mask(ids, p, specials, tok.mask_token_id, vocab, torch.Generator().manual_seed(1))
    assert torch.equal(again, masked) and torch.equal(labels2, labels)


def test_chunked_loss_equals_the_whole_loss_and_its_gradients(tiny_modernbert_dir, monkeypatch):
    """Large logit tensors are computed a chunk at a time (recomputed in backward): same loss, same gradients."""
    from backend.detour import encoder_lm
    from backend.engine.models import load_masked_lm

    torch.manual_seed(0)
    ids = torch.randint(5, 200, (3, 40))
    starts = torch.zeros_like(ids, dtype=torch.bool)
    labels = clm_labels(ids, starts)  # CLM: every token labelled, the case chunking is for

    def run(chunk_elements):
        monkeypatch.setattr(encoder_lm, "LOGITS_CHUNK_ELEMENTS", chunk_elements)
        model = load_masked_lm(str(tiny_modernbert_dir))
        lm = encoder_lm.EncoderLM(model)
        loss, correct, n = lm(ids, labels, causal=True)
        loss.backward()
        return loss.detach(), correct, n, {k: p.grad.clone() for k, p in model.named_parameters()}

    whole = run(1 << 40)
    chunked = run(17 * model_vocab(tiny_modernbert_dir))  # chunks of 17 positions: 7 chunks, the last one short
    assert whole[2] == chunked[2] == 3 * 39
    assert whole[1] is None and chunked[1] is None  # training counts nothing: the loop reads only the loss
    torch.testing.assert_close(chunked[0], whole[0], rtol=1e-6, atol=1e-6)
    for k, g in whole[3].items():
        torch.testing.assert_close(chunked[3][k], g, rtol=1e-4, atol=1e-7, msg=k)


def model_vocab(model_dir) -> int:
    import json

    return json.loads((model_dir / "config.json").read_text())["vocab_size"]


# --- the fused vocabulary loss (liger-kernel, GPU) ------------------------------------------------------------------


def _liger_contract(input, weight, target, bias=None, reduction="mean", ignore_index=IGNORE):
    """What liger's fused linear cross-entropy computes, written with torch: stands in where liger is not installed."""
    return torch.nn.functional.cross_entropy(
        torch.nn.functional.linear(input, weight, bias).float(), target, reduction=reduction, ignore_index=ignore_index
    )


def _loss_and_grads(model, ids, labels, causal):
    from backend.detour.encoder_lm import EncoderLM

    model.zero_grad(set_to_none=True)
    loss, correct, n = EncoderLM(model)(ids, labels, causal=causal)
    loss.backward()
    return loss.detach(), correct, n, {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


def _clm_batch(vocab: int = 200):
    ids = torch.randint(5, vocab, (3, 40), generator=torch.Generator().manual_seed(0))
    return ids, clm_labels(ids, torch.zeros_like(ids, dtype=torch.bool))


def test_fused_loss_is_used_only_on_its_devices_and_only_when_installed(monkeypatch):
    from backend.detour import encoder_lm

    monkeypatch.setattr(encoder_lm, "_liger_fused_linear_cross_entropy", lambda: None)  # liger-kernel not installed
    assert encoder_lm.fused_vocab_loss(torch.device("cuda")) is None
    monkeypatch.setattr(encoder_lm, "_liger_fused_linear_cross_entropy", lambda: _liger_contract)
    assert encoder_lm.fused_vocab_loss(torch.device("cuda")) is _liger_contract
    assert encoder_lm.fused_vocab_loss(torch.device("cpu")) is None  # the chunked path on a CPU


@pytest.mark.parametrize("family", ["modernbert", "bert"])
def test_the_fused_path_projects_the_head_output_with_the_tied_decoder_and_its_bias(family, monkeypatch, tmp_path):
    """The fused call gets ``decoder(transform(h))`` split in two: same loss and gradients (the tied embedding matrix,
    the decoder bias, the head) as the plain path; it counts nothing right, evaluation (no grad) still does."""
    from backend.detour import encoder_lm
    from backend.engine.models import load_masked_lm

    d = save_tiny_model(tmp_path, TINY_MODERNBERT if family == "modernbert" else TINY_BERT)
    ids, labels = _clm_batch()
    plain = _loss_and_grads(load_masked_lm(str(d)), ids, labels, causal=True)
    monkeypatch.setattr(encoder_lm, "_liger_fused_linear_cross_entropy", lambda: _liger_contract)
    monkeypatch.setattr(encoder_lm, "FUSED_LOSS_DEVICES", ("cpu",))
    model = load_masked_lm(str(d))
    fused = _loss_and_grads(model, ids, labels, causal=True)
    assert fused[1] is None and fused[2] == plain[2] == 3 * 39
    torch.testing.assert_close(fused[0], plain[0], rtol=1e-6, atol=1e-6)
    assert set(fused[3]) == set(plain[3])
    for k, g in plain[3].items():
        torch.testing.assert_close(fused[3][k], g, rtol=1e-5, atol=1e-7, msg=k)
    with torch.no_grad():
        loss, correct, n = encoder_lm.EncoderLM(model)(ids, labels, causal=True)
    assert correct is not None and n == plain[2]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_liger_fused_loss_matches_the_plain_loss_and_gradients(tiny_modernbert_dir, monkeypatch, precision):
    """liger-kernel itself: on a GPU box (pip install -r requirements-gpu.txt), or here with Triton's interpreter
    (``TRITON_INTERPRET=1``, liger-kernel and triton importable): CLM loss and every gradient as the plain path."""
    import os

    from backend.detour import encoder_lm
    from backend.engine.models import load_masked_lm

    if encoder_lm._liger_fused_linear_cross_entropy() is None:
        pytest.skip("liger-kernel is not installed (requirements-gpu.txt)")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        if os.environ.get("TRITON_INTERPRET") != "1":
            pytest.skip("no CUDA: set TRITON_INTERPRET=1 to run liger's Triton kernels on the CPU")
        monkeypatch.setattr(encoder_lm, "FUSED_LOSS_DEVICES", ("cpu",))
    ids, labels = (t.to(device) for t in _clm_batch())
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16")

    def run(fused: bool):
        monkeypatch.setattr(encoder_lm, "FUSED_LOSS_DEVICES", (device,) if fused else ())
        with autocast:
            return _loss_and_grads(load_masked_lm(str(tiny_modernbert_dir)).to(device), ids, labels, causal=True)

    plain, fused = run(False), run(True)
    assert fused[1] is None and plain[1] is not None and fused[2] == plain[2]
    tol = dict(rtol=1e-5, atol=1e-6) if precision == "fp32" else dict(rtol=2e-2, atol=2e-3)
    torch.testing.assert_close(fused[0], plain[0], **tol)
    for k, g in plain[3].items():
        torch.testing.assert_close(fused[3][k], g, **tol, msg=k)


@pytest.mark.parametrize("bias", [True, False])
def test_cpu_bf16_vocab_loss_matches_autocast(monkeypatch, bias):
    """The CPU bf16 fused loss (chunks of rows, gradients taken in the forward pass) gives autocast's loss and
    gradients up to bf16 rounding, across chunk edges (3 chunks of 64 rows and a remainder here)."""
    from backend.detour import encoder_lm

    monkeypatch.setattr(encoder_lm, "FUSED_CPU_LOGITS_ELEMENTS", 64 * 96)
    torch.manual_seed(0)
    dec = torch.nn.Linear(32, 96, bias=bias)
    x0, target = torch.randn(200, 32), torch.randint(0, 96, (200,))
    out = []
    for fused in (False, True):
        dec.zero_grad()
        x = x0.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert encoder_lm.cpu_bf16_training(x.device)
            if fused:
                loss = encoder_lm.cpu_bf16_vocab_loss(x, dec, target)
            else:
                loss = torch.nn.functional.cross_entropy(dec(x).float(), target, reduction="sum")
        (loss * 0.5).backward()
        out.append([loss.detach(), x.grad, dec.weight.grad] + ([dec.bias.grad] if bias else []))
    for a, b in zip(*out):
        assert a.dtype == b.dtype
        assert (a - b).norm() <= 1e-2 * b.norm()  # bf16 products summed in another order
    assert not encoder_lm.cpu_bf16_training(torch.device("cpu"))  # fp32: autocast's path, bit for bit

"""Issue 18: NER fine-tuning went NaN in bf16 on an H100 at max_len 256/512. The mechanism, checked on CPU with the
project's own data: in a padded batch of long and short sentences, the padding queries of ModernBERT's local layers
see no key at all (empty mask rows). CPU kernels return 0 for such rows, so CPU trains; a kernel that does not
(cuDNN's backward on the GPU; here the textbook softmax, which gives NaN like it) turns the whole step NaN. The
fine-tuning models now let every query attend to itself: no empty rows, real positions bit-identical."""

from __future__ import annotations

import pytest
import torch

from backend.engine.models import _load, resolve_model
from backend.evaluation.iob import NerData
from backend.evaluation.ner import IGNORE, NerTask, pad_batch
from backend.evaluation.padded_attention import empty_rows, with_diagonal
from backend.evaluation.runner import load_task_data
from conftest import require_shared

MAX_LEN = 256  # the default NER max_len, where the GPU failed (128 trained)


def long_and_short_batch():
    """NerTask on NCBI sentences (10 joined into one long sentence, and short ones) and one padded batch of them:
    the long sentence's first 256-token window padded against 7 short sentences, as a shuffled loader makes."""
    ncbi = load_task_data("ner", str(require_shared("ncbi_disease")))
    train = ncbi.train.select(list(range(40)))
    long_words = [w for s in train.sentences[:10] for w in s]
    long_tags = [t for s in train.tags[:10] for t in s]
    by_len = sorted(range(10, 40), key=lambda i: len(train.sentences[i]))[:7]
    split = train.select(by_len)
    split.sentences.insert(0, long_words)
    split.tags.insert(0, long_tags)
    data = NerData(split, split, split, ncbi.labels, ncbi.source)
    source = resolve_model("detour-tiny-en")
    from backend.engine.models import load_tokenizer

    task = NerTask(data, load_tokenizer(source), MAX_LEN, "detour-tiny-en")
    feats = task.train_features[:8]  # the long sentence's first window, then the 7 short sentences
    batch = pad_batch(feats, task.pad_id)
    return task, source, batch


def unfixed_model(task, source):
    """The model NerTask.load_model builds, without the fix (as the code of issue 18 loaded it)."""
    from transformers import AutoModelForTokenClassification

    return _load(AutoModelForTokenClassification, source, num_labels=len(task.labels))


def masks_seen(model) -> list:
    """Records the mask each attention module receives (after any hook registered before this one)."""
    seen = []
    for layer in model.model.layers:
        layer.attn.register_forward_pre_hook(lambda m, a, kw: seen.append(kw.get("attention_mask")), with_kwargs=True)
    return seen


def test_batch_really_pads_past_the_local_window():
    """The premise: the case is in the data (a 256-token window padded against short sentences), and the model's
    own masks (transformers, no fix) have empty rows in every local layer and none in the global ones."""
    task, source, batch = long_and_short_batch()
    lengths = batch["attention_mask"].sum(1)
    assert batch["input_ids"].shape[1] > 3 * MAX_LEN // 4 and int(lengths.min()) < MAX_LEN // 4
    model = unfixed_model(task, source)
    seen = masks_seen(model)
    with torch.no_grad():
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    kinds = model.config.layer_types
    assert [empty_rows(m) > 1000 for m in seen] == [k == "sliding_attention" for k in kinds]


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_finetuning_model_sees_no_empty_attention_row(impl):
    """Fails on the code of issue 18 (1,500+ empty rows per local layer in this batch)."""
    task, source, batch = long_and_short_batch()
    model = task.load_model(source)
    model.set_attn_implementation(impl)
    seen = masks_seen(model)
    with torch.no_grad():
        model(**batch)
    assert len(seen) == model.config.num_hidden_layers
    assert [empty_rows(m) for m in seen] == [0] * len(seen)


def strict_softmax_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Attention as the textbook writes it: softmax over the allowed keys, NaN for a row that allows none. Real
    kernels that mishandle such rows (cuDNN's backward in issue 18) poison the step the same way."""
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        scores = scores.masked_fill(~attention_mask, float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(query.dtype)
    return torch.matmul(probs, value).transpose(1, 2).contiguous(), probs


@pytest.fixture
def strict_kernel():
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register("strict_softmax_test", strict_softmax_attention)
    AttentionMaskInterface.register("strict_softmax_test", sdpa_mask)  # boolean masks, as sdpa gets them
    yield "strict_softmax_test"
    AttentionInterface._global_mapping.pop("strict_softmax_test", None)
    AttentionMaskInterface._global_mapping.pop("strict_softmax_test", None)


@pytest.mark.parametrize("bf16", [False, True])
def test_a_kernel_that_mishandles_empty_rows_cannot_poison_a_step(strict_kernel, bf16):
    """Loss and every gradient finite under a kernel that gives NaN for empty rows (NaN on the code of issue 18),
    and the real positions agree with sdpa's."""
    task, source, batch = long_and_short_batch()
    torch.manual_seed(0)
    model = task.load_model(source)
    reference = {k: v.clone() for k, v in model.state_dict().items()}
    model.set_attn_implementation(strict_kernel)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = model(**batch)
    assert torch.isfinite(out.loss)
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)

    sdpa = task.load_model(source)
    sdpa.load_state_dict(reference)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        want = sdpa(**batch).logits.float()
    real = batch["attention_mask"].bool()
    tol = 5e-2 if bf16 else 1e-4
    assert torch.allclose(out.logits.float()[real], want[real], atol=tol, rtol=tol)


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_real_positions_are_bit_identical_with_the_fix(impl):
    """Attending to itself changes padding rows only: the real logits, the loss and every gradient are exactly
    those of the unmodified model (fp32)."""
    task, source, batch = long_and_short_batch()
    runs = []
    for fixed in (False, True):
        torch.manual_seed(0)  # the same new head
        model = task.load_model(source) if fixed else unfixed_model(task, source)
        model.set_attn_implementation(impl)
        out = model(**batch)
        out.loss.backward()
        grads = {n: p.grad for n, p in model.named_parameters()}
        runs.append((out.logits[batch["attention_mask"].bool()], out.loss, grads))
    (la, lossa, ga), (lb, lossb, gb) = runs
    assert torch.equal(la, lb) and torch.equal(lossa, lossb)
    assert ga.keys() == gb.keys() and all(torch.equal(ga[n], gb[n]) for n in ga)
    assert (batch["labels"][~batch["attention_mask"].bool()] == IGNORE).all()  # padding carries no loss


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (issue 18 was seen on an H100)")
@pytest.mark.parametrize("seq_len", [128, 192, 256, 320, 448, 512])
def test_gpu_bf16_steps_on_padded_batches_are_finite(seq_len):
    """On the GPU, under torch's default sdpa kernel choice (cuDNN first on an H100): a bf16 training step on a
    batch padded to ``seq_len`` (lengths % 128 == 64 included) has a finite loss and finite gradients."""
    task, source, batch = long_and_short_batch()
    n = batch["input_ids"].shape[1]
    pad = {"input_ids": task.pad_id, "attention_mask": 0, "labels": IGNORE}
    if seq_len <= n:
        batch = {k: v[1:, :seq_len] for k, v in batch.items()}  # the short sentences only
    batch = {k: torch.nn.functional.pad(v, (0, seq_len - v.shape[1]), value=pad[k]).cuda() for k, v in batch.items()}
    model = task.load_model(source).cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(**batch)
    out.loss.backward()
    assert torch.isfinite(out.loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_with_diagonal_handles_both_mask_kinds_and_leaves_others():
    allowed = torch.tensor([[True, False, False], [False, False, False], [False, False, False]])[None, None]
    assert with_diagonal(allowed)[0, 0].tolist() == [[True, False, False], [False, True, False], [False, False, True]]
    low = torch.finfo(torch.float32).min
    additive = torch.where(allowed, 0.0, low)
    assert torch.equal(with_diagonal(additive)[0, 0].diagonal(), torch.zeros(3))
    assert with_diagonal(additive)[0, 0, 0, 1] == low
    assert empty_rows(allowed) == 2 and empty_rows(with_diagonal(allowed)) == 0 and empty_rows(additive) == 2
    flat = torch.ones(2, 3)
    assert with_diagonal(None) is None and with_diagonal(flat) is flat  # no mask / flash attention's 2D mask

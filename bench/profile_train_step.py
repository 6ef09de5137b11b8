"""One training step, taken apart offline: ours (EncoderLM, CLM or MLM) vs the HF model's own loss, interleaved
step by step in one process (a shared machine's load hits every side alike), and torch.profiler's top operators.

    python bench/profile_train_step.py [--rounds 10] [--profile ours-clm] [--masks] [--attention]

--masks times the CLM mask of the local layers as ``masking_utils`` builds it (with ``causal_mask_function``)
against ``attention._sdpa_sliding_causal`` (one broadcast comparison, kept per shape): the finding that brought
the CLM step from 0.86x to above the HF Trainer. --attention times one layer's attention forward+backward at the
step's shape (bf16): sdpa with the local band mask, sdpa causal, and ``attention.cpu_bf16_matmul_attention`` (what
training under CPU bf16 autocast runs). bf16 autocast where the precision probe picks it. Prints only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.detour.attention import _modernbert_masks, _sdpa_sliding_causal  # noqa: E402
from backend.detour.encoder_lm import EncoderLM  # noqa: E402
from backend.detour.objectives import clm_labels, mlm_mask, replacement_vocab, special_ids  # noqa: E402
from backend.engine.config import load_config  # noqa: E402
from backend.engine.models import load_masked_lm, load_tokenizer  # noqa: E402
from backend.engine.precision import resolve_precision  # noqa: E402
from backend.engine.tokenstore import open_corpus  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="detour-tiny-en")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--profile", choices=["hf-clm", "ours-clm", "ours-mlm"], default=None)
    p.add_argument("--masks", action="store_true")
    p.add_argument("--attention", action="store_true")
    a = p.parse_args()
    tok = load_tokenizer(a.model)
    train, _, _ = open_corpus(load_config(None)["data"], tok, 256)
    model = load_masked_lm(a.model)
    lm = EncoderLM(model).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    ids, starts = train.rows(torch.arange(16))
    spec = (special_ids(tok), tok.mask_token_id, replacement_vocab(tok))
    bf16 = resolve_precision("auto", "cpu")[0] == "bf16"

    def step(mode: str) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            if mode == "hf-clm":  # the Trainer's "CLM" row: every token's logits, bidirectional
                loss = model(input_ids=ids, labels=ids).loss
            elif mode == "ours-clm":
                loss = lm(ids, clm_labels(ids, starts), causal=True)[0]
            else:
                inputs, labels = mlm_mask(ids, 0.3, *spec, torch.Generator().manual_seed(0))
                loss = lm(inputs, labels, causal=False)[0]
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    modes = ["hf-clm", "ours-clm", "ours-mlm"]
    for m in modes:
        step(m)
    times = {m: [] for m in modes}
    for _ in range(a.rounds):
        for m in modes:
            t0 = time.perf_counter()
            step(m)
            times[m].append(time.perf_counter() - t0)
    for m in modes:
        print(f"{m}: {16 * 256 / statistics.median(times[m]):,.0f} tok/s (median of {a.rounds} interleaved steps)")
    if a.masks:
        b, t = ids.shape
        for name, build in (
            ("masking_utils", lambda: _modernbert_masks(model, ids, None, torch.float32)),
            (
                "broadcast",
                lambda: _sdpa_sliding_causal.__wrapped__(b, t, model.config.local_attention // 2, ids.device),
            ),
        ):
            build()
            t0 = time.perf_counter()
            for _ in range(5):
                build()
            print(f"CLM masks, {name}: {(time.perf_counter() - t0) / 5 * 1000:.1f} ms per step")
    if a.attention:
        attention_times(model, ids.shape)
    if a.profile:
        from torch.profiler import profile

        with profile() as prof:
            for _ in range(3):
                step(a.profile)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


def attention_times(model, shape, reps: int = 5) -> None:
    from backend.detour.attention import cpu_bf16_matmul_attention

    b, t = shape
    h = model.config.num_attention_heads
    d = model.config.hidden_size // h
    band = _sdpa_sliding_causal.__wrapped__(b, t, model.config.local_attention // 2, torch.device("cpu"))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    causal_module = type("M", (), {"is_causal": True})()
    routes = {
        "sdpa, local band mask": lambda q, k, v: sdpa(q, k, v, attn_mask=band),
        "sdpa, is_causal": lambda q, k, v: sdpa(q, k, v, is_causal=True),
        "bf16 matmuls, local band mask": lambda q, k, v: cpu_bf16_matmul_attention(None, q, k, v, band)[0],
        "bf16 matmuls, causal": lambda q, k, v: cpu_bf16_matmul_attention(causal_module, q, k, v, None)[0],
    }
    for _ in range(2):  # interleaved: the load moves
        for name, f in routes.items():
            qkv = [torch.randn(b, t, h, d, dtype=torch.bfloat16).transpose(1, 2).requires_grad_() for _ in range(3)]
            f(*qkv).sum().backward()
            t0 = time.perf_counter()
            for _ in range(reps):
                f(*qkv).sum().backward()
            print(f"attention, {name}: {(time.perf_counter() - t0) / reps * 1000:.1f} ms per layer fwd+bwd")


if __name__ == "__main__":
    main()

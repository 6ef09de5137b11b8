"""CPU: the attention implementations of the causal switch on the bundled tiny model, forward (and forward+backward
where there is one), CLM (causal masks) and MLM (bidirectional), at seq 512 and 2048.

    python bench/bench_attention_cpu.py [--model detour-tiny-en] [--seq-lens 512 2048] [--tokens 4096] [--reps 5]

Same tokens per call at every length (batch = --tokens // seq). Times are medians of --reps calls after a warm-up
call, the implementations taking turns (a shared machine slows them alike); a flex_attention row also gives its first
call (inductor compiles the kernel and the mask builder: a C++ compiler is
needed). flex_attention has no backward on a CPU in torch 2.13, so its training column is empty: on a CPU, training
uses sdpa (``attn_implementation: auto``); flex_attention's O(T * w) local layers are a GPU lever
(bench/bench_gpu.py). Results: bench/results/attention_cpu.json + .md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import save  # noqa: E402

from backend.detour.attention import causal_attention  # noqa: E402
from backend.engine.models import load_masked_lm, quiet_transformers  # noqa: E402

IMPLS = ["sdpa", "eager", "flex_attention"]


def step_fn(model, ids: torch.Tensor, causal: bool, backward: bool):
    def step():
        with torch.set_grad_enabled(backward), causal_attention(model, ids, None, causal) as mask:
            hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
        if backward:
            hidden.float().pow(2).mean().backward()
            model.zero_grad(set_to_none=True)

    return step


def round_robin(steps: dict, reps: int) -> dict:
    """{name: (first call s, median s)}: the implementations take turns, so a busy machine slows them alike."""
    first, times = {}, {name: [] for name in steps}
    for name, fn in steps.items():
        t = time.perf_counter()
        fn()
        first[name] = time.perf_counter() - t
    for _ in range(reps):
        for name, fn in steps.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: (first[name], statistics.median(times[name])) for name in steps}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="detour-tiny-en")
    p.add_argument("--seq-lens", type=int, nargs="+", default=[512, 2048])
    p.add_argument("--tokens", type=int, default=4096, help="tokens per call: batch = tokens // seq_len")
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    load_before = os.getloadavg()[0]
    with quiet_transformers():
        models = {impl: load_masked_lm(a.model, attn_implementation=impl) for impl in IMPLS}
    rows = []
    for seq in a.seq_lens:
        ids = torch.randint(5, 8000, (max(1, a.tokens // seq), seq), generator=torch.Generator().manual_seed(0))
        for causal in (True, False):
            fwd = round_robin({i: step_fn(m.eval(), ids, causal, False) for i, m in models.items()}, a.reps)
            trainable = {i: m for i, m in models.items() if i != "flex_attention"}
            train = round_robin({i: step_fn(m.train(), ids, causal, True) for i, m in trainable.items()}, a.reps)
            for impl in models:
                row = {
                    "impl": impl,
                    "seq_len": seq,
                    "batch": ids.shape[0],
                    "phase": "clm (causal)" if causal else "mlm (bidirectional)",
                    "forward_s": fwd[impl][1],
                    "forward_first_call_s": fwd[impl][0],
                    "forward_backward_s": train[impl][1] if impl in train else None,
                    "forward_tokens_per_s": ids.numel() / fwd[impl][1],
                }
                rows.append(row)
                print(row, flush=True)
    sdpa = {(r["seq_len"], r["phase"]): r["forward_s"] for r in rows if r["impl"] == "sdpa"}
    for r in rows:
        r["forward_speedup_vs_sdpa"] = sdpa[(r["seq_len"], r["phase"])] / r["forward_s"]
    config = models["sdpa"].config
    lines = [
        f"Attention implementations on CPU ({torch.get_num_threads()} threads; shared machine, 1-min load average "
        f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end), "
        f"{a.model} ({config.num_hidden_layers} layers, window {config.local_attention}), fp32, "
        f"{a.tokens} tokens per call; median of {a.reps}",
        "",
        "| impl | seq | batch | phase | forward ms | vs sdpa | first call s | forward+backward ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        train = f"{1000 * r['forward_backward_s']:.0f}" if r["forward_backward_s"] else "n/a (no CPU backward)"
        lines.append(
            f"| {r['impl']} | {r['seq_len']} | {r['batch']} | {r['phase']} | {1000 * r['forward_s']:.0f} | "
            f"{r['forward_speedup_vs_sdpa']:.2f}x | {r['forward_first_call_s']:.1f} | {train} |"
        )
    load = {"start": load_before, "end": os.getloadavg()[0]}
    payload = {"model": a.model, "tokens_per_call": a.tokens, "reps": a.reps, "load_average_1min": load, "rows": rows}
    save("attention_cpu", payload, "\n".join(lines))


if __name__ == "__main__":
    main()

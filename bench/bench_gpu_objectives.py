"""Every registered objective trained on a GPU at ModernBERT-base shape: tokens/s, peak memory, the loss falling,
and the attention the objective gets there (``auto`` resolved as a run resolves it: flex_attention for the
objectives whose masks are the two of every layer kind; sdpa for those attending per row, which need dense masks).

    python bench/bench_gpu_objectives.py [--seq-len 1024] [--batch 16] [--steps 10] [--warmup 3]
    python bench/bench_gpu_objectives.py --cpu-smoke      # tiny model, fp32, CPU: every code path

Same model, weights and batches for every objective (a random walk over the vocabulary, as ``bench_gpu.py``),
bf16 autocast, fused AdamW, not compiled (``bench_gpu.py`` measures compile for clm and mlm). Also checks, on the
GPU, that the prefix objective's attention is causal after the prefix and bidirectional inside it (outputs before
a changed token t >= prefix are unchanged; a change inside the prefix moves every position). Writes
``bench/results/gpu_objectives.json`` + ``.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_gpu import BASE_ARCH, MASK_ID, TINY_ARCH, build_model, machine_info  # noqa: E402

from backend import objectives  # noqa: E402
from backend.detour.attention import causal_attention  # noqa: E402
from backend.detour.encoder_lm import EncoderLM  # noqa: E402
from backend.detour.recipe import build_optimizer  # noqa: E402
from backend.engine.schema import BY_KEY  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TRAIN = {k: BY_KEY[f"train.{k}"].default for k in ("lr", "betas", "eps", "weight_decay")}
DENSE = ("prefix", "per-sequence")  # attentions whose masks are per row: sdpa/eager only


def walk_ids(n: int, t: int, vocab: int, gen: torch.Generator) -> torch.Tensor:
    start = torch.randint(4, vocab, (n, 1), generator=gen)
    steps = torch.randint(1, 8, (n, t), generator=gen).cumsum(1)
    return 4 + (start + steps - 4) % (vocab - 4)


def impl_for(obj, device: torch.device) -> str:
    if device.type != "cuda":
        return "sdpa"
    return "sdpa" if obj.attention in DENSE else "flex_attention"


def train_objective(obj, arch, state, device, a) -> dict:
    impl = impl_for(obj, device)
    model = build_model(arch, impl, device)
    model.load_state_dict(state)
    lm = EncoderLM(model).train()
    opt = build_optimizer(model, {**TRAIN, "precision": "bf16" if device.type == "cuda" else "fp32"})
    masking = objectives.Masking(list(range(4)), MASK_ID, torch.arange(4, arch["vocab_size"]))
    settings = {**obj.held_out, **{k: v for k, v in obj.defaults().items() if v is not None}}
    if obj.name == "mlm":
        settings["mlm_probability"] = 0.30  # the baseline's rate, as bench_gpu.py
    gen = torch.Generator().manual_seed(a.seed)
    batches = [walk_ids(a.batch, a.seq_len, arch["vocab_size"], gen) for _ in range(a.warmup + a.steps)]
    starts = torch.zeros(a.batch, a.seq_len, dtype=torch.bool)
    bf16 = device.type == "cuda"
    ctx = torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)
    losses, times = [], []
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for i, ids in enumerate(batches):
        b = obj.make(ids, starts, settings, masking, torch.Generator().manual_seed(1000 + i))
        att = b.attention.to(device) if isinstance(b.attention, torch.Tensor) else b.attention
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        with ctx:
            loss, _, _ = lm(b.inputs.to(device), b.labels.to(device), causal=att)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(lm.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        lv = float(loss.detach())
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
        losses.append(lv)
    step_s = sum(times) / len(times)
    row = {"objective": obj.name, "title": obj.title, "attention": obj.attention, "impl": impl,
           "settings": settings, "step_s": step_s, "tokens_per_s": a.batch * a.seq_len / step_s,
           "loss_first": losses[0], "loss_last": losses[-1], "loss_falls": losses[-1] < losses[0],
           "finite": all(torch.isfinite(torch.tensor(losses)).tolist()),
           "peak_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None}  # fmt: skip
    del lm, model, opt
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


@torch.no_grad()
def prefix_check(arch, state, device, a) -> dict:
    """Prefix LM on the device, sdpa under bf16 autocast: a change at t >= prefix leaves every output before t
    bit-identical; a change inside the prefix moves outputs before it (bidirectional there)."""
    model = build_model(arch, "sdpa", device)
    model.load_state_dict(state)
    model.eval()
    t = a.check_len
    p = t // 2
    ids = walk_ids(2, t, arch["vocab_size"], torch.Generator().manual_seed(7)).to(device)
    lengths = torch.tensor([p, p], device=device)

    def hidden(x):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            with causal_attention(model, x, None, lengths) as attn:
                return model.model(input_ids=x, attention_mask=attn).last_hidden_state.float()

    base = hidden(ids)
    cut = p + t // 8  # after the prefix
    late = ids.clone()
    late[:, cut:] = 4 + (late[:, cut:] + 3 - 4) % (arch["vocab_size"] - 4)
    early = ids.clone()
    early[:, p - 2] = 4 + (early[:, p - 2] + 3 - 4) % (arch["vocab_size"] - 4)
    h_late, h_early = hidden(late), hidden(early)
    past = float((h_late[:, :cut] - base[:, :cut]).abs().max())
    after = float((h_late[:, cut:] - base[:, cut:]).abs().max())
    inside = float((h_early[:, : p - 2] - base[:, : p - 2]).abs().max())
    return {"seq_len": t, "prefix": p, "changed_from": cut, "max_diff_before_change": past,
            "max_diff_after_change": after, "max_diff_before_prefix_change": inside,
            "pass": past == 0.0 and after > 0 and inside > 0}  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seq-len", type=int, default=None)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--check-len", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--cpu-smoke", action="store_true")
    a = ap.parse_args(argv)
    smoke = a.cpu_smoke
    if not smoke and not torch.cuda.is_available():
        print("bench_gpu_objectives: no CUDA device here; use --cpu-smoke to exercise the code", file=sys.stderr)
        return 3
    device = torch.device("cpu" if smoke else "cuda")
    arch = TINY_ARCH if smoke else BASE_ARCH
    a.seq_len = a.seq_len or (64 if smoke else 1024)
    a.batch = a.batch or (4 if smoke else 16)
    a.steps = a.steps or (2 if smoke else 10)
    a.warmup = 1 if smoke else a.warmup
    a.check_len = a.check_len or (64 if smoke else 1024)
    a.out = a.out or (Path("/tmp/gpu_objectives-smoke.json") if smoke else RESULTS / "gpu_objectives.json")
    torch.manual_seed(a.seed)
    src = build_model(arch, "sdpa", device)
    state = {k: v.detach().clone() for k, v in src.state_dict().items()}
    del src
    payload = {"machine": machine_info(device), "arch": arch, "seq_len": a.seq_len, "batch": a.batch,
               "steps": a.steps, "warmup": a.warmup, "argv": sys.argv[1:] if argv is None else argv,
               "rows": [], "prefix_check": None}  # fmt: skip
    for obj in objectives.all_objectives():
        print(f"[objectives] {obj.name} ...", flush=True)
        payload["rows"].append(train_objective(obj, arch, state, device, a))
        r = payload["rows"][-1]
        print(f"  -> {r['impl']}: {r['tokens_per_s']:,.0f} tok/s, loss {r['loss_first']:.3f} -> {r['loss_last']:.3f}",
              flush=True)  # fmt: skip
    payload["prefix_check"] = prefix_check(arch, state, device, a)
    print(f"[prefix check] {payload['prefix_check']}", flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    dev = payload["machine"].get("gpu") or payload["machine"].get("cpu")
    precision = "bf16 autocast" if device.type == "cuda" else "fp32"
    head = "| objective | attention | impl | tokens/s | peak GiB | loss first -> last |"
    lines = [f"Objectives on {dev}: {a.batch} x {a.seq_len} tokens, {precision}, not compiled, {a.steps} timed steps "
             f"after {a.warmup}", "", head, "|---|---|---|---|---|---|"]  # fmt: skip
    for r in payload["rows"]:
        mem = f"{r['peak_gib']:.1f}" if r["peak_gib"] is not None else "n/a"
        lines.append(f"| {r['objective']} | {r['attention']} | {r['impl']} | {r['tokens_per_s']:,.0f} | {mem} | "
                     f"{r['loss_first']:.3f} -> {r['loss_last']:.3f} |")  # fmt: skip
    pc = payload["prefix_check"]
    lines += ["", f"Prefix check (T = {pc['seq_len']}, prefix {pc['prefix']}, tokens changed from "
              f"{pc['changed_from']}): max |diff| before the change {pc['max_diff_before_change']:.3g}, after "
              f"{pc['max_diff_after_change']:.3g}; a change inside the prefix moves earlier positions by "
              f"{pc['max_diff_before_prefix_change']:.3g}: "
              f"{'PASS' if pc['pass'] else 'FAIL'}"]  # fmt: skip
    a.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    ok = pc["pass"] and all(r["finite"] for r in payload["rows"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

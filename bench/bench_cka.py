"""Benchmark: streaming feature-space CKA (backend.analysis.cka.StreamingSimilarity) vs the naive n x n Gram formula
(backend.analysis.cka.gram_similarity), time and peak memory, at n = 2k, 8k, 16k, 32k, 64k rows (tokens) and d = 256,
768 (about 3-4 minutes on 2 cores; the naive method peaks at ~4.5 GB at 16k). ``--measure debiased`` (default) or
``linear`` (the published CKA): the naive debiased form is Song et al.'s unbiased HSIC on the n x n Gram matrices.

    python bench/bench_cka.py                       # writes bench/results/cka.json, prints a Markdown table
    python bench/bench_cka.py --naive-max-n 8192    # quicker: naive only up to 8k rows (~1.1 GB)
    python bench/bench_cka.py --measure linear --out bench/results/cka_linear.json

Every (method, n, d) runs in a fresh Python process, so a measurement cannot inherit memory that an
earlier one freed but the allocator kept. Memory = peak resident set size (Linux ``VmHWM``, reset through
``/proc/self/clear_refs`` just before the call) minus the resident size at that moment: everything the
method allocates (float64 copies, statistics, Gram matrices, temporaries, allocator overhead). The inputs
X, Y (n x d float32, the same for both methods) are created before the baseline and so are excluded;
the streaming method reads them in batches of ``--batch`` rows, as it would read a model's hidden states.
tracemalloc is not used: it does not see torch's tensor allocations.

The naive method needs two n x n float64 matrices (2·8·n² bytes: 17 GB at 32k, 69 GB at 64k), more than
this machine has; beyond ``--naive-max-n`` its time is extrapolated as t(n_max)·(n/n_max)² (its O(n²d)
term dominates) and its memory computed as 16·n² bytes; such rows say ``measured: false``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _status(field: str) -> int:
    """A ``/proc/self/status`` field in bytes (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def worker(method: str, n: int, d: int, batch: int, repeats: int, measure: str) -> dict:
    import torch

    from backend.analysis.cka import StreamingSimilarity, gram_similarity

    g = torch.Generator().manual_seed(n * 7 + d)
    x = torch.randn(n, d, generator=g)
    y = x @ torch.randn(d, d, generator=g) / d**0.5 + torch.randn(n, d, generator=g)
    x[:, 0] += 30.0  # a large-mean feature, as in residual streams
    for dt in (torch.float32, torch.float64):  # warm the thread pool and both GEMM kernels
        (torch.randn(512, 512, dtype=dt) @ torch.randn(512, 512, dtype=dt)).sum()

    def streaming() -> float:
        acc = StreamingSimilarity()
        for s in range(0, n, batch):
            acc.update([x[s : s + batch]], [y[s : s + batch]])
        return acc.matrix(measure).item()

    fn = streaming if method == "streaming" else (lambda: gram_similarity(x, y, measure))
    times, value, peak = [], None, None
    for r in range(repeats):
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current RSS
        base = _status("VmRSS")
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
        if r == 0:
            peak = _status("VmHWM") - base
    return {"method": method, "n": n, "d": d, "time_s": min(times), "times_s": times, "peak_bytes": peak, "cka": value}


def run_worker(method: str, n: int, d: int, batch: int, repeats: int, measure: str) -> dict:
    cmd = [sys.executable, __file__, "--worker", method, str(n), str(d), "--batch", str(batch)]
    cmd += ["--repeats", str(repeats), "--measure", measure]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def _mb(b) -> str:
    return f"{b / 2**20:,.1f} MB" if b < 2**30 else f"{b / 2**30:,.1f} GB"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ns", type=int, nargs="+", default=[2048, 8192, 16384, 32768, 65536])
    p.add_argument("--dims", type=int, nargs="+", default=[256, 768])
    p.add_argument("--naive-max-n", type=int, default=16384, help="largest n at which the naive method runs")
    p.add_argument("--batch", type=int, default=4096, help="rows per streaming update (8 texts x 512 tokens)")
    p.add_argument("--repeats", type=int, default=2, help="runs per measurement below 16k rows (best time kept)")
    p.add_argument("--measure", choices=["debiased", "linear"], default="debiased")
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "cka.json"))
    p.add_argument("--worker", nargs=3, metavar=("METHOD", "N", "D"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        method, n, d = args.worker[0], int(args.worker[1]), int(args.worker[2])
        print(json.dumps(worker(method, n, d, args.batch, args.repeats, args.measure)))
        return 0

    import torch

    t_start = time.time()
    rows = []
    for d in args.dims:
        naive_ref = None
        for n in sorted(args.ns):
            reps = args.repeats if n < 16384 else 1  # the naive method is slow there: one run
            s = run_worker("streaming", n, d, args.batch, args.repeats, args.measure)
            row = {"n": n, "d": d, "streaming": s}
            if n <= args.naive_max_n:
                g = run_worker("naive", n, d, args.batch, reps, args.measure)
                g["measured"] = True
                naive_ref = g
                row["abs_diff"] = abs(s["cka"] - g["cka"])
            else:
                scale = (n / naive_ref["n"]) ** 2
                g = {
                    "method": "naive",
                    "n": n,
                    "d": d,
                    "time_s": naive_ref["time_s"] * scale,
                    "peak_bytes": 16 * n * n,
                    "measured": False,
                    "extrapolated_from_n": naive_ref["n"],
                }
                row["abs_diff"] = None
            row["naive"] = g
            row["speedup"] = g["time_s"] / s["time_s"]
            row["memory_ratio"] = g["peak_bytes"] / max(s["peak_bytes"], 1)
            rows.append(row)
            print(
                f"d={d:4d} n={n:6d}: streaming {s['time_s']:.3f} s {_mb(s['peak_bytes'])} | naive "
                f"{g['time_s']:.2f} s {_mb(g['peak_bytes'])}{'' if g['measured'] else ' (extrapolated)'}",
                file=sys.stderr,
            )
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    result = {
        "benchmark": (
            f"{args.measure} CKA, one layer pair: streaming float64 feature-space statistics vs naive n x n Gram"
        ),
        "measure": args.measure,
        "memory_method": (
            "peak RSS delta per call in a fresh process: VmHWM reset via /proc/self/clear_refs, minus VmRSS just "
            "before the call; inputs X, Y (n x d float32) allocated before the baseline, excluded for both methods; "
            "tracemalloc not used (it does not see torch tensor allocations)"
        ),
        "time_method": "time.perf_counter around the call; best of --repeats runs (naive: 1 run at n >= 16k)",
        "naive_extrapolation": (
            f"naive not run above n={args.naive_max_n} (two n x n float64 matrices: 16 n^2 bytes); "
            "time = t(n_max) (n / n_max)^2, memory = 16 n^2 bytes; rows with measured=false"
        ),
        "streaming_batch_rows": args.batch,
        "env": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "cpus": os.cpu_count(),
            "machine": platform.machine(),
            "loadavg_at_end": load,
        },
        "rows": rows,
        "elapsed_s": round(time.time() - t_start, 1),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")

    print("| d | n | streaming time | streaming peak mem | naive time | naive peak mem | speed-up | |Δ CKA| |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        s, g = r["streaming"], r["naive"]
        star = "" if g["measured"] else "*"
        diff = f"{r['abs_diff']:.1e}" if r["abs_diff"] is not None else "-"
        print(
            f"| {r['d']} | {r['n']:,} | {s['time_s']:.3f} s | {_mb(s['peak_bytes'])} | {g['time_s']:.2f} s{star} | "
            f"{_mb(g['peak_bytes'])}{star} | {r['speedup']:.0f}x | {diff} |"
        )
    print(f"\n\\* extrapolated from n = {args.naive_max_n} (see naive_extrapolation in {out.name}); wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

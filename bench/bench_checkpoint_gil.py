"""Does a background checkpoint write hold the GIL? What a GPU box's training thread would feel.

    python bench/bench_checkpoint_gil.py [--mparams 116]

On a GPU the training thread mostly launches kernels: Python and dispatch, one CPU core. If the checkpoint writer
held the GIL for long stretches, that thread would stop launching and the GPU would idle: the stall would only move.
Here the main thread (1 torch thread) runs small in-place ops and counts iterations per 50 ms window, idle and then
while a second thread writes what ``checkpoint.Checkpointer._write`` writes for a ModernBERT-base-sized model
(``--mparams`` M fp32 parameters): the weights twice with safetensors (accelerate's state, save_pretrained), the Adam
state with torch.save, then the manifest's sha256 of every file (``checkpoint.write_manifest``). The writer gets
the machine's other core, as it would on a GPU box. (On this 2-core CPU a real CPU training run uses both cores for
its matmuls, so there the write takes compute from training: ``bench/bench_checkpoint.py --base-shaped`` shows it.)

Results: bench/results/checkpoint_gil.json + .md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import save  # noqa: E402

from backend.engine.checkpoint import write_manifest  # noqa: E402

WINDOW_S = 0.05


def windows(x: torch.Tensor, seconds: float) -> list[int]:
    """Iterations of two tiny in-place ops per 50 ms window, for ``seconds``."""
    counts, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        c, w = 0, time.perf_counter() + WINDOW_S
        while time.perf_counter() < w:
            x.add_(1e-6).mul_(0.999999)
            c += 1
        counts.append(c)
    return counts


def main() -> None:
    from safetensors.torch import save_file

    p = argparse.ArgumentParser()
    p.add_argument("--mparams", type=float, default=116, help="model size in M fp32 parameters (ModernBERT-base ~)")
    a = p.parse_args()
    torch.set_num_threads(1)
    n = int(a.mparams * 1e6 / (768 * 768))
    weights = {f"w{i}": torch.randn(768, 768) for i in range(n)}
    adam = {"state": {i: {"exp_avg": torch.randn(768, 768), "exp_avg_sq": torch.rand(768, 768),
                          "step": torch.tensor(3.0)} for i in range(n)}, "param_groups": [{"lr": 1e-3}]}  # fmt: skip
    x = torch.randn(64, 64)
    idle = windows(x, 2.0)
    parts: dict[str, float] = {}

    def write(d: str) -> None:
        for name, fn in (
            ("weights (safetensors)", lambda: save_file(weights, f"{d}/state.safetensors")),
            ("Adam state (torch.save)", lambda: torch.save(adam, f"{d}/optimizer.bin")),
            ("weights again (save_pretrained)", lambda: save_file(weights, f"{d}/model.safetensors")),
            ("manifest (sha256 of every file)", lambda: write_manifest(Path(d))),
        ):
            t = time.perf_counter()
            fn()
            parts[name] = time.perf_counter() - t

    with tempfile.TemporaryDirectory() as d:
        writer = threading.Thread(target=write, args=(d,))
        t0 = time.perf_counter()
        writer.start()
        busy: list[int] = []
        while writer.is_alive():
            busy += windows(x, 0.5)
        wall = time.perf_counter() - t0
        size_mb = sum(f.stat().st_size for f in Path(d).iterdir()) / 1e6
    base = statistics.median(idle)
    result = {
        "mparams": a.mparams,
        "checkpoint_mb": size_mb,
        "write_s": wall,
        "parts_s": parts,
        "idle_per_window": base,
        "during_write_mean_per_window": statistics.mean(busy),
        "during_write_fraction": statistics.mean(busy) / base,
        "windows_below_10pct": sum(c < 0.1 * base for c in busy),
        "windows": len(busy),
    }
    table = "\n".join([
        f"A background checkpoint write ({size_mb:,.0f} MB, {a.mparams:g}M parameters + Adam state) and a 1-thread "
        "training-like loop in the main thread",
        "",
        "| write took | main thread's speed during the write | 50 ms windows under 10% of idle | parts |",
        "|---|---|---|---|",
        f"| {wall:.1f} s | {result['during_write_fraction']:.0%} of idle | {result['windows_below_10pct']} of "
        f"{len(busy)} | " + "; ".join(f"{k} {v:.2f} s" for k, v in parts.items()) + " |",
    ])  # fmt: skip
    save("checkpoint_gil", result, table)


if __name__ == "__main__":
    main()

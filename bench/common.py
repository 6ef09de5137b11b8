"""Shared helpers for benchmarks: results as JSON + a Markdown table."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from backend.core.machine import cpu_name, cpu_speed_flags  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    return {
        "cpu": cpu_name(),
        # AVX2 / AVX-512 / AVX512-BF16 / AMX: two "AMD EPYC" hosts differ in these, and with them in every rate
        "cpu_flags": cpu_speed_flags(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }


def save(name: str, payload: dict, table: str, results: Path = RESULTS) -> Path:
    results.mkdir(parents=True, exist_ok=True)
    out = results / f"{name}.json"
    out.write_text(json.dumps({"machine": machine(), **payload}, indent=2) + "\n")
    (results / f"{name}.md").write_text(table + "\n")
    print(table)
    print(f"\n-> {out}")
    return out


def matmul_peak(dtype: torch.dtype, n: int = 2048, repeats: int = 10) -> float:
    """Measured GFLOP/s of a square matmul on this machine (the roofline we compare against)."""
    a = torch.randn(n, n, dtype=dtype)
    b = torch.randn(n, n, dtype=dtype)
    for _ in range(2):
        a @ b
    t = time.perf_counter()
    for _ in range(repeats):
        a @ b
    dt = (time.perf_counter() - t) / repeats
    return 2 * n**3 / dt / 1e9

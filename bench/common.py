"""Shared helpers for benchmarks: results as JSON + a Markdown table, and the app started in its own process for
the load benchmarks (bench_app_load, bench_fillmask_load)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from backend.core.machine import cpu_name, cpu_speed_flags  # noqa: E402
from tests import local_servers  # noqa: E402 - the app started as the tests start it

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"


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


def start_app(runs: Path, env: dict, log: Path, wait_s: float = 600) -> tuple[subprocess.Popen, str]:
    """The app in its own process (tests/local_servers.py, shared with the tests), once it answers; a start that
    fails ends the benchmark with the app's output. ``wait_s`` is long: on a busy shared machine, importing torch,
    transformers and gradio takes minutes. The app leads its own session, as a lab server's would
    (``setsid python -m app``), so it can put that session below the trainers' (``inference_lane.lower_session``)."""
    try:
        return local_servers.start_app(runs, log, env=env, wait_s=wait_s, own_session=True)
    except local_servers.AppDidNotStart as exc:
        raise SystemExit(str(exc)) from None


def stats(xs: list[float]) -> dict:
    """Latency percentiles of ``xs`` (seconds) in milliseconds."""
    if not xs:
        return {"n": 0}
    xs = sorted(xs)
    q = lambda p: xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]  # noqa: E731
    return {"n": len(xs), "p50_ms": 1000 * q(0.5), "p95_ms": 1000 * q(0.95), "max_ms": 1000 * xs[-1],
            "mean_ms": 1000 * statistics.fmean(xs)}  # fmt: skip

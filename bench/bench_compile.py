"""What compiling costs, cold and with inductor's kernel cache warm (``train.compile: true``).

    python bench/bench_compile.py [--model detour-tiny-en] [--seq-len 256] [--batch 16]

A pair (detour + MLM) is prepared with ``train.compile=true``, then trained the way the app's queue trains runs,
each in its own process (``python -m backend train --run-dir ...``), sharing one fresh ``DETOUR_CACHE_DIR``:

1. the detour run, cold: every graph is traced and its kernels built (C++ on a CPU);
2. the MLM run of the pair, in a new process: its graphs (MLM training, the two evaluation graphs) are the
   detour run's, so their kernels come from ``<cache>/inductor``;
3. the detour run's config again in a new process (what a resume compiles): every kernel from the cache.

The times are those train.log gives for the first call of each graph ("compile: first ... took"), next to a
steady training step of the same run. The pair trained by ``python -m backend train CONFIG`` in one process
compiles nothing for its second run (dynamo reuses the first run's graphs); that case needs no bench.
Results: bench/results/compile.json + .md
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import save  # noqa: E402

from backend.core.machine import cpu_name  # noqa: E402
from backend.core.paths import REPO_ROOT  # noqa: E402
from backend.engine.config import load_config  # noqa: E402
from backend.engine.rundir import read_metrics  # noqa: E402
from backend.runs.train import prepare_runs  # noqa: E402

FIRST = re.compile(r"compile: first (.+?)(?: \(step \d+\))? took ([\d.]+) s \((.*)\)")


def train_in_new_process(run: Path, env: dict) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "backend", "train", "--run-dir", str(run)], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True)  # fmt: skip
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{run.name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    firsts = {m[1]: {"seconds": float(m[2]), "what": m[3]} for m in FIRST.finditer((run / "train.log").read_text())}
    rows = [r for r in read_metrics(run) if r["type"] == "train"]
    steady = [b["time"] - a["time"] for a, b in zip(rows, rows[1:]) if b["step"] > 2]  # after the compiling steps
    return {"wall_s": wall, "first_calls": firsts, "steady_step_s": statistics.median(steady) if steady else None}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="detour-tiny-en")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch", type=int, default=16)
    a = p.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "DETOUR_CACHE_DIR": f"{tmp}/cache", "HF_HUB_OFFLINE": "1"}  # a cold kernel cache
        sets = [f"model.name={a.model}", f"train.seq_len={a.seq_len}", f"train.batch_size={a.batch}",
                "train.compile=true", "train.precision=fp32", "phases.main.steps=6", "phases.decay.steps=3",
                "logging.log_every=1", "logging.eval_every=1000", "logging.eval_batches=2",
                "logging.checkpoint_every=1000"]  # fmt: skip
        os.environ["DETOUR_CACHE_DIR"] = env["DETOUR_CACHE_DIR"]  # prepare_runs' token-store check reads it too
        detour, mlm = prepare_runs(load_config(None, [*sets, "name=bench", "recipe=pair"]), root=Path(tmp) / "runs")
        (again,) = prepare_runs(load_config(None, [*sets, "name=again", "recipe=clm_detour"]), root=Path(tmp) / "runs")
        for label, run in (("detour, cold cache", detour), ("mlm, new process", mlm), ("detour again", again)):
            results[label] = train_in_new_process(run, env)
            print(label, results[label], flush=True)
    rows = []
    for label, r in results.items():
        firsts = "; ".join(f"{k} {v['seconds']:.1f} s ({v['what']})" for k, v in r["first_calls"].items())
        total = sum(v["seconds"] for v in r["first_calls"].values())
        rows.append(f"| {label} | {total:.1f} s | {r['steady_step_s']:.2f} s | {r['wall_s']:.0f} s | {firsts} |")
    load = os.getloadavg()[0]
    table = "\n".join([
        f"Compile cost, {a.model}, batch {a.batch} x {a.seq_len}, fp32, {torch.get_num_threads()} threads on "
        f"{cpu_name()}, load average {load:.1f} (shared machine); each run in its own process, one kernel cache",
        "",
        "| run | first calls (sum) | steady step | process wall | first call of each graph |",
        "|---|---|---|---|---|",
        *rows,
    ])  # fmt: skip
    save("compile", {"model": a.model, "batch": f"{a.batch} x {a.seq_len}", "load_average": load, "runs": results},
         table)  # fmt: skip


if __name__ == "__main__":
    main()

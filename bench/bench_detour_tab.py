"""How long the Detour tab's views take on the bundled model: the handlers the app runs, called directly.

    python bench/bench_detour_tab.py [--runs-dir DIR] [--repeats 3]

``--runs-dir`` should hold a detour/MLM pair (``NAME-detour``, ``NAME-mlm``) trained from the bundled model; without
it a short pair is trained first into a temporary folder (4 CLM steps + 1 decay step, a checkpoint every step).
Writes bench/results/detour_tab.json and .md, with the load average (other jobs share this machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import save

REPO = Path(__file__).resolve().parent.parent


def timed(fn, repeats: int) -> dict:
    """Wall time of the first call (cold caches) and the median of the next ``repeats``, with the CPU seconds this
    process used (on a shared machine the wall time waits for the other jobs; CPU time much less so)."""
    runs = []
    for _ in range(1 + repeats):
        t, c = time.perf_counter(), time.process_time()
        fn()
        runs.append((time.perf_counter() - t, time.process_time() - c))
    rest = runs[1:] or runs
    return {
        "first_s": round(runs[0][0], 3),
        "median_s": round(statistics.median(r[0] for r in rest), 3),
        "median_cpu_s": round(statistics.median(r[1] for r in rest), 3),
    }


def train_pair(root: Path) -> None:
    sets = ["name=bench", "phases.main.tokens=16384", "logging.checkpoint_every=1", "logging.keep_checkpoints=20"]
    cmd = [sys.executable, "-m", "backend", "train", *[a for s in sets for a in ("--set", s)]]
    subprocess.run(cmd, cwd=REPO, env={**os.environ, "DETOUR_RUNS_DIR": str(root)}, check=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs-dir", default=None)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    root = Path(args.runs_dir or tempfile.mkdtemp(prefix="detour-bench-")).resolve()
    if not args.runs_dir:
        train_pair(root)
    os.environ["DETOUR_RUNS_DIR"] = str(root)
    from app import detour_tab
    from backend.explain import run_checkpoints

    choices = detour_tab.model_choices()
    trio = [m for m in detour_tab.default_models(choices) if m]
    run = next(m for m in trio if m.endswith("-detour"))
    points = run_checkpoints(root / run)["points"]
    load_before = os.getloadavg()
    rows = {}
    for n in (64, 128, 256):
        rows[f"masks, {n} tokens"] = timed(lambda n=n: detour_tab.show_masks("detour-tiny-en", n), args.repeats)
    text = detour_tab.EXAMPLE_TEXT
    rows[f"surprise, {len(trio)} models"] = timed(lambda: detour_tab.show_surprise(text, trio), args.repeats)
    rows["load a run"] = timed(lambda: detour_tab.load_run(run), args.repeats)
    last = len(points) - 1
    rows["scrub to one saved model"] = timed(
        lambda: detour_tab.scrub(run, last, detour_tab.EXAMPLE_MASKED, text), args.repeats
    )
    rows[f"trace the text ({len(points)} saved models)"] = timed(lambda: detour_tab.trace(run, text), 1)
    rows["teacher's minute: masks, 3 models, load, 4 scrubs"] = timed(
        lambda: (
            detour_tab.show_masks("detour-tiny-en", 128),
            detour_tab.show_surprise(text, trio),
            detour_tab.load_run(run),
            *(detour_tab.scrub(run, i, detour_tab.EXAMPLE_MASKED, text) for i in (0, last // 2, last - 1, last)),
        ),
        1,
    )
    load_after = os.getloadavg()
    table = "\n".join(
        ["| view (handler) | first call s | median s | median CPU s |", "|---|---|---|---|"]
        + [f"| {k} | {v['first_s']:.2f} | {v['median_s']:.2f} | {v['median_cpu_s']:.2f} |" for k, v in rows.items()]
    )
    table += (
        f"\n\nModels: {', '.join(trio)}; load average (1 min) {load_before[0]:.1f} before, {load_after[0]:.1f} after."
    )
    save(
        "detour_tab",
        {"runs_dir": str(root), "models": trio, "load_avg": [load_before, load_after], "rows": rows},
        table,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

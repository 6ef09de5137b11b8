"""Does a training process's memory grow without bound? Trains the bundled model (assets/models/detour-tiny-en,
the demo corpus) for ~300 steps in this process, samples the resident set size (psutil) every 0.25 s and reports it
per logged step (logging.log_every=1), with the phase, evaluations and checkpoints marked.

    python bench/bench_memory_growth.py --steps 300 --out /tmp/mem.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from pathlib import Path

import psutil


def _anon_mb() -> float | None:
    """RssAnon (heap, tensors) apart from RssFile (mapped libraries, the token store's pages: reclaimable)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--out", default="mem-growth.json")
    ap.add_argument("--set", action="append", default=[], help="extra key=value overrides")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="memgrowth-"))
    os.environ["DETOUR_RUNS_DIR"] = str(root)
    from backend.engine.config import default_config, load_config, parse_override
    from backend.runs.train import prepare_runs, train_run

    cfg = default_config()
    cfg.update(name="mem", recipe="clm_detour")
    cfg["model"]["name"] = "assets/models/detour-tiny-en"
    cfg["data"]["corpus"] = "demo"
    cfg["logging"]["log_every"] = 1
    cfg["phases"]["main"]["tokens"] = None
    cfg["phases"]["main"]["steps"] = int(args.steps / 1.1)
    for kv in args.set:
        key, value = parse_override(kv)
        node = cfg
        *parts, last = key.split(".")
        for p in parts:
            node = node[p]
        node[last] = value
    cfg = load_config(cfg)
    (run_dir,) = prepare_runs(cfg, root=root)
    proc, samples, done = psutil.Process(), [], threading.Event()

    live = Path(args.out).with_suffix(".live.jsonl")
    live.write_text(json.dumps({"run_dir": str(run_dir)}) + "\n")

    def sample() -> None:
        """Also appends a sample every ~5 s to <out>.live.jsonl, so a run stopped early still leaves its curve."""
        while not done.is_set():
            samples.append((time.time(), proc.memory_info().rss, _anon_mb()))
            if len(samples) % 20 == 1:
                ts, rss, anon = samples[-1]
                with live.open("a") as f:
                    f.write(json.dumps({"time": ts, "rss_mb": round(rss / 2**20, 1), "anon_mb": anon}) + "\n")
            time.sleep(0.25)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    t0 = time.time()
    st = train_run(run_dir)
    done.set()
    t.join()
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    per_step = []
    for r in rows:
        if r.get("type") != "train":
            continue
        before = [(rss, anon) for ts, rss, anon in samples if ts <= r["time"]]
        per_step.append(
            {
                "step": r["step"],
                "phase": r["phase"],
                "rss_mb": round(before[-1][0] / 2**20, 1) if before else None,
                "anon_mb": before[-1][1] if before else None,
            }
        )
    evals = [r["step"] for r in rows if r.get("type") == "eval"]
    out = {
        "state": st["state"],
        "wall_s": round(time.time() - t0, 1),
        "evals_at": evals,
        "peak_rss_mb": round(max(s for _, s, _ in samples) / 2**20, 1),
        "per_step": per_step,
    }
    Path(args.out).write_text(json.dumps(out, indent=1))
    show = [p for p in per_step if p["step"] in (1, 5, 10, 25, 26, 50, 75, 100, 101, 150, 200, 250, 273, 274, 300)]
    print(json.dumps({k: v for k, v in out.items() if k != "per_step"}))
    for p in show:
        print(p)


if __name__ == "__main__":
    main()

"""Fill-mask latency in the app, idle and under load.

Load = a training run in progress (launched through the app, trained by the detached worker) plus two concurrent
client sessions that each poll the Runs tab (full refresh: table, both curves, log tail) and call fill-mask.

    python bench/bench_fillmask_load.py [--duration 40] [--model detour-tiny-en]

Writes bench/results/fillmask_load.json and prints a table. The app runs in its own process on 127.0.0.1 with a
temporary runs folder; the run is cancelled at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import start_app, stats  # noqa: E402

TEXT = "The patient was treated with [MASK] for the infection."


def model_spec(requested: str | None, tmp: Path) -> str:
    from backend.engine.models import bundled_models

    if requested:
        return requested
    if "detour-tiny-en" in bundled_models():
        return "detour-tiny-en"
    # No bundled model yet: a tiny random ModernBERT with the bundled tokenizer (latency, not quality, is measured).
    from tests.conftest import TINY_MODERNBERT, save_tiny_model

    return str(save_tiny_model(tmp / "tiny-model", {**TINY_MODERNBERT, "hidden_size": 128, "num_hidden_layers": 6}))


def fill_args(model: str) -> list:
    return [TEXT, 5, model, None, None, None, False, False, False, False]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=40.0, help="seconds of load")
    ap.add_argument("--idle-calls", type=int, default=15)
    ap.add_argument("--model", default=None, help="model for fill-mask and the run (default: bundled or tiny)")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "fillmask_load.json"))
    args = ap.parse_args()

    from gradio_client import Client

    from app import launch_tab
    from backend.engine.config import default_config

    tmp = Path(tempfile.mkdtemp(prefix="bench-fm-"))
    runs = tmp / "runs"
    runs.mkdir()
    model = model_spec(args.model, tmp)
    env = dict(os.environ, DETOUR_RUNS_DIR=str(runs), DETOUR_UPLOADS_DIR=str(tmp / "uploads"),
               DETOUR_ALLOWED_ROOTS=str(tmp), GRADIO_ANALYTICS_ENABLED="False")  # fmt: skip
    app, url = start_app(runs, env, tmp / "app.log")
    result: dict = {"model": model, "text": TEXT, "python": platform.python_version(),
                    "cpus": os.cpu_count(), "duration_s": args.duration}  # fmt: skip
    try:
        c0 = Client(url, verbose=False)
        c0.predict(*fill_args(model), api_name="/fill_mask")  # load the model once (not measured)
        idle = []
        for _ in range(args.idle_calls):
            t = time.perf_counter()
            c0.predict(*fill_args(model), api_name="/fill_mask")
            idle.append(time.perf_counter() - t)
        result["idle"] = stats(idle)

        cfg = default_config()
        cfg.update(name="bench-run", recipe="clm_detour")
        cfg["model"]["name"] = model
        cfg["train"].update(seq_len=64, batch_size=8)
        cfg["phases"]["main"]["tokens"] = 10_000_000  # far more than the benchmark lasts; cancelled at the end
        cfg["logging"].update(log_every=1, eval_every=10, eval_batches=2, checkpoint_every=100_000)
        os.environ.update(DETOUR_ALLOWED_ROOTS=str(tmp), DETOUR_RUNS_DIR=str(runs))
        msg = c0.predict(*launch_tab.config_to_values(cfg), api_name="/launch")[3]
        assert "queued" in msg, msg
        from backend.engine.rundir import read_status

        deadline = time.time() + 120
        while read_status(runs / "bench-run").get("step") in (None, 0) and time.time() < deadline:
            time.sleep(0.5)
        st0 = read_status(runs / "bench-run")
        lat: dict[str, list[float]] = {"fill_mask": [], "runs_refresh": []}
        lock = threading.Lock()
        stop = time.time() + args.duration

        def session() -> None:
            c = Client(url, verbose=False)
            while time.time() < stop:
                t = time.perf_counter()
                c.predict(None, "bench-run", "tokens_seen", api_name="/runs_refresh")
                t2 = time.perf_counter()
                c.predict(*fill_args(model), api_name="/fill_mask")
                t3 = time.perf_counter()
                with lock:
                    lat["runs_refresh"].append(t2 - t)
                    lat["fill_mask"].append(t3 - t2)
                time.sleep(0.5)

        threads = [threading.Thread(target=session) for _ in range(2)]
        t_load = time.time()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        st1 = read_status(runs / "bench-run")
        elapsed = time.time() - t_load
        result["under_load"] = {k: stats(v) for k, v in lat.items()}
        result["training_tokens_per_s_during_load"] = (
            (st1.get("tokens_seen", 0) - st0.get("tokens_seen", 0)) / elapsed if elapsed > 0 else None
        )
        result["run_state_during_load"] = st1.get("state")
        c0.predict("bench-run", api_name="/cancel")
    finally:
        from backend.runs import jobs

        try:
            jobs.cancel(runs / "bench-run")
        except Exception:
            pass
        app.send_signal(signal.SIGTERM)
        app.wait(timeout=30)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"model: {model}   cpus: {result['cpus']}   load: 2 sessions x (runs refresh + fill-mask), run training")
    print(f"{'condition':<28} {'n':>4} {'p50 ms':>9} {'p95 ms':>9} {'max ms':>9}")
    rows = [("fill-mask, idle", result["idle"]), ("fill-mask, under load", result["under_load"]["fill_mask"]),
            ("runs refresh, under load", result["under_load"]["runs_refresh"])]  # fmt: skip
    for name, s in rows:
        if s.get("n"):
            print(f"{name:<28} {s['n']:>4} {s['p50_ms']:>9.0f} {s['p95_ms']:>9.0f} {s['max_ms']:>9.0f}")
    tps = result["training_tokens_per_s_during_load"]
    print(f"training throughput during load: {tps:.0f} tokens/s" if tps else "training throughput: n/a")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a training step's time goes: a short run through the real loop, then the doctor's diagnosis.

    python bench/bench_doctor.py [--steps 20] [--objective clm|mlm|both]

On a CPU: the bundled model (detour-tiny-en), batch 16 x 256, ``precision: auto``. With a CUDA GPU: ModernBERT-base's
shape from scratch (``model.name=from_scratch``, no download), batch 8 x 1024, bf16, attention and compile auto.
Prints the doctor's report (tok/s and MFU per phase, the split of wall time, findings) and writes
bench/results/doctor-{cpu,gpu}.json + .md with the split per phase and the 1-min load average.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import save  # noqa: E402

from backend.engine.config import load_config  # noqa: E402
from backend.engine.throughput import format_split  # noqa: E402
from backend.runs.doctor import diagnose, report  # noqa: E402
from backend.runs.train import prepare_runs, train_run  # noqa: E402


def settings(gpu: bool, steps: int, objective: str) -> list[str]:
    shape = (  # GPU: ModernBERT-base's shape (the library's defaults) with the bundled tokenizer's vocabulary
        ["model.name=from_scratch", "train.seq_len=1024", "train.batch_size=8"]
        if gpu
        else ["model.name=detour-tiny-en", "train.seq_len=256", "train.batch_size=16"]
    )
    recipe = {"clm": "clm_detour", "mlm": "mlm", "both": "clm_detour"}[objective]
    decay = [f"phases.decay.steps={max(steps // 4, 5)}"] if objective == "both" else []
    decay = decay or ["phases.decay.steps=0", "phases.decay.fraction=0"]
    logging = ["logging.log_every=5", f"logging.eval_every={steps}", f"logging.checkpoint_every={10 * steps}"]
    return [
        *shape,
        "data.corpus=demo",
        f"recipe={recipe}",
        f"phases.main.steps={steps}",
        *decay,
        *logging,
        "logging.eval_batches=2",
    ]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--objective", default="both", choices=["clm", "mlm", "both"])
    a = p.parse_args()
    gpu = torch.cuda.is_available()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(None, [f"name=doctor-{a.objective}", *settings(gpu, a.steps, a.objective)])
        (run,) = prepare_runs(cfg, root=Path(tmp))
        train_run(run)
        d = diagnose(run)
        text = report(d)
    print(text)
    rows = [f"| {p['phase']} ({p['objective']}) | {p['tokens_per_s']:,.0f} | "
            f"{100 * (p['mfu'] or 0):.1f}% | {format_split(p['split']) if p['split'] else '-'} |"
            for p in d["phases"]]  # fmt: skip
    m = d["machine"]
    table = "\n".join([
        f"Doctor on {'a GPU' if gpu else 'this CPU'}: {m.get('device')}, {m.get('precision')}, "
        f"{m.get('parameters', 0) / 1e6:.1f}M parameters, peak {m.get('peak_flops', 0) / 1e9:,.0f} GFLOP/s "
        f"({m.get('peak_source')}); 1-min load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end",
        "", "| phase | tok/s | MFU | split of wall time |", "|---|---|---|---|", *rows, "",
        "Findings:", *[f"- {f}: {fix}" for f, fix in d["findings"]],
    ])  # fmt: skip
    d["loadavg"] = {"start": load, "end": os.getloadavg()[0]}
    save(f"doctor-{'gpu' if gpu else 'cpu'}", {"diagnosis": d}, table)


if __name__ == "__main__":
    main()

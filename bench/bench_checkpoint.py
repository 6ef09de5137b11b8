"""How long a checkpoint stalls training: written synchronously (before) vs in the background (now).

    python bench/bench_checkpoint.py [--model detour-tiny-en] [--steps 20] [--every 4] [--repeats 2] [--base-shaped]

The same MLM run (bundled model, batch 16 x 256, fp32, a checkpoint every ``--every`` steps) is trained with
``checkpoint.BACKGROUND`` False then True, ``--repeats`` times alternately (the machine is shared: alternating
spreads the load over both). Reported, for the periodic checkpoints (the one at the end of the phase is waited
for by design and left out):

* the stall: how long the training thread is inside ``Checkpointer.save`` (synchronous: the whole write;
  background: the copy to CPU memory and each rank's RNG file), timed around the call;
* the step that saves: the interval between the logged step before the checkpoint and the next one (a step plus
  the stall), next to the median plain step; and the run's time beyond its plain steps, per checkpoint (a
  background write still takes CPU from training on a 2-core machine: this shows it, within the load's noise).
``--base-shaped`` trains a ModernBERT-base-shaped model (22 layers, hidden 768; the bundled 8k vocabulary) from
scratch on batches of 2 x 128 instead: checkpoints of ~1.7 GB, the size whose synchronous save stalled an H100 run
~4 s (issue 17). Results: bench/results/checkpoint.json (checkpoint-base.json) + .md
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import save  # noqa: E402

from backend.core.machine import cpu_name  # noqa: E402
from backend.engine import checkpoint  # noqa: E402
from backend.engine.config import load_config  # noqa: E402
from backend.engine.rundir import read_metrics  # noqa: E402
from backend.runs.train import prepare_runs, train_run  # noqa: E402

BASE_SHAPED = [  # ModernBERT-base's shape, the bundled tokenizer's vocabulary
    "model.name=from_scratch", "model.tokenizer=detour-tiny-en", "recipe=pretrain", "train.seq_len=128",
    "train.batch_size=2", "model.from_scratch={model_type: modernbert, hidden_size: 768, intermediate_size: 1152, "
    "num_hidden_layers: 22, num_attention_heads: 12, max_position_embeddings: 512, global_attn_every_n_layers: 3, "
    "local_attention: 128}",
]  # fmt: skip


def one_run(model: str, steps: int, every: int, background: bool, root: Path, name: str, base: bool) -> dict:
    checkpoint.BACKGROUND = background
    stalls: list[float] = []
    real_save = checkpoint.Checkpointer.save

    def timed_save(self, step, state):
        t0 = time.perf_counter()
        out = real_save(self, step, state)
        if step < steps:  # the end of the phase waits for its write anyway
            stalls.append(time.perf_counter() - t0)
        return out

    checkpoint.Checkpointer.save = timed_save
    cfg = load_config(None, [
        f"name={name}", f"model.name={model}", "recipe=mlm", "train.seq_len=256", "train.batch_size=16",
        "train.precision=fp32", f"phases.main.steps={steps}", "phases.decay.steps=0", "phases.decay.fraction=0",
        "logging.log_every=1", f"logging.eval_every={10 * steps}", "logging.eval_batches=1",
        f"logging.checkpoint_every={every}", "logging.keep_checkpoints=2", *(BASE_SHAPED if base else []),
    ])  # fmt: skip
    (run,) = prepare_runs(cfg, root=root)
    try:
        assert train_run(run)["state"] == "done"
    finally:
        checkpoint.Checkpointer.save = real_save
    rows = {r["step"]: r["time"] for r in read_metrics(run) if r["type"] == "train"}
    # interval k -> k+1: step k+1's training, plus the checkpoint of step k when there was one; the last
    # checkpoint (end of the phase) is waited for by design and is left out with step 1 (warm-up)
    saving = [rows[k + 1] - rows[k] for k in range(every, steps, every)]
    plain = [rows[k + 1] - rows[k] for k in range(2, steps) if k % every]
    newest = sorted((run / "checkpoints").glob("step-*"))[-1]
    size = sum(f.stat().st_size for f in newest.rglob("*") if f.is_file()) / 1e6
    step, save_step = statistics.median(plain), statistics.median(saving)
    span = rows[steps] - rows[2]
    return {
        "background": background,
        "stall_s": statistics.median(stalls),
        "plain_step_s": step,
        "saving_step_s": save_step,
        "run_s": span,
        "overhead_per_checkpoint_s": (span - step * (steps - 2)) / len(saving),
        "checkpoints": len(saving),
        "checkpoint_mb": size,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="detour-tiny-en")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--every", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--base-shaped", action="store_true", help="a ModernBERT-base-shaped model, batch 2 x 128")
    a = p.parse_args()
    what = "ModernBERT-base-shaped from scratch (pretrain), batch 2 x 128" if a.base_shaped else (
        f"{a.model} (MLM, batch 16 x 256)")  # fmt: skip
    out: dict[str, list] = {"synchronous": [], "background": []}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["DETOUR_RUNS_DIR"] = str(Path(tmp) / "runs")
        for i in range(a.repeats):
            for label in out:
                r = one_run(a.model, a.steps, a.every, label == "background", Path(tmp) / "runs", f"{label}-{i}",
                            a.base_shaped)  # fmt: skip
                out[label].append(r)
                print(label, r, flush=True)
    med = {label: {k: statistics.median(r[k] for r in rs) for k in rs[0] if k != "background"} for label, rs in
           out.items()}  # fmt: skip
    load = os.getloadavg()[0]
    table = "\n".join([
        f"Checkpoint stall, {what}, fp32, checkpoint every {a.every} of {a.steps} steps, "
        f"{med['background']['checkpoint_mb']:.0f} MB each, {torch.get_num_threads()} threads on {cpu_name()}, "
        f"load average {load:.1f} (shared machine); medians of {a.repeats} runs each",
        "",
        "| checkpoints written | stall (training thread in save) | step that saves | plain step | "
        "run time beyond plain steps, per checkpoint |",
        "|---|---|---|---|---|",
        *[f"| {label} | {m['stall_s']:.3f} s | {m['saving_step_s']:.2f} s | {m['plain_step_s']:.2f} s | "
          f"{m['overhead_per_checkpoint_s']:.2f} s |" for label, m in med.items()],
    ])  # fmt: skip
    payload = {"model": what, "steps": a.steps, "every": a.every, "load_average": load, "runs": out, "medians": med}
    save("checkpoint-base" if a.base_shaped else "checkpoint", payload, table)


if __name__ == "__main__":
    main()

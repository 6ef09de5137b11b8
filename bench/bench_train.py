"""Training throughput: this engine vs transformers' Trainer, and achieved FLOP/s vs matmul peaks.

    python bench/bench_train.py [--model assets/models/detour-tiny-en] [--steps 30] [--precision auto] [--compile]

Same model, same packed data (the bundled demo corpus), same batch (16 x 256) for both. MLM: ours
projects only masked positions to the vocabulary; the Trainer uses DataCollatorForLanguageModeling
(30%) and full logits. CLM: ours uses causal masks + shifted labels; the Trainer has no causal
switch for an encoder, so its "CLM" row (mlm=False collator) measures full-vocabulary logits on
every token under bidirectional attention: the same arithmetic, not the same objective.
--compile adds this engine with ``train.compile=true`` and the Trainer with ``torch_compile=True``
(steady-state tokens/s: the first logged steps, which include compiling, are skipped for both).
--precision auto (the default) measures what training would use on this machine (``train.precision: auto``):
fp32 on a CPU without native bf16. Achieved FLOP/s are compared with the matmul peak *of that precision*,
measured in the same run (a bf16 peak is never used as the yardstick of an fp32 run, or the reverse).
Results: bench/results/train.json + .md
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import matmul_peak, save  # noqa: E402

from backend.engine.config import load_config  # noqa: E402
from backend.engine.models import load_masked_lm, load_tokenizer  # noqa: E402
from backend.engine.precision import cpu_bf16_probe, resolve_precision  # noqa: E402
from backend.engine.rundir import read_metrics  # noqa: E402
from backend.engine.tokenstore import open_corpus  # noqa: E402
from backend.runs.train import prepare_runs, train_run  # noqa: E402


def train_flops_per_token(config, seq_len: int, labelled_fraction: float) -> float:
    """6 x (matmul params) per token, plus attention scores/values (windowed on local layers), plus the
    vocabulary projection only on labelled positions (forward + backward = 3 x forward)."""
    h, inter, n_layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    per_layer = h * 3 * h + h * h + h * 2 * inter + inter * h  # Wqkv, Wo, Wi (GLU), Wo
    head = h * h  # prediction head dense
    flops = 6 * (n_layers * per_layer + head * labelled_fraction)
    for kind in config.layer_types:
        ctx = seq_len if kind == "full_attention" else min(seq_len, config.local_attention + 1)
        flops += 3 * 2 * 2 * h * ctx  # QK^T and AV, fwd+bwd
    flops += 6 * h * config.vocab_size * labelled_fraction
    return flops


def ours(model: str, objective: str, steps: int, precision: str, root: Path, compile_: bool = False) -> float:
    cfg = load_config(
        None,
        [
            f"name=bench-{objective}{'-compiled' if compile_ else ''}",
            f"train.compile={str(compile_).lower()}",
            f"model.name={model}",
            "data.corpus=demo",
            f"recipe={'clm_detour' if objective == 'clm' else 'mlm'}",
            "train.seq_len=256",
            "train.batch_size=16",
            f"train.precision={precision}",
            f"phases.main.steps={steps}",
            "phases.decay.steps=0",
            "phases.decay.fraction=0",
            "logging.log_every=5",
            f"logging.eval_every={10 * steps}",
            f"logging.checkpoint_every={10 * steps}",
            "logging.eval_batches=1",
        ],
    )
    (run,) = prepare_runs(cfg, root=root)
    train_run(run)
    rows = [r for r in read_metrics(run) if r["type"] == "train"][1:-1]  # skip warm-up and the phase-end row
    return sum(r["tokens_per_s"] for r in rows) / len(rows)


def hf_trainer(model: str, objective: str, steps: int, precision: str, out: Path, compile_: bool = False) -> float:
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainerCallback, TrainingArguments

    tok = load_tokenizer(model)
    train, _, _ = open_corpus(load_config(None)["data"], tok, 256)
    ds = [{"input_ids": ids} for ids in train.rows(torch.arange(min(len(train), 16 * steps + 16)))[0]]
    collator = DataCollatorForLanguageModeling(tok, mlm=objective == "mlm", mlm_probability=0.30)
    times = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter())

    args = TrainingArguments(
        output_dir=str(out),
        per_device_train_batch_size=16,
        max_steps=steps,
        learning_rate=2e-4,
        weight_decay=1e-5 / 2e-4,
        adam_beta2=0.98,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        bf16=precision == "bf16",
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=0,
        torch_compile=compile_,
    )
    m = load_masked_lm(model)
    Trainer(model=m, args=args, train_dataset=ds, data_collator=collator, callbacks=[Clock()]).train()
    skip = 5
    return (len(times) - 1 - skip) * 16 * 256 / (times[-1] - times[skip])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="detour-tiny-en")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    p.add_argument("--compile", action="store_true", help="also measure both sides with torch.compile")
    a = p.parse_args()
    if a.steps < 15:
        p.error("--steps must be at least 15: tokens/s is averaged over logged steps 10, 15, ... (step 5 compiles)")
    config = load_masked_lm(a.model).config
    precision, why = resolve_precision(a.precision, "cpu")
    probe = cpu_bf16_probe()
    slow = precision == "bf16" and probe["bf16_speedup"] < 1  # a 2048^2 bf16 matmul would take ~10 s here
    peak = matmul_peak(torch.bfloat16 if precision == "bf16" else torch.float32, n=512 if slow else 2048)
    modes = [False, True] if a.compile else [False]
    rows: list[str] = []
    payload = {
        "model": a.model,
        "batch": "16 x 256",
        "steps": a.steps,
        "precision_requested": a.precision,
        "precision": precision,
        "precision_reason": why,
        "cpu_bf16_probe": probe,
        "matmul_peak_gflops": {precision: peak},
        "results": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for objective in ("mlm", "clm"):
            frac = 0.30 if objective == "mlm" else 1.0
            flops = train_flops_per_token(config, 256, frac)
            t_hf = hf_trainer(a.model, objective, a.steps, precision, Path(tmp) / f"hf-{objective}")
            for comp in modes:
                key = objective + ("-compiled" if comp else "")
                t_ours = ours(a.model, objective, a.steps, precision, Path(tmp) / "runs", comp)
                t_hf_same = (
                    hf_trainer(a.model, objective, a.steps, precision, Path(tmp) / f"hf-{key}", True) if comp else t_hf
                )
                gflops = flops * t_ours / 1e9
                payload["results"][key] = {
                    "ours_tokens_per_s": t_ours,
                    "trainer_tokens_per_s": t_hf,
                    "speedup": t_ours / t_hf,
                    "trainer_compiled_tokens_per_s": t_hf_same if comp else None,
                    "speedup_vs_compiled_trainer": t_ours / t_hf_same if comp else None,
                    "ours_gflops": gflops,
                    f"fraction_of_{precision}_peak": gflops / peak,
                    "flops_per_token": flops,
                }
                vs_comp = f"{t_hf_same:,.0f} ({t_ours / t_hf_same:.2f}x)" if comp else "-"
                rows.append(
                    f"| {key} | {t_ours:,.0f} | {t_hf:,.0f} | {t_ours / t_hf:.2f}x | {vs_comp} | {gflops:.1f} | "
                    f"{100 * gflops / peak:.0f}% |"
                )
    table = "\n".join(
        [
            f"Training throughput, {a.model}, batch 16 x 256, {precision} ({why}), {torch.get_num_threads()} "
            f"threads on {probe['cpu']}; {precision} matmul peak {peak:.0f} GFLOP/s",
            "",
            "| objective | ours tok/s | Trainer tok/s | speedup | compiled Trainer tok/s (ours/it) | ours GFLOP/s "
            f"| % {precision} peak |",
            "|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    save("train", payload, table)


if __name__ == "__main__":
    main()

"""Training throughput: this engine vs transformers' Trainer, and achieved FLOP/s vs matmul peaks.

    python bench/bench_train.py [--model assets/models/detour-tiny-en] [--steps 30] [--precision auto] [--compile]
                                [--rounds 3]

Same model, same packed data (the bundled demo corpus), same batch (16 x 256) for both. MLM: ours
projects only masked positions to the vocabulary; the Trainer uses DataCollatorForLanguageModeling
(30%) and full logits. CLM: ours uses causal masks + shifted labels; the Trainer has no causal
switch for an encoder, so its "CLM" row (mlm=False collator) measures full-vocabulary logits on
every token under bidirectional attention: the same arithmetic, not the same objective. The Trainer's dataset is the
corpus's rows cycled to whole batches, and its tokens/s counts the tokens of the batches its collator made (a last
short batch of an epoch was once counted as full: ``trainer_rows``).
--compile adds this engine with ``train.compile=true`` and the Trainer with ``torch_compile=True``
(steady-state tokens/s: the first logged steps, which include compiling, are skipped for both).
--precision auto (the default) measures what training would use on this machine (``train.precision: auto``):
fp32 on a CPU without native bf16. Achieved FLOP/s are compared with the matmul peak *of that precision* (a bf16
peak is never used as the yardstick of an fp32 run, or the reverse): the one training uses
(``engine/throughput.peak_flops``: the best of this machine's probes, cached, raised by any faster run), so the
fraction cannot exceed 100%. Beside it, the matmul rate at the model's own shapes (``shape_matmul_rate``: every
Linear of the step at 16 x 256 rows, the vocabulary projection at the labelled rows) and the fraction of it each side
reaches: the gap to the hardware, not only to the Trainer. --first ours opens round 0 with this engine instead of
the Trainer.
--rounds N alternates the two sides N times per objective (Trainer then ours, ours then Trainer, ...) and reports
the median of the per-round ratios: on a shared machine the load moves within minutes, and a ratio of two
measurements taken a minute apart is the load's as much as the code's. The load average is recorded, and so are the
CPU's speed flags (AVX2, AVX-512, AVX512-BF16, AMX: ``machine.cpu_flags``), so that results of the two CPU kinds
are never compared as one.
SIGTERM and Ctrl-C end the bench (within a training step): the training loop's own handler, which asks a run to
stop at the next step and then returns, is replaced by the bench's after each of its runs.
Results: bench/results/<--name, default train>.json + .md (--results DIR writes elsewhere)
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS, save  # noqa: E402

from backend.core.machine import cpu_speed_flags  # noqa: E402
from backend.engine.config import load_config  # noqa: E402
from backend.engine.models import load_masked_lm, load_tokenizer  # noqa: E402
from backend.engine.precision import cpu_bf16_probe, resolve_precision  # noqa: E402
from backend.engine.rundir import read_metrics  # noqa: E402
from backend.engine.throughput import bounded_mfu, flops_per_token, peak_flops  # noqa: E402
from backend.engine.tokenstore import open_corpus  # noqa: E402
from backend.runs.train import prepare_runs, train_run  # noqa: E402


def _end_on_signals() -> None:
    """SIGTERM / SIGINT end the bench: SystemExit(143) / KeyboardInterrupt wherever it is (the HF Trainer too)."""

    def end(signum, frame):
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, end)


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
    train_run(run)  # installs its stop flag: a signal makes the run stop at the next step and return
    flag = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
    _end_on_signals()
    if getattr(flag, "signal", None):
        raise SystemExit(f"bench_train: stopped by {flag.signal}")
    rows = [r for r in read_metrics(run) if r["type"] == "train"][1:-1]  # skip warm-up and the phase-end row
    return sum(r["tokens_per_s"] for r in rows) / len(rows)


def trainer_rows(n_rows: int, steps: int, batch: int = 16) -> torch.Tensor:
    """Row indices for the Trainer's dataset: ``steps + 1`` full batches, the corpus's rows cycled. The demo corpus
    has 161 rows of 256 tokens: taken once, the Trainer's epoch ended on a batch of 1 row, which the clock counted as
    16 (one step of nine timed ones nearly free): the Trainer read ~12% faster than it was (CLM 0.91x / MLM 1.20x
    where step for step it is 1.01x / 1.35x)."""
    return torch.arange(batch * (steps + 1)) % n_rows


def hf_trainer(model: str, objective: str, steps: int, precision: str, out: Path, compile_: bool = False) -> float:
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainerCallback, TrainingArguments

    tok = load_tokenizer(model)
    train, _, _ = open_corpus(load_config(None)["data"], tok, 256)
    ds = [{"input_ids": ids} for ids in train.rows(trainer_rows(len(train), steps))[0]]
    lm_collator = DataCollatorForLanguageModeling(tok, mlm=objective == "mlm", mlm_probability=0.30)
    times, batches = [], []  # the end of each step; the tokens of each batch the collator made, in order

    def collator(rows):
        out = lm_collator(rows)
        batches.append(out["input_ids"].numel())
        return out

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
    # the tokens of the steps timed (skip + 2 .. the last), as the collator made them; the loader may have made one
    # batch ahead, so the first batches line up with the first steps
    return sum(batches[skip + 1 : len(times)]) / (times[-1] - times[skip])


def shape_matmul_rate(config, tokens: int, labelled_fraction: float, precision: str, reps: int = 5) -> float:
    """FLOP/s this CPU reaches on the step's own matrix products (forward shapes of every Linear and the vocabulary
    projection at ``tokens`` rows, FLOP-weighted, best of ``reps``): the ceiling a step made of these products could
    reach here. A 4096^2 probe says what the cores can do; this says what the model's small shapes let them do, so
    the gap to the hardware and the gap to the Trainer are not confused."""
    h, inter = config.hidden_size, config.intermediate_size
    layers, vocab = config.num_hidden_layers, config.vocab_size
    labelled = max(1, int(tokens * labelled_fraction))
    shapes = [(tokens, h, 3 * h), (tokens, h, h), (tokens, h, 2 * inter), (tokens, inter, h)] * layers
    shapes += [(labelled, h, h), (labelled, h, vocab)]
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    flops, seconds = 0.0, 0.0
    for m, k, n in dict.fromkeys(shapes):  # each distinct shape timed once, weighted by how often the step runs it
        count = shapes.count((m, k, n))
        a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
        a @ b
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - t0)
        flops += count * 2 * m * k * n
        seconds += count * best
    return flops / seconds


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="detour-tiny-en")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    p.add_argument("--compile", action="store_true", help="also measure both sides with torch.compile")
    p.add_argument("--rounds", type=int, default=3, help="interleaved Trainer/ours measurements per objective")
    p.add_argument("--first", default="hf", choices=["hf", "ours"], help="the side that opens round 0")
    p.add_argument("--name", default="train", help="result file name (bench/results/NAME.json + .md)")
    p.add_argument("--results", type=Path, default=RESULTS, help="folder of the result files")
    a = p.parse_args()
    _end_on_signals()
    load_start = os.getloadavg()
    if a.steps < 15:
        p.error("--steps must be at least 15: tokens/s is averaged over logged steps 10, 15, ... (step 5 compiles)")
    config = load_masked_lm(a.model).config
    precision, why = resolve_precision(a.precision, "cpu")
    probe = cpu_bf16_probe()
    peak_rate, peak_source = peak_flops(precision, "cpu")
    peak = peak_rate / 1e9
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
        "matmul_peak_source": peak_source,
        "results": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for objective in ("mlm", "clm"):
            frac = 0.30 if objective == "mlm" else 1.0
            flops = flops_per_token(config, 256, frac)
            shape_rate = shape_matmul_rate(config, 16 * 256, frac, precision)
            rounds = []
            for r in range(a.rounds):  # alternate who goes first: both sides meet the same load
                pair = {}
                order = ("hf", "ours") if a.first == "hf" else ("ours", "hf")
                for side in order if r % 2 == 0 else order[::-1]:
                    if side == "hf":
                        pair[side] = hf_trainer(
                            a.model, objective, a.steps, precision, Path(tmp) / f"hf-{objective}-{r}"
                        )
                    else:
                        pair[side] = ours(a.model, objective, a.steps, precision, Path(tmp) / f"runs{r}", False)
                pair["ratio"] = pair["ours"] / pair["hf"]
                pair["loadavg"] = os.getloadavg()[0]
                rounds.append(pair)
                print(f"{objective} round {r}: {pair}", flush=True)
            t_hf = statistics.median(p["hf"] for p in rounds)
            for comp in modes:
                key = objective + ("-compiled" if comp else "")
                t_ours = (
                    ours(a.model, objective, a.steps, precision, Path(tmp) / "runs-c", comp)
                    if comp
                    else statistics.median(p["ours"] for p in rounds)
                )
                ratio = statistics.median(p["ratio"] for p in rounds) if not comp else t_ours / t_hf
                t_hf_same = (
                    hf_trainer(a.model, objective, a.steps, precision, Path(tmp) / f"hf-{key}", True) if comp else t_hf
                )
                fraction, (peak_rate, peak_source) = bounded_mfu(
                    flops * t_ours, (peak_rate, peak_source), precision, "cpu", f"bench_train {key}"
                )
                gflops, peak = flops * t_ours / 1e9, peak_rate / 1e9
                payload["results"][key] = {
                    "ours_tokens_per_s": t_ours,
                    "trainer_tokens_per_s": t_hf,
                    "speedup": ratio,
                    "rounds": rounds if not comp else None,
                    "trainer_compiled_tokens_per_s": t_hf_same if comp else None,
                    "speedup_vs_compiled_trainer": t_ours / t_hf_same if comp else None,
                    "ours_gflops": gflops,
                    f"fraction_of_{precision}_peak": fraction,
                    "peak_gflops": peak,
                    "peak_source": peak_source,
                    "flops_per_token": flops,
                    "shape_matmul_gflops": shape_rate / 1e9,
                    "fraction_of_shape_matmul_rate": flops * t_ours / shape_rate,
                    "trainer_fraction_of_shape_matmul_rate": flops * t_hf / shape_rate,
                }
                vs_comp = f"{t_hf_same:,.0f} ({t_ours / t_hf_same:.2f}x)" if comp else "-"
                rows.append(
                    f"| {key} | {t_ours:,.0f} | {t_hf:,.0f} | {ratio:.2f}x | {vs_comp} | {gflops:.1f} | "
                    f"{100 * fraction:.0f}% | {shape_rate / 1e9:.0f} | {100 * flops * t_ours / shape_rate:.0f}% / "
                    f"{100 * flops * t_hf / shape_rate:.0f}% |"
                )
    payload["loadavg"] = {"start": load_start, "end": os.getloadavg()}
    table = "\n".join(
        [
            f"Training throughput, {a.model}, batch 16 x 256, {precision} ({why}), {torch.get_num_threads()} "
            f"threads on {probe['cpu']} (flags: {', '.join(cpu_speed_flags()) or 'none of AVX2/AVX-512/AMX'}); "
            f"{precision} matmul peak {peak:.0f} GFLOP/s ({peak_source}); {a.rounds} interleaved rounds, "
            f"speedup = median of the rounds' ratios; 1-min load average {load_start[0]:.1f} at the start, "
            f"{os.getloadavg()[0]:.1f} at the end",
            "",
            "| objective | ours tok/s | Trainer tok/s | speedup | compiled Trainer tok/s (ours/it) | ours GFLOP/s "
            f"| % {precision} peak | matmul GFLOP/s at the step's shapes | % of it (ours / Trainer) |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    save(a.name, payload, table, a.results)


if __name__ == "__main__":
    main()

"""``python -m backend evaluate --models A B --task ner --seeds 5 [--out DIR]``: fine-tune each model with each
seed, score on test, and compare the models pairwise (mean paired difference, 95% CIs, wins over seeds).
``--suite SUITE.yaml`` instead of --task/--data: every task of a suite (``backend/evaluation/suite.py``), and a
report that pools them (models x tasks table, aggregate panel, verdict over the suite)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from backend.core import faults
from backend.core.errors import ConfigError
from backend.engine.schema import PRECISIONS


def _seeds(value: str):
    try:
        if "," in value:
            return [int(v) for v in value.split(",") if v.strip()]
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}': give a count (5) or a comma-separated list (0,1,2)") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--models",
        nargs="+",
        required=True,
        metavar="MODEL",
        help="run directories, checkpoints, bundled model names, local model folders or hub ids",
    )
    p.add_argument("--labels", nargs="+", metavar="LABEL", help="display names, one per model (default: the specs)")
    p.add_argument(
        "--suite",
        metavar="SUITE.yaml",
        help="a task suite (e.g. configs/suites/bio-ner.yaml) instead of --task/--data; settings given here "
        "(--seeds, --epochs, example caps ...) replace the suite's for every task",
    )
    p.add_argument("--task", choices=["ner", "classification"], help="default ner")
    p.add_argument(
        "--data",
        help="NER: folder of train/dev/test IOB files or a hub dataset (default: the bundled "
        "demo set assets/demo/ner); classification: folder of train/dev/test "
        "CSV/TSV/JSONL/parquet or a hub dataset",
    )
    p.add_argument("--seeds", type=_seeds, help="number of seeds (0..N-1) or a list like 0,1,2 (default 5)")
    p.add_argument("--out", help="output folder (default evals/<timestamp>); rerun with the same folder to resume")
    p.add_argument("--plan", action="store_true", help="with --suite: the fine-tunes, their time here and the smallest "
                   "difference between two of the models it can detect; run nothing")  # fmt: skip
    g = p.add_argument_group("fine-tuning (defaults: the paper's protocol)")
    g.add_argument("--epochs", type=int, help="default 20 for ner, 10 for classification")
    g.add_argument("--lr", type=float, help="default by size: 1e-3 under 50M parameters, else 5e-5 (the paper's)")
    g.add_argument("--weight-decay", type=float, help="default 0.01")
    g.add_argument("--batch-size", type=int, help="default 16")
    g.add_argument(
        "--max-len",
        type=int,
        help="tokens per input (default 256 ner, 512 classification; clamped "
        "to the model's limit); longer NER sentences are split into windows",
    )
    g.add_argument("--warmup-ratio", type=float, help="linear warmup fraction (default 0.1)")
    g.add_argument("--max-train-examples", type=int, help="use a fixed random subset of train (quick checks)")
    g.add_argument("--max-eval-examples", type=int, help="use a fixed random subset of dev and test (quick checks)")
    g.add_argument(
        "--metric",
        help="model selection / comparison metric (ner: f1 | macro_f1 | token_accuracy; "
        "classification: macro_f1 | micro_f1 | accuracy)",
    )
    c = p.add_argument_group("data columns")
    c.add_argument("--text-column", default="text")
    c.add_argument("--label-column", default="label")
    c.add_argument("--label-separator", help="multi-label: labels in one string split by this (e.g. '|')")
    c.add_argument("--tokens-column", default="tokens", help="NER hub datasets (default tokens)")
    c.add_argument("--tags-column", help="NER hub datasets (default: ner_tags, tags or labels)")
    p.add_argument("--no-keep-models", action="store_true", help="do not save the fine-tuned models (metrics only)")
    p.add_argument("--trust-remote-code", action="store_true", help="allow custom model code from the hub")
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="auto",
        help="as train.precision: auto (default) is bf16 on a CUDA GPU with bf16 and on CPUs where bf16 is really "
        "faster, else fp32; fp16 needs a GPU",
    )
    p.add_argument("--mixed-precision", help=argparse.SUPPRESS)  # the old name: refused with the new one's values
    p.add_argument(
        "--report-to",
        help="experiment trackers that also get each seed's scores and the summary, comma-separated: tensorboard, "
        "trackio, wandb, mlflow (TensorBoard files go under OUT/trackers/tensorboard/)",
    )


def run(args) -> int:
    from backend.evaluation.runner import evaluate_models

    if args.labels and len(args.labels) != len(args.models):
        raise ConfigError("labels", args.labels, f"give one label per model ({len(args.models)})")
    if args.plan and not args.suite:
        raise ConfigError("plan", True, "--plan plans a suite: give --suite SUITE.yaml")
    if args.suite:
        return _run_suite(args)
    args.task = args.task or "ner"
    if args.task == "ner" and args.label_separator:
        raise ConfigError("label-separator", args.label_separator, "only for --task classification")
    if args.mixed_precision is not None:
        raise ConfigError(
            "mixed-precision", args.mixed_precision, "renamed --precision: auto | fp32 | bf16 | fp16 (no is fp32)"
        )
    results = evaluate_models(
        args.models,
        args.task,
        args.data,
        5 if args.seeds is None else args.seeds,
        args.out,
        labels=args.labels,
        text_column=args.text_column,
        label_column=args.label_column,
        label_separator=args.label_separator,
        tokens_column=args.tokens_column,
        tags_column=args.tags_column,
        trust_remote_code=args.trust_remote_code,
        keep_models=not args.no_keep_models,
        precision=args.precision,
        report_to=args.report_to,
        epochs=args.epochs,
        lr=args.lr,
        weight_decay=args.weight_decay,
        batch_size=args.batch_size,
        max_len=args.max_len,
        warmup_ratio=args.warmup_ratio,
        max_train_examples=args.max_train_examples,
        max_eval_examples=args.max_eval_examples,
        metric=args.metric,
    )
    print()
    print((Path(results["out_dir"]) / "results.md").read_text())
    print(f"results: {results['out_dir']}/results.json")
    if results["failures"]:
        print(f"{len(results['failures'])} run(s) failed; see the table above", flush=True)
        # every seed failed on a fault of the machine (a full disk): the rule's one line and exit 2, what to do
        found = {faults.machine_fault(Exception(str(f.get("error", "")))) for f in results["failures"]}
        if len(found) == 1 and (number := found.pop()):
            print(
                f"error: {os.strerror(number).lower()} in {results['out_dir']}; {faults.hint(number)}", file=sys.stderr
            )
            return 2
        return 1
    return 0


COLUMN_FLAGS = ("text_column", "label_column", "label_separator", "tokens_column", "tags_column")
SETTING_FLAGS = ("epochs", "lr", "weight_decay", "batch_size", "max_len", "warmup_ratio", "max_train_examples",
                 "max_eval_examples", "metric")  # fmt: skip


def _run_suite(args) -> int:
    from backend.evaluation.suite import evaluate_suite

    given = [f"--{k}" for k in ("task", "data") if getattr(args, k)]
    given += [
        f"--{k.replace('_', '-')}" for k in COLUMN_FLAGS if getattr(args, k) not in (None, "text", "label", "tokens")
    ]
    if given:
        raise ConfigError(
            "suite", args.suite, f"{', '.join(given)} belong in the suite file's tasks, not beside --suite"
        )
    if args.mixed_precision is not None:
        raise ConfigError("mixed-precision", args.mixed_precision, "renamed --precision: auto | fp32 | bf16 | fp16")
    overrides = {k: getattr(args, k) for k in SETTING_FLAGS} | {"seeds": args.seeds}
    if args.plan:
        return _plan_suite(args, overrides)
    rep = evaluate_suite(
        args.suite,
        args.models,
        args.out,
        labels=args.labels,
        overrides=overrides,
        trust_remote_code=args.trust_remote_code,
        keep_models=not args.no_keep_models,
        precision=args.precision,
        report_to=args.report_to,
    )
    out = Path(rep["out"])
    print()
    print((out / "suite.md").read_text())
    print(f"suite report: {out}/suite.md, suite.html, suite.json; figures in {out}/figures")
    if rep.get("leaderboard"):
        from backend.evaluation.leaderboard_report import summary_lines

        print("\n".join(summary_lines(rep["leaderboard"])))
    if rep["figures"].get("png_error"):
        print(f"note: {rep['figures']['png_error']}")
    failed = sum(len(c["stability"]["failed"]) + len(c["stability"]["diverged"]) for c in rep["cells"].values())
    if failed:
        print(f"{failed} run(s) failed; see each task's results.md under {out}/tasks", flush=True)
        return 1
    return 0


def _plan_suite(args, overrides: dict) -> int:
    """``--suite ... --plan``: the fine-tunes, their time here, and the smallest difference it can detect."""
    from backend.engine.progress import hms
    from backend.evaluation.runner import check_models
    from backend.evaluation.suite import load_suite
    from backend.evaluation.suite_power import planned_tasks, text

    suite = load_suite(args.suite)
    tasks = planned_tasks(suite, overrides)
    check_models(args.models, args.labels)  # a model that is not there, or one twice: refused as the run refuses it
    n = len(args.models) * sum(t["seeds"] for t in tasks)
    print(f"suite {suite['name']}: {len(tasks)} tasks x {len(args.models)} models; {n} fine-tunes")
    for t in tasks:
        st = ", ".join(f"{k} {v}" for k, v in t["settings"].items() if v is not None)
        print(f"  {t['name']}: {t['seeds']} seeds; {st}")
    try:
        from backend.engine.models import model_config_of
        from backend.replication.study_time import device, finetune_seconds
        from backend.runs.doctor import parameter_count

        size = parameter_count(model_config_of({"name": args.models[0]}))
        ft = finetune_seconds([{**t["settings"], "epochs": t["settings"]["epochs"]} for t in tasks], size, device())
        print(f"  time: ~{hms(n * ft['seconds'])} ({ft['text']})")
    except Exception as exc:  # noqa: BLE001 - a model this process cannot size: the plan says so, nothing fails
        print(f"  time: not estimated ({type(exc).__name__}: {exc})")
    from backend.evaluation.suite_power import plan_power

    command = f"python -m backend evaluate --suite {args.suite} --models A B"
    print(f"  power: {text(plan_power(tasks), command)}")
    return 0

"""``python -m backend sweep``: a grid of matched runs over one or two config keys x seeds, with a report.

Examples::

    python -m backend sweep configs/pretrain_tiny_en.yaml --grid phases.main.tokens=20000,40000 \\
        --grid recipe=clm_detour,mlm --seeds 3 --wait            # -> sweeps/<name>/report.md|html|json
    python -m backend sweep ... --eval ner --eval-data ../shared/data/ncbi_disease --eval-seeds 3 --wait
    python -m backend sweep ... --eval-suite configs/suites/bio-ner.yaml --seeds 5 --plan   # time and power, no run
    python -m backend sweep --resume sweeps/NAME --wait          # after a crash or kill: re-queue what is left
    python -m backend sweep --cancel sweeps/NAME
    python -m backend sweep --status sweeps/NAME
    python -m backend sweep --report sweeps/NAME [--wait]        # (wait,) measure what finished, write the report
"""

from __future__ import annotations

import argparse
from pathlib import Path

from backend.commands import add_overrides, add_slurm_arguments, slurm_overrides
from backend.sweeps.bound import MAX_RUNS


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", help="YAML config every cell starts from (default: the defaults)")
    add_overrides(p, "override a key in every cell, e.g. train.lr=1e-4 (repeatable)")
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="an axis: any config key and its values (at most two; the first is the x axis, the second the lines)",
    )
    p.add_argument("--seeds", type=int, default=1, help="seeds per cell (train.seed, train.seed+1, ...)")
    p.add_argument("--name", help="sweep name (default: config name + axis names)")
    p.add_argument("--out", help="sweep folder (default sweeps/<name>, root $DETOUR_SWEEPS_DIR)")
    p.add_argument("--reference", help="first-axis value the others are compared with (default: its first value)")
    p.add_argument("--wait", action="store_true", help="wait for every cell, evaluate and write the report")
    p.add_argument(
        "--max-concurrent", type=int, help="cells training at once (default: one per GPU on a GPU box, else 1)"
    )
    p.add_argument(
        "--pin-gpus",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="one cell per GPU, each pinned with CUDA_VISIBLE_DEVICES (default: on where there are GPUs)",
    )
    p.add_argument(
        "--max-runs",
        type=int,
        default=None,
        help=f"the most runs (cells x seeds) this sweep may queue (default {MAX_RUNS}); a larger grid is refused, "
        "saying its size, until you raise this on purpose",
    )
    p.add_argument(
        "--allow-unmatched-budget",
        action="store_true",
        help="queue a grid whose cells do not all train the same tokens (refused by default)",
    )
    p.add_argument("--executor", choices=["queue", "local", "slurm"], default="queue", help="queue (default), "
                   "slurm (one Slurm job per cell through submitit) or local (submitit's local executor)")  # fmt: skip
    add_slurm_arguments(p)
    p.add_argument("--eval", choices=["ner", "classification"], help="fine-tune every cell on this task")
    p.add_argument("--eval-data", help="the task's data folder (train/dev/test)")
    p.add_argument("--eval-seeds", type=int, default=3, help="fine-tuning seeds per cell")
    p.add_argument(
        "--eval-suite",
        metavar="SUITE.yaml",
        help="also fine-tune every run on each task of this suite (configs/suites/...); the report pools them",
    )
    p.add_argument(
        "--eval-set", action="append", default=[], metavar="KEY=VALUE", help="fine-tuning setting: epochs=2, lr=..."
    )
    p.add_argument("--cka-texts", help="held-out texts: CKA divergence of every cell from the reference cell")
    p.add_argument(
        "--cka-measure", choices=["debiased", "linear", "procrustes"], help="similarity (default debiased CKA)"
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument("--plan", action="store_true", help="print the cells, the time here and the smallest difference the "
                   "sweep can detect against its reference; queue nothing")  # fmt: skip
    g.add_argument("--resume", metavar="DIR", help="re-queue what the sweep in DIR left unfinished")
    g.add_argument("--cancel", metavar="DIR", help="cancel the queued and running cells of the sweep in DIR")
    g.add_argument("--status", metavar="DIR", help="print the cells and their states")
    g.add_argument("--report", metavar="DIR", help="measure the finished cells and rewrite the report")


def _print_report(rep: dict) -> None:
    from backend.sweeps.report import render_markdown

    print(render_markdown(rep))
    print(f"report: {Path(rep['out']) / 'report.md'} (and report.html, report.json, figures/)")


def _print_status(st: dict) -> None:
    from backend.sweeps.cluster import runs_line

    print(f"{st['name']} ({st.get('state')}): {st['out']}")
    print(st["summary"])
    for c in st["cells"]:
        print(f"  {c['label']:<40} {c['tokens']:>12,} tokens  " + runs_line(c))


def _evaluation(args) -> dict:
    from backend.engine.config import parse_override

    return {
        "task": args.eval,
        "data": args.eval_data,
        "seeds": args.eval_seeds,
        "hparams": dict(parse_override(s) for s in args.eval_set),
        "cka_texts": args.cka_texts,
        "cka_measure": args.cka_measure,
        "suite": args.eval_suite,
    }


def run(args: argparse.Namespace) -> int:
    from backend.core.errors import DetourError
    from backend.sweeps import sweep

    for flag in ("--cancel", "--report", "--resume", "--status"):
        if (value := getattr(args, flag[2:])) is not None and not value.strip():  # was taken as not given
            raise DetourError(f"{flag} is empty: give the sweep's folder, e.g. {flag} sweeps/NAME")
    for flag, given in (("--cancel", args.cancel), ("--report", args.report), ("--resume", args.resume)):
        if given:  # each writes into DIR: a sweep's own folder, not a link to one
            sweep.read_manifest(given)  # "not a sweep folder" first: the plainer line
            sweep.check_out(given, flag)
    if args.cancel:
        for msg in sweep.cancel(args.cancel):
            print(msg)
        return 0
    if args.status:
        _print_status(sweep.sweep_status(args.status))
        return 0
    if args.report:  # with --wait: wait for the cells first (what the app's detached waiter runs)
        if args.wait:
            sweep.wait(args.report, progress=lambda st: print(f"{st['name']}: {sweep._counts_line(st['counts'])}"))
        _print_report(sweep.finish(args.report))
        return 0
    left = None
    if args.resume:
        from backend.sweeps.manifest import resume_line, to_resume

        m, out, left = sweep.read_manifest(args.resume), args.resume, to_resume(args.resume)
        if not left:  # every run done or still running: said so, not "queued N runs"
            print(resume_line(out, left))
            if not args.wait:
                return 0
    else:
        if args.out:  # a file, or a folder inside a run: refused before planning validates every cell
            sweep.check_out(args.out)
        m = sweep.plan_sweep(
            args.config,
            [*args.overrides, *slurm_overrides(args)],
            args.grid,
            args.seeds,
            name=args.name,
            reference=args.reference,
            allow_unmatched_budget=args.allow_unmatched_budget,
            evaluation=_evaluation(args),
            executor=args.executor,
            max_concurrent=args.max_concurrent,
            pin_gpus=args.pin_gpus,
            max_runs=MAX_RUNS if args.max_runs is None else args.max_runs,
        )
        out = args.out
        print(m["summary"])
        print_plan(m)  # the grid's size and cost, before anything is queued
        if args.plan:
            return 0
    res = sweep.run_sweep(m, out, wait_for=args.wait)
    if res["report"] is None:
        n = sum(len(c["runs"]) for c in m["cells"]) if left is None else len(left)
        print(f"queued {n} runs in {res['out']}; follow with: python -m backend sweep --status {res['out']}")
        return 0
    _print_report(res["report"])
    return 0 if not res["report"]["not_done"] else 1


def print_plan(m: dict) -> None:
    """``--plan``: the runs, their time here and the smallest difference a cell can show against its reference."""
    from backend.engine.models import model_config_of
    from backend.engine.precision import resolve_precision
    from backend.engine.progress import hms
    from backend.engine.rates import describe
    from backend.replication.study_time import device, finetune_seconds, training
    from backend.runs.doctor import parameter_count
    from backend.sweeps import power_plan, variance

    runs = sum(len(c["runs"]) for c in m["cells"])
    tokens = sum(c["tokens"] * len(c["runs"]) for c in m["cells"])
    print(f"  {len(m['cells'])} cells x {len(m['seeds'])} seeds = {runs} runs, {tokens:,} training tokens")
    ev, t = m["evaluation"], m["base"]["train"]
    dev = device()
    try:
        size = parameter_count(model_config_of(m["base"]["model"]))
        prec = resolve_precision(t["precision"], dev)[0]
        tr = training(size, prec, dev, t["seq_len"], t["batch_size"], tokens, runs, m["max_concurrent"])
    except Exception as exc:  # noqa: BLE001 - a base this process cannot size: the plan says so
        print(f"  time: not estimated ({type(exc).__name__}: {exc})")
        return
    if tr["train_s"] is None:
        print("  time: no training rate measured on this machine yet for this base and precision")
    else:
        print(f"  training: ~{hms(tr['train_s'])} at {tr['rate']:,.0f} tokens/s ({describe(tr['pick'])}; "
              f"{tr['start_text']})")  # fmt: skip
    tasks = variance.finetune_tasks(variance.suite_path(ev.get("suite")), ev.get("hparams") or {}, ev.get("task"),
                                    ev.get("data"))  # fmt: skip
    if not tasks:
        print("  power: no fine-tuning asked (--eval, --eval-suite): the report compares held-out losses only")
        return
    from backend.replication.study_time import suite_tasks

    f = int((ev.get("hparams") or {}).get("seeds") or (min(x["seeds"] for x in suite_tasks(ev["suite"], ev["hparams"]))
                                                      if ev.get("suite") else ev["seeds"]))  # fmt: skip
    n_ft = runs * f * len(tasks)
    ft = finetune_seconds([{**x["settings"]} for x in tasks], size, dev)
    print(f"  fine-tuning: ~{hms(n_ft * ft['seconds'])} ({n_ft} fine-tunes; {ft['text']})")
    p = power_plan.plan_power(tasks, variance.model_label(m["base"]["model"]), len(m["seeds"]), f)
    pilot = "this sweep with --seeds 3 at one value of the second axis"
    print(f"  power (each cell against its reference): {power_plan.text(p, pilot)}")

"""``python -m backend replicate``: the paper's findings at a chosen scale (docs/studies/replication.md).

Examples::

    python -m backend replicate                                # the detour study, quick -> reports/detour-quick
    python -m backend replicate --plan                         # runs, tokens, fine-tunes and the time here; run nothing
    python -m backend replicate --budgets 1e4 1e5 --pretrain-seeds 5 --suite configs/suites/bio-ner.yaml
    python -m backend replicate --preset gpu --out reports/crossover-gpu        # 1M-100M tokens on one GPU
    python -m backend replicate --out reports/detour-quick --report-only
    python -m backend replicate --study hybrid-splits          # the second paper's splits, on the suite
    python -m backend replicate --single-task --preset mini    # the older one-task pipeline (NER, 5 runs)

The detour study (the default) is one sweep: MLM baseline, CLM detour, the seed-noise control (MLM on the same
data order with another seed) and the two freeze interventions x budgets x pretraining seeds x every task of a suite,
with CKA (debiased and linear) of each arm against MLM. The report gives the suite's verdict per budget, the
detour's low-layer divergence against seed noise, the freezes' verdicts, the paper's numbers beside, and between
which budgets the detour's interval first excludes 0 on the other side (or that it does not).

Rerunning the same command resumes: finished runs are kept, an interrupted training resumes from its last
checkpoint, fine-tunes already done are reused.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from backend.commands import add_overrides
from backend.core.catalogue import check_out_folder, claim_folder
from backend.core.errors import DetourError


def add_arguments(p: argparse.ArgumentParser) -> None:
    from backend.replication.budget_study import SUITE
    from backend.replication.plan import PRESETS

    p.add_argument(
        "--study",
        choices=["detour", "hybrid-splits"],
        default="detour",
        help="detour: the CLM detour paper (default); hybrid-splits: the second paper (objective splits from "
        "scratch and the 40%% MLM continuation), built on sweeps",
    )
    from backend.replication.budget_study import BUDGET_PRESETS

    p.add_argument(
        "--preset",
        choices=list(dict.fromkeys([*PRESETS, *BUDGET_PRESETS])),
        default="quick",
        help="the detour study: quick (the default, a CPU demo), standard, gpu, paper; --single-task: quick, mini; "
        "hybrid-splits: quick, mini. --plan estimates the time from this machine's rate",
    )
    p.add_argument(
        "--budgets",
        nargs="+",
        metavar="TOKENS",
        help="token budgets per run (e.g. 1e6 1e7 1e8): the budget becomes an axis of the study and the report "
        "states where the detour's sign changes (the detour study runs on sweeps and a task suite)",
    )
    p.add_argument("--suite", help=f"task suite every run is fine-tuned on (default {SUITE})")
    p.add_argument(
        "--single-task",
        action="store_true",
        help="the older pipelines: the detour study as five runs with NER on one data set (presets quick, mini); "
        "hybrid-splits fine-tuned on one NER set instead of the suite",
    )
    p.add_argument(
        "--no-interventions",
        dest="interventions",
        action="store_false",
        default=None,
        help="the detour study without its seed-noise control and freeze arms (the MLM / detour pair alone)",
    )
    p.add_argument("--pretrain-seeds", type=int, help="pretraining seeds of the budget study (preset default: 3)")
    p.add_argument(
        "--drop-weights",
        action="store_true",
        default=None,
        help="delete each run's weights once measured: the folder keeps only metrics, results and reports "
        "(the gpu and paper presets do this by default)",
    )
    p.add_argument(
        "--cka",
        choices=["debiased", "linear"],
        help="the detour study: one CKA measure instead of both (debiased, the default's first; linear, the "
        "paper's numbers)",
    )
    p.add_argument(
        "--measure-jobs",
        type=int,
        help="budget studies: fine-tune this many runs at once, each in its own process (default 1)",
    )
    p.add_argument("--executor", choices=["queue", "local", "slurm"], default="queue",
                   help="budget study: where its runs train (the sweep's executors)")  # fmt: skip
    p.add_argument("--seeds", type=int, help="fine-tuning seeds per model (preset default: 5)")
    p.add_argument("--out", help="output folder (default reports/<preset>); rerun with the same folder to resume")
    p.add_argument("--model", help="base encoder: bundled name, model folder or run directory (default: bundled)")
    p.add_argument(
        "--corpus", help="domain corpus: a .txt/.jsonl/... file or folder (default ../shared/data/craft_pmc_oa_text)"
    )
    p.add_argument("--ner-data", help="NER folder with train/dev/test .tsv (default ../shared/data/ncbi_disease)")
    add_overrides(p, "override a preset value, e.g. train.main_tokens=30000 or eval.epochs=2 (repeatable)")
    p.add_argument(
        "--plan", action="store_true", help="print the resolved plan, sizes and a time estimate; run nothing"
    )
    p.add_argument("--report-only", action="store_true", help="rebuild the report from what --out holds")


def print_plan(settings: dict, out: Path) -> None:
    from backend.engine.progress import hms
    from backend.replication.plan import LABELS, RUNS, estimate, machine_train_rate, run_names
    from backend.replication.replicate import read_markers
    from backend.replication.steps import build_plan

    t, e, c, L = settings["train"], settings["eval"], settings["cka"], settings["layers"]
    per_step = t["batch_size"] * t["seq_len"]
    print(f"preset {settings['preset']}: {settings.get('description', '')}")
    print(
        f"  base   {settings['model']} ({L['n']} layers; lower third {L['low_range']}, middle third {L['mid_range']})"
    )
    print(f"  corpus {settings['corpus']}")
    print(f"  NER    {settings['ner_data']}")
    print(
        f"  train  {len(RUNS)} runs x {t['main_tokens']:,} main tokens (+{t['decay_fraction']:.0%} decay), "
        f"{t['batch_size']}x{t['seq_len']} = {per_step:,} tokens/step, lr {t['lr']}, {t['precision']}"
    )
    for k, name in run_names().items():
        print(f"         {name:<24} {LABELS[k]}")
    n_models = len(e["models"])
    print(
        f"  NER    {n_models} models ({', '.join(e['models'])}) x {e['seeds']} seeds, {e['epochs']} epochs, "
        f"lr {e['lr']}, {e['max_train_examples']} train / {e['max_eval_examples']} dev+test sentences"
    )
    print(f"  CKA    {c['n_texts']} held-out paragraphs, max_len {c['max_len']}, sampling seeds {c['seeds']}")
    rate = machine_train_rate(settings)  # this machine's measured rate, as the Launch form's estimate
    est = estimate(settings, rate)
    source = (
        f"training at this machine's last measured {rate:,.0f} tokens/s"
        if rate
        else (
            "no training rate measured on this machine yet for this base: training at the plan's fitted 2,300 tokens/s"
        )
    )
    print(
        f"  time   ~{hms(est['total_s'])} (train {hms(est['train_s'])}, NER {hms(est['ner_s'])}, CKA "
        f"{hms(est['cka_s'])}; {source}, fine-tuning and CKA at the plan's rates)"
    )
    done = read_markers(out)
    print(f"  out    {out}")
    for step in build_plan(settings):
        print(f"         {'[done] ' if step.name in done else '       '}{step.name:<18} {step.title}")


def _is_budget_folder(out: str) -> bool:
    import json

    p = Path(out).expanduser() / "settings.json"
    try:
        return json.loads(p.read_text()).get("study") == "detour-budgets"
    except (OSError, ValueError, AttributeError):
        return False


def run_hybrid_study(args: argparse.Namespace) -> int:
    """``--study hybrid-splits``: plan, run (or resume) and report the second paper's study."""
    import json
    import time

    from backend.core.paths import reports_dir
    from backend.replication.hybrid import resolve_hybrid, run_hybrid, write_hybrid_report

    out = Path(args.out).expanduser() if args.out else reports_dir() / f"hybrid-{args.preset}"
    check_out_folder(out, "report", "hybrid-splits")  # anything else there: refused before any work
    if args.report_only:
        rep = write_hybrid_report(out.resolve(), rebuild_sweeps=True)
    else:
        from backend.replication.budget_study import parse_budgets
        from backend.replication.hybrid import HYBRID_PRESETS

        if args.preset not in HYBRID_PRESETS:
            known = ", ".join(HYBRID_PRESETS)
            raise DetourError(f"--preset {args.preset}: the hybrid-splits study's presets are {known}")
        s = resolve_hybrid(
            args.preset,
            corpus=args.corpus,
            ner_data=args.ner_data,
            seeds=args.pretrain_seeds or args.seeds,
            overrides=args.overrides,
            budgets=parse_budgets(args.budgets) if args.budgets else None,
            suite=args.suite,
            drop_weights=args.drop_weights,
            single_task=args.single_task,
        )
        if args.measure_jobs:
            s["measure_jobs"] = max(1, args.measure_jobs)
        if args.plan:
            from backend.replication.hybrid import estimate_text, hybrid_estimate

            print(f"hybrid-splits {args.preset}: {s['description']}")
            print(f"time: {estimate_text(hybrid_estimate(s))}")
            keys = ("arch", "train", "shares", "budgets", "seeds", "eval", "suite", "cpt", "corpus", "ner_data")
            print(json.dumps({k: s[k] for k in keys}, indent=1))
            return 0
        t0 = time.time()
        claim_folder(out, "report", "hybrid-splits")
        rep = run_hybrid(s, out, command=[sys.executable, "-m", "backend", *sys.argv[1:]])
        print(f"wall time {time.time() - t0:.0f} s")
    for f in rep["findings"].values():
        print(f"  {f['title']}: {f['verdict'].upper()}")
    print(f"report: {out / 'report.md'}")
    return 0


SUITE_ONLY = {"--budgets": "budgets", "--suite": "suite", "--pretrain-seeds": "pretrain_seeds", "--cka": "cka",
              "--no-interventions": "interventions", "--drop-weights": "drop_weights",
              "--measure-jobs": "measure_jobs"}  # fmt: skip


def check_flags(args: argparse.Namespace) -> None:
    """A flag the chosen pipeline would not read is refused, never silently dropped."""
    given = [flag for flag, dest in SUITE_ONLY.items() if getattr(args, dest) is not None]
    if args.executor != "queue":
        given.append("--executor")
    if args.study == "detour" and (args.single_task or args.preset == "mini") and given:
        raise DetourError(f"{', '.join(given)}: the detour study on sweeps takes it; the older one-task pipeline "
                          "(--single-task, --preset mini) does not. Leave out --single-task")  # fmt: skip
    if args.study == "hybrid-splits":
        unread = [f for f, v in (("--cka", args.cka), ("--no-interventions", args.interventions),
                                 ("--model", args.model)) if v is not None]  # fmt: skip
        if args.executor != "queue":
            unread.append("--executor")
        if unread:
            raise DetourError(f"{', '.join(unread)}: the hybrid-splits study does not take it (it trains its own "
                              "encoders from scratch, on the local queue)")  # fmt: skip
    if args.study == "detour" and not (args.single_task or args.preset == "mini") and args.ner_data:
        raise DetourError("--ner-data: the detour study fine-tunes on every task of a suite (--suite); "
                          "--single-task runs the older pipeline on one NER set")  # fmt: skip


def budget_study_wanted(args: argparse.Namespace) -> bool:
    """The detour study runs on sweeps and a suite unless ``--single-task`` (or the older pipeline's own preset,
    mini) asks for the older five-run pipeline, or ``--report-only`` names one of its folders."""
    from backend.replication.budget_study import BUDGET_PRESETS

    if args.report_only and args.out:
        return _is_budget_folder(args.out)
    return not args.single_task and args.preset in BUDGET_PRESETS


def run_budget_study(args: argparse.Namespace) -> int:
    import time

    from backend.core.paths import reports_dir
    from backend.replication import budget_study as bs

    out = Path(args.out).expanduser() if args.out else reports_dir() / f"detour-{args.preset}"
    if args.report_only:
        rep = bs.write_report(out.resolve(), rebuild_sweep=True)
    else:
        s = bs.resolve_budget_study(
            args.preset,
            model=args.model,
            corpus=args.corpus,
            suite=args.suite,
            budgets=bs.parse_budgets(args.budgets) if args.budgets else None,
            seeds=args.pretrain_seeds,
            finetune_seeds=args.seeds,
            drop_weights=args.drop_weights,
            cka=args.cka,
            measure_jobs=args.measure_jobs,
            interventions=args.interventions,
            overrides=args.overrides,
        )
        if args.plan:
            print(f"the detour study, preset {args.preset}: {s['description']}")
            print(f"  arms: {'; '.join(bs.ARMS[a] for a in s['arms'])}; CKA {' and '.join(s['cka']['measures'])} "
                  f"on {s['cka']['n_texts']} held-out paragraphs")  # fmt: skip
            print(f"  budgets {', '.join(f'{b:,}' for b in s['budgets'])} tokens; {s['seeds']} pretraining seeds; "
                  f"suite {s['suite']}; fine-tuning {s['finetune'] or 'as the suite says'}")  # fmt: skip
            print(f"  this plan: {bs.plan_text(bs.plan(s))}")
            print("  every preset at these settings' suite:")
            for name in bs.BUDGET_PRESETS:
                other = bs.resolve_budget_study(name, model=args.model, corpus=args.corpus, suite=args.suite)
                for device in ("cpu", "cuda"):
                    print(f"    {bs.plan_text(bs.plan(other, device))}")
            print(f"  out {out.resolve()}")
            return 0
        t0 = time.time()
        rep = bs.run_study(s, out, executor=args.executor, command=[sys.executable, "-m", "backend", *sys.argv[1:]])
        print(f"wall time {time.time() - t0:.0f} s")
    from backend.replication.study_findings import short

    for arm, pts in rep["panels"].items():  # over budgets: where the sign changes; at one budget: its verdict
        said = rep["statements"][arm]["mean_delta"]["text"] if len(pts) > 1 else short(pts[0].get("verdict"))
        print(f"  {arm} vs MLM: {said}")
    for row in (rep.get("findings") or {}).get("budgets", []):
        low = next(iter(row["low_layers"].values()), None) or {}
        print(f"  at {row['tokens']:,} tokens: downstream {short(row['downstream']['verdict'])}; low layers "
              f"{low.get('verdict', 'not measured')}; freezes {row['freeze']['verdict']}")  # fmt: skip
    print(f"report: {out / 'report.md'}")
    return 0


def run(args: argparse.Namespace) -> int:
    from backend.core.paths import reports_dir
    from backend.replication.plan import resolve_settings
    from backend.replication.replicate import replicate

    check_flags(args)
    if args.study == "hybrid-splits":
        return run_hybrid_study(args)
    if budget_study_wanted(args):
        return run_budget_study(args)
    if args.preset not in ("quick", "mini"):
        raise DetourError(f"--preset {args.preset}: --single-task takes quick or mini")

    out = Path(args.out).expanduser() if args.out else reports_dir() / args.preset
    check_out_folder(out, "report", "replication")  # anything else there: refused before any work
    if args.report_only:
        from backend.replication.report import build_report

        if not (out / "settings.json").exists():
            raise DetourError(f"{out}: no replication here (no settings.json); give --out of an earlier run")
        rep = build_report(out)
        for f in rep["findings"]:
            print(f"{f['title']}: {f['verdict']}")
        return 0
    settings = resolve_settings(
        args.preset,
        model=args.model,
        corpus=args.corpus,
        ner_data=args.ner_data,
        seeds=args.seeds,
        overrides=args.overrides,
    )
    if args.plan:
        print_plan(settings, out.resolve())
        return 0
    claim_folder(out, "report", "replication")
    res = replicate(settings, out, command=[sys.executable, "-m", "backend", *sys.argv[1:]])
    if res["report"]:
        rep_json = Path(res["out"]) / "report.json"
        if rep_json.exists():
            import json

            for f in json.loads(rep_json.read_text()).get("findings", []):
                print(f"  {f['title']}: {f['verdict'].upper()}")
    if res["state"] == "cancelled":
        print(f"cancelled: {res['error']}", file=sys.stderr)
        return 130
    if res["state"] == "failed":
        for step, err in res["failed"].items():
            print(f"error: step {step} failed: {err}", file=sys.stderr)
        if res["blocked"]:
            print(f"error: not run because of it: {', '.join(res['blocked'])}", file=sys.stderr)
        print("rerun the same command to retry: finished steps are kept", file=sys.stderr)
        return 1
    return 0

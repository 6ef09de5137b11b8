"""``python -m backend replicate``: the paper's three findings at small scale (docs/studies/replication.md).

Examples::

    python -m backend replicate --preset quick                 # the demo -> reports/quick/report.html
    python -m backend replicate --preset mini --seeds 5        # ~1 hour -> reports/mini/
    python -m backend replicate --preset mini --model runs/my-base --corpus ../my_corpus --out reports/mine
    python -m backend replicate --preset quick --plan          # print the plan and sizes, run nothing
    python -m backend replicate --out reports/quick --report-only
    python -m backend replicate --study hybrid-splits --preset quick   # the second paper -> reports/hybrid-quick

Rerunning the same command resumes: finished steps are skipped, an interrupted training resumes from its last
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
    from backend.replication.plan import PRESETS

    p.add_argument(
        "--study",
        choices=["detour", "hybrid-splits"],
        default="detour",
        help="detour: the CLM detour paper (default); hybrid-splits: the second paper (objective splits from "
        "scratch and the 40%% MLM continuation), built on sweeps",
    )
    p.add_argument(
        "--preset",
        choices=list(PRESETS),
        default="quick",
        help="quick (the demo) or mini (the one to read); --plan estimates the time from this machine's rate",
    )
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


def run_hybrid_study(args: argparse.Namespace) -> int:
    """``--study hybrid-splits``: plan, run (or resume) and report the second paper's study."""
    import json
    import time

    from backend.core.paths import reports_dir
    from backend.replication.hybrid import resolve_hybrid, run_hybrid, write_hybrid_report

    out = Path(args.out).expanduser() if args.out else reports_dir() / f"hybrid-{args.preset}"
    check_out_folder(out, "report", "hybrid-splits")  # anything else there: refused before any work
    if args.report_only:
        rep = write_hybrid_report(out.resolve())
    else:
        s = resolve_hybrid(
            args.preset, corpus=args.corpus, ner_data=args.ner_data, seeds=args.seeds, overrides=args.overrides
        )
        if args.plan:
            from backend.replication.hybrid import estimate_text, hybrid_estimate

            print(f"hybrid-splits {args.preset}: {s['description']}")
            print(f"time: {estimate_text(hybrid_estimate(args.preset))}")
            print(
                json.dumps(
                    {k: s[k] for k in ("arch", "train", "budgets", "seeds", "eval", "corpus", "ner_data")}, indent=1
                )
            )
            return 0
        t0 = time.time()
        claim_folder(out, "report", "hybrid-splits")
        rep = run_hybrid(s, out)
        print(f"wall time {time.time() - t0:.0f} s")
    for f in rep["findings"].values():
        print(f"  {f['title']}: {f['verdict'].upper()}")
    print(f"report: {out / 'report.md'}")
    return 0


def run(args: argparse.Namespace) -> int:
    from backend.core.paths import reports_dir
    from backend.replication.plan import resolve_settings
    from backend.replication.replicate import replicate

    if args.study == "hybrid-splits":
        return run_hybrid_study(args)

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

"""``python -m backend replicate``: the paper's findings at a chosen scale (docs/studies/replication.md).

Examples::

    python -m backend replicate                                # the detour study, quick -> reports/detour-quick
    python -m backend replicate --plan                         # its size, time and detectable difference; run nothing
    python -m backend replicate --pilot                        # a short pilot: the seed noise at these settings
    python -m backend replicate --budgets 1e4 1e5 --pretrain-seeds 5 --suite configs/suites/bio-ner.yaml
    python -m backend replicate --preset gpu --out crossover-gpu                 # 1M-100M tokens on one GPU
    python -m backend replicate --stop                         # stop reports/detour-quick (its runs cancelled)
    python -m backend replicate --out detour-quick --report-only
    python -m backend replicate --study hybrid-splits          # the second paper's splits, on the suite
    python -m backend replicate --suite configs/suites/ncbi-disease.yaml   # one task: a suite of one

Both studies are sweeps of runs fine-tuned on every task of a suite, run one way (``replication/study_run.py``). The
detour study: MLM baseline, CLM detour, the seed-noise control (MLM on the same data order with another seed) and the
two freeze interventions x budgets x pretraining seeds, with CKA (debiased and linear) of each arm against MLM. The
report gives the suite's verdict per budget, the detour's low-layer divergence against seed noise, the freezes'
verdicts, the paper's numbers beside, and between which budgets the detour's interval first excludes 0 on the other
side (or that it does not).

``--out``: a plain name is a folder under the reports root (where the Reports tab looks), a path is that path; by
default ``<reports>/detour-<preset>`` or ``<reports>/hybrid-<preset>``. Rerunning the same command resumes: finished
runs are kept, an interrupted training resumes from its last checkpoint, fine-tunes already done are reused. Ctrl-C,
SIGTERM or ``--stop`` cancel its runs (none keeps training) and leave it resumable.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from backend.commands import add_overrides
from backend.core.errors import DetourError

RETIRED_PRESET = "mini"  # the one-task pipeline's larger preset (its reports stay readable; the study is on sweeps)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from backend.replication.budget_study import BUDGET_PRESETS, SUITE
    from backend.replication.hybrid import HYBRID_PRESETS

    p.add_argument(
        "--study",
        choices=["detour", "hybrid-splits"],
        default="detour",
        help="detour: the CLM detour paper (default); hybrid-splits: the second paper (objective splits from "
        "scratch and the 40%% MLM continuation)",
    )
    p.add_argument(
        "--preset",
        choices=list(dict.fromkeys([*BUDGET_PRESETS, *HYBRID_PRESETS])),
        default="quick",
        help="the detour study: quick (the default, a CPU demo), standard, gpu, paper; hybrid-splits: quick, mini. "
        "--plan gives the time here and the smallest difference it can detect",
    )
    p.add_argument(
        "--budgets",
        nargs="+",
        metavar="TOKENS",
        help="token budgets per run (e.g. 1e6 1e7 1e8): the budget becomes an axis of the study and the report "
        "states where the detour's sign changes",
    )
    p.add_argument("--suite", help=f"task suite every run is fine-tuned on (default {SUITE}; a suite of one task "
                   "fine-tunes on that task alone, e.g. configs/suites/ncbi-disease.yaml)")  # fmt: skip
    p.add_argument(
        "--no-interventions",
        dest="interventions",
        action="store_false",
        default=None,
        help="the detour study without its seed-noise control and freeze arms (the MLM / detour pair alone)",
    )
    p.add_argument("--pretrain-seeds", type=int, help="pretraining seeds (the preset's by default)")
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
    p.add_argument("--measure-jobs", type=int, help="fine-tune this many runs at once, each in its own process")
    p.add_argument("--executor", choices=["queue", "local", "slurm"], default="queue",
                   help="the detour study: where its runs train (the sweep's executors)")  # fmt: skip
    p.add_argument("--seeds", type=int, help="fine-tuning seeds per run and task (the preset's by default)")
    p.add_argument("--out", help="a name under the reports root, or a path (default <reports>/detour-<preset>, "
                   "<reports>/hybrid-<preset>); rerun with the same one to resume")  # fmt: skip
    p.add_argument("--model", help="base encoder: bundled name, model folder or run directory (default: bundled)")
    p.add_argument(
        "--corpus", help="domain corpus: a .txt/.jsonl/... file or folder (default ../shared/data/craft_pmc_oa_text)"
    )
    add_overrides(p, "override a preset value, e.g. train.seq_len=128 or finetune.epochs=3 (repeatable)")
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--plan", action="store_true", help="print the runs, fine-tunes, time here and smallest detectable difference"
    )
    g.add_argument("--pilot", action="store_true",
                   help="run the preset's short pilot (its fine-tuning settings, 3 x 2 seeds at the smallest budget, "
                   "into OUT-pilot): the seed noise --plan then reads")  # fmt: skip
    g.add_argument("--stop", action="store_true", help="stop the study in --out: its runs cancelled, resumable")
    g.add_argument("--report-only", action="store_true", help="rebuild the report from what --out holds")


def _folder(args: argparse.Namespace) -> Path:
    from backend.replication.study_run import study_folder

    return study_folder(args.study, args.preset, args.out)


PATH_FLAGS = ("--model", "--corpus", "--suite")


def resume_argv(argv: list[str], out: Path) -> list[str]:
    """The ``replicate`` arguments that resume this study from anywhere (the Reports tab runs it from the checkout):
    the ones given, ``--out`` the absolute folder, and relative paths made absolute."""
    kept, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == "--out":
            skip = True
            continue
        if a.startswith("--out="):
            continue
        if i and argv[i - 1] in PATH_FLAGS and Path(a).exists():
            a = str(Path(a).absolute())
        kept.append(a)
    if kept and kept[0] == "replicate":
        kept = kept[1:]
    return [*kept, "--out", str(out)]


def check_flags(args: argparse.Namespace) -> None:
    """A flag the chosen study would not read is refused, never silently dropped; the retired preset is named."""
    if args.study == "detour" and args.preset == RETIRED_PRESET:
        raise DetourError("--preset mini belonged to the retired one-task pipeline; the detour study's presets are "
                          "quick, standard, gpu and paper (a suite of one task: --suite configs/suites/"
                          "ncbi-disease.yaml)")  # fmt: skip
    if args.study == "hybrid-splits":
        unread = [f for f, v in (("--cka", args.cka), ("--no-interventions", args.interventions),
                                 ("--model", args.model)) if v is not None]  # fmt: skip
        if args.executor != "queue":
            unread.append("--executor")
        if unread:
            raise DetourError(f"{', '.join(unread)}: the hybrid-splits study does not take it (it trains its own "
                              "encoders from scratch, on the local queue)")  # fmt: skip


def resolve(args: argparse.Namespace) -> dict:
    """The chosen study's settings, checked (a DetourError names what is wrong)."""
    from backend.replication import budget_study as bs

    if args.study == "hybrid-splits":
        from backend.replication.hybrid import HYBRID_PRESETS, resolve_hybrid

        if args.preset not in HYBRID_PRESETS:
            raise DetourError(
                f"--preset {args.preset}: the hybrid-splits study's presets are {', '.join(HYBRID_PRESETS)}"
            )
        s = resolve_hybrid(args.preset, corpus=args.corpus, seeds=args.pretrain_seeds, overrides=args.overrides,
                           budgets=bs.parse_budgets(args.budgets) if args.budgets else None, suite=args.suite,
                           drop_weights=args.drop_weights)  # fmt: skip
        for flag, value in (("--seeds", args.seeds), ("--measure-jobs", args.measure_jobs)):
            if value is not None and value < 1:  # 0 was skipped, and -3 --measure-jobs became 1, silently
                raise DetourError(f"{flag} {value}: a whole number, at least 1")
        if args.seeds is not None:
            s["eval"]["seeds"] = args.seeds
        if args.measure_jobs is not None:
            s["measure_jobs"] = args.measure_jobs
        return s
    return bs.resolve_budget_study(
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


def print_plan(args: argparse.Namespace, s: dict, out: Path) -> None:
    from backend.replication import budget_study as bs
    from backend.replication import study_power
    from backend.sweeps.power_plan import text

    pilot = study_power.pilot_command(args.study, args.preset)
    if args.study == "hybrid-splits":
        from backend.replication.hybrid import estimate_text, hybrid_estimate

        print(f"hybrid-splits {args.preset}: {s['description']}")
        print(f"  splits {', '.join(str(x) for x in s['shares'])}; budgets {', '.join(f'{b:,}' for b in s['budgets'])}"
              f" tokens; {s['seeds']} pretraining seeds; suite {s['suite']}; fine-tuning {s['eval']}")  # fmt: skip
        print(f"  time: {estimate_text(hybrid_estimate(s))}")
        print(f"  power: {text(study_power.hybrid_power(s), pilot)}")
        print(f"  out {out}")
        return
    print(f"the detour study, preset {args.preset}: {s['description']}")
    print(f"  arms: {'; '.join(bs.ARMS[a] for a in s['arms'])}; CKA {' and '.join(s['cka']['measures'])} "
          f"on {s['cka']['n_texts']} held-out paragraphs")  # fmt: skip
    print(f"  budgets {', '.join(f'{b:,}' for b in s['budgets'])} tokens; {s['seeds']} pretraining seeds; "
          f"suite {s['suite']}; fine-tuning {s['finetune'] or 'as the suite says'}")  # fmt: skip
    print(f"  time: {bs.plan_text(bs.plan(s))}")
    print(f"  power: {text(study_power.detour_power(s), pilot)}")
    print("  every preset at these settings' suite (time here; on a GPU: the fitted rates at 10x):")
    for name in bs.BUDGET_PRESETS:
        other = bs.resolve_budget_study(name, model=args.model, corpus=args.corpus, suite=args.suite)
        mde = study_power.detour_power(other)["mde"]
        said = f"detects ±{mde:.1f} points" if mde else "detectable difference not measured at its settings"
        for device in ("cpu", "cuda"):
            print(f"    {bs.plan_text(bs.plan(other, device))}; {said}")
    print(f"  out {out}")


def run(args: argparse.Namespace) -> int:
    import time

    from backend.core.catalogue import check_out_folder, claim_folder
    from backend.replication import budget_study as bs
    from backend.replication import study_power
    from backend.replication.study_run import STOPPED_RC, StudyStopped, stop

    check_flags(args)
    out = _folder(args)
    if args.stop:
        for msg in stop(out):
            print(msg)
        print(f"stopped: {out} (resume: rerun its command, or Resume in the Reports tab)")
        return 0
    if args.report_only:
        return _report_only(args, out)
    check_out_folder(out, "report")  # an evaluation, a sweep, a folder inside another artifact: refused, --plan too
    _check_same_study(out, "hybrid-splits" if args.study == "hybrid-splits" else "detour-budgets")
    s = resolve(args)
    if args.plan:
        print_plan(args, s, out)
        return 0
    hybrid = args.study == "hybrid-splits"
    if args.pilot:
        s = study_power.pilot_hybrid(s) if hybrid else study_power.pilot_detour(s)
        out = out.with_name(f"{out.name}-pilot")
        _check_same_study(out, "hybrid-splits" if hybrid else "detour-budgets")
    check_out_folder(out, "report")  # anything but a study there: refused before any work
    claim_folder(out, "report")
    command = [sys.executable, "-m", "backend", *sys.argv[1:]]
    resume = resume_argv(sys.argv[1:], out)
    t0 = time.time()
    try:
        if hybrid:
            from backend.replication.hybrid import run_hybrid

            rep = run_hybrid(s, out, command=command, resume=resume)
        else:
            rep = bs.run_study(s, out, executor=args.executor, command=command, resume=resume)
    except StudyStopped as exc:
        print(f"cancelled: {exc}", file=sys.stderr)
        return STOPPED_RC
    print(f"wall time {time.time() - t0:.0f} s")
    _summary(rep, hybrid)
    print(f"report: {out / 'report.md'}")
    return 0


def _check_same_study(out: Path, study: str) -> None:
    """A study's folder is resumed only by the same study: the hybrid study onto the detour study's folder planned
    and started there, and only its process found the other study (a torn settings.json: a traceback)."""
    from backend.core import atomic

    if not (out / "settings.json").exists():
        return
    held = atomic.read_json(out / "settings.json")
    if not isinstance(held, dict):
        raise DetourError(f"--out {out}: its settings.json is not a study's settings (not a JSON mapping); pick "
                          "another --out")  # fmt: skip
    if held.get("study", "the retired one-task pipeline") != study:
        raise DetourError(f"--out {out}: holds another study ({held.get('study', 'the retired one-task pipeline')}), "
                          f"not {study}; pick another --out")  # fmt: skip


def _report_only(args: argparse.Namespace, out: Path) -> int:
    from backend.core import atomic
    from backend.replication import budget_study as bs

    s = atomic.read_json(out / "settings.json")
    if not isinstance(s, dict):
        raise DetourError(f"{out}: no study here (no settings.json); give --out of an earlier run")
    study = s.get("study")
    if study == "hybrid-splits":
        from backend.replication.hybrid import write_hybrid_report

        _summary(write_hybrid_report(out.resolve(), rebuild_sweeps=True), True)
    elif study == "detour-budgets":
        _summary(bs.write_report(out.resolve(), rebuild_sweep=True), False)
    else:
        raise DetourError(f"{out}: a report of the retired one-task pipeline; its files (report.md, report.html, "
                          "report.json) stay readable as they are and are not rebuilt")  # fmt: skip
    print(f"report: {out / 'report.md'}")
    return 0


def _summary(rep: dict, hybrid: bool) -> None:
    if hybrid:
        for f in rep["findings"].values():
            print(f"  {f['title']}: {f['verdict'].upper()}")
        return
    from backend.replication.study_findings import short

    for arm, pts in rep["panels"].items():  # over budgets: where the sign changes; at one budget: its verdict
        said = rep["statements"][arm]["mean_delta"]["text"] if len(pts) > 1 else short(pts[0].get("verdict"))
        print(f"  {arm} vs MLM: {said}")
    for row in (rep.get("findings") or {}).get("budgets", []):
        low = next(iter(row["low_layers"].values()), None) or {}
        print(f"  at {row['tokens']:,} tokens: downstream {short(row['downstream']['verdict'])}; low layers "
              f"{low.get('verdict', 'not measured')}; freezes {row['freeze']['verdict']}")  # fmt: skip

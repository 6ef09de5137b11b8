"""A study's planned time against its measured time: plan, then run, then compare.

    python bench/bench_plan_time.py                      # the quick detour study (replicate's defaults)
    python bench/bench_plan_time.py -- --preset quick --measure-jobs 2
    python bench/bench_plan_time.py --name plan_time-tiny -- --budgets 2560 --no-interventions ...

Everything after ``--`` is ``python -m backend replicate``'s arguments. The bench resolves the study as the command
does, takes its plan (``budget_study.plan``: training at the rate this machine measured, calm ones preferred; the
fine-tunes at the seconds measured here or the fitted rates) and what the plan stands on; where no comparable
training rate is measured here yet it first trains one calibration run of the study's base at its sequence length
and batch (48 steps, recorded in the rate book as any run's phase is). Then it runs the study in a fresh folder
(``--keep DIR`` to keep it elsewhere) and compares: planned and measured wall time, training and the rest apart, their
ratio, whether the plan is within 30% of the measurement, with the machine and its load at the start and the end (a
time measured under another program's load is read as such).

Results: bench/results/<--name, default plan_time>.json + .md (``--results DIR`` writes elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS, save  # noqa: E402

from backend.core.paths import REPO_ROOT  # noqa: E402
from backend.engine import rates  # noqa: E402

WITHIN = 0.30


def _load() -> dict:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        one = five = fifteen = None
    return {"load_1m": one, "load_5m": five, "load_15m": fifteen, "cpus": os.cpu_count(),
            "at": time.strftime("%Y-%m-%d %H:%M:%S")}  # fmt: skip


def _study(argv: list[str]) -> tuple[argparse.Namespace, dict]:
    from backend.commands import replicate

    p = argparse.ArgumentParser()
    replicate.add_arguments(p)
    args = p.parse_args(argv)
    if args.study != "detour":
        raise SystemExit("the bench times the detour study (its plan is budget_study.plan)")
    replicate.check_flags(args)
    return args, replicate.resolve(args)


def _calibrate(s: dict, log) -> str | None:
    """Train one run of the study's base at its sequence length and batch when no comparable rate is measured here,
    so the plan has a rate of this machine now (it is recorded like any run's). Returns what was done, or None."""
    from backend.engine.config import load_config
    from backend.engine.precision import resolve_precision
    from backend.replication import budget_study as bs
    from backend.replication.study_time import device
    from backend.runs.train import prepare_runs, train_run

    t = s["train"]
    precision = resolve_precision(t["precision"], device())[0]
    found = rates.pick(bs.n_params(s), precision, device(), seq_len=t["seq_len"], batch_size=t["batch_size"])
    if found and found["comparable"]:
        return None
    with tempfile.TemporaryDirectory(prefix="plan-time-calibrate-") as d:
        cfg = load_config(
            None,
            [
                "name=calibrate",
                f"model.name={s['model']}",
                f"data.corpus={s['corpus']}",
                "recipe=clm_detour",
                f"train.seq_len={t['seq_len']}",
                f"train.batch_size={t['batch_size']}",
                f"train.precision={t['precision']}",
                "phases.main.steps=48",
                "phases.decay.steps=2",
                "logging.log_every=4",
                "logging.eval_every=1000",
                "logging.checkpoint_every=1000",
            ],  # fmt: skip
        )
        (run,) = prepare_runs(cfg, root=Path(d))
        train_run(run)
    log("calibration: no comparable training rate was measured here; one 48-step run of the base recorded it")
    return "one 48-step run of the base at the study's sequence length and batch (no comparable rate before)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="plan_time")
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--keep", type=Path, help="the study's folder (kept); default: a temporary one, removed")
    ap.add_argument("study", nargs="*", help="replicate's arguments (after --)")
    args = ap.parse_args(argv)
    log = lambda m: print(f"[{time.strftime('%H:%M:%S')}] {m}", flush=True)  # noqa: E731
    from backend.engine.progress import hms
    from backend.replication import budget_study as bs

    rargs, s = _study(args.study)
    load0 = _load()
    calibration = _calibrate(s, log)
    plan = bs.plan(s)
    log(f"plan: {bs.plan_text(plan)}")
    if plan["total_s"] is None:
        raise SystemExit("no training rate for this base and precision here even after calibrating")
    out = (args.keep or Path(tempfile.mkdtemp(prefix="plan-time-")) / "study").absolute()
    cmd = [sys.executable, "-m", "backend", "replicate", *args.study, "--out", str(out)]
    log(f"run: {' '.join(cmd)}")
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=REPO_ROOT)
    wall = time.time() - t0
    load1 = _load()
    if proc.returncode != 0:
        raise SystemExit(f"the study exited with code {proc.returncode}")
    timing = json.loads((out / "timing.json").read_text())
    train_wall = timing.get("train_wall_s")
    rest_plan, rest_wall = plan["finetune_s"], wall - (train_wall or 0)
    ratio = plan["total_s"] / wall
    payload = {
        "command": cmd[2:],
        "preset": rargs.preset,
        "plan": {
            "total_s": plan["total_s"],
            "train_s": plan["train_s"],
            "finetune_s": plan["finetune_s"],
            "runs": plan["runs"],
            "tokens": plan["tokens"],
            "finetunes": plan["finetunes"],
            "rate": plan["rate"],
            "rate_source": rates.describe(plan["rate_pick"]),
            "start": plan["start_text"],
            "finetune_source": plan["finetune_text"],
            "together": plan["together"],
        },  # fmt: skip
        "calibration": calibration,
        "measured": {"wall_s": wall, "train_wall_s": train_wall, "rest_s": rest_wall},
        "ratio_plan_to_measured": ratio,
        "within_30_percent": abs(ratio - 1) <= WITHIN,
        "load_start": load0,
        "load_end": load1,
    }
    if not args.keep:
        shutil.rmtree(out.parent, ignore_errors=True)

    def pct(a, b):
        return "-" if not a or not b else f"{100 * (a / b - 1):+.0f}%"

    fmt = lambda x: "-" if x is None else hms(x)  # noqa: E731
    table = "\n".join([
        f"# Planned and measured time: replicate {' '.join(args.study) or '(the quick preset)'}",
        "",
        f"Machine: {os.cpu_count()} CPUs; load average (1/5/15 min) {load0['load_1m']:.2f}/{load0['load_5m']:.2f}/"
        f"{load0['load_15m']:.2f} at the start ({load0['at']}), {load1['load_1m']:.2f}/{load1['load_5m']:.2f}/"
        f"{load1['load_15m']:.2f} at the end ({load1['at']}).",
        "",
        "| part | planned | measured | plan vs measured |",
        "|---|---|---|---|",
        f"| training ({plan['runs']} runs, {plan['tokens']:,} tokens) | {fmt(plan['train_s'])} | {fmt(train_wall)} | "
        f"{pct(plan['train_s'], train_wall)} |",
        f"| fine-tuning, CKA and report ({plan['finetunes']} fine-tunes) | {fmt(rest_plan)} | {fmt(rest_wall)} | "
        f"{pct(rest_plan, rest_wall)} |",
        f"| **total** | **{fmt(plan['total_s'])}** | **{fmt(wall)}** | **{pct(plan['total_s'], wall)}** |",
        "",
        f"Within 30% of the measured time: **{'yes' if payload['within_30_percent'] else 'no'}**.",
        "",
        f"The plan's training rate: {plan['rate']:,.0f} tokens/s ({payload['plan']['rate_source']}); "
        f"{plan['start_text']}; fine-tuning: {plan['finetune_text']}."
        + (f" Calibration first: {calibration}." if calibration else ""),
        "",
        f"Command: `python bench/bench_plan_time.py -- {' '.join(args.study)}`",
    ])  # fmt: skip
    save(args.name, payload, table, args.results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

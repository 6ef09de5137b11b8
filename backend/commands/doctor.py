"""``python -m backend doctor RUN`` — where a run's time goes: tokens/s and MFU per phase, the split of wall time,
the ETA, and findings with the setting that fixes each (``backend/runs/doctor.py``); pointed at an evaluation's
folder (its results.json), the fine-tuning rate and seconds per seed."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="a run directory, a run's name under the runs dir, or an evaluation's folder")
    p.add_argument("--json", action="store_true", help="print the diagnosis as JSON")


def run(args) -> int:
    from backend.core.errors import DetourError
    from backend.engine.rundir import find_run
    from backend.evaluation.results_file import read_results
    from backend.runs.doctor import diagnose, evaluation_report, evaluation_throughput, report

    d = Path(args.run)
    if (d / "results.json").exists() or (d / "results.json").is_symlink():  # an evaluation: rate, time per seed
        results = read_results(d)  # checked: a torn or foreign file is one line naming it
        print(json.dumps(evaluation_throughput(results), indent=2) if args.json else evaluation_report(results))
        return 0
    d = find_run(args.run)  # a folder with config.yaml, by path or name; else "no run named R", with the close names
    if not (d / "metrics.jsonl").exists():
        raise DetourError(f"run {d.name}: no metrics.jsonl yet (it has not started training); see its status.json")
    diagnosis = diagnose(d)
    print(json.dumps(diagnosis, indent=2, default=str) if args.json else report(diagnosis))
    return 0

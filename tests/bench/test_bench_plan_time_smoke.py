"""bench/bench_plan_time.py as a smoke run on a tiny study: it calibrates a rate where none is measured, plans,
runs the study, and writes the comparison (JSON + a Markdown table with the machine and its load). The owner runs it
on the quick preset on a quiet machine; a change to the plan or the study that breaks it fails here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from backend.core.paths import DEMO_CORPUS
from tests.conftest import TINY_MODERNBERT, save_tiny_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # calibrates, then trains and fine-tunes a two-run study: about a minute on 2 busy cores
def test_the_plan_time_bench_plans_runs_and_compares(tmp_path):
    model = save_tiny_model(tmp_path / "tiny", TINY_MODERNBERT)
    study = ["--model", str(model), "--corpus", str(DEMO_CORPUS), "--suite", "configs/suites/demo.yaml",
             "--budgets", "2560", "--no-interventions", "--pretrain-seeds", "1", "--seeds", "1",
             "--set", "train.precision=fp32", "--set", "cka.n_texts=12", "--set", "finetune.epochs=1",
             "--set", "finetune.max_train_examples=8", "--set", "finetune.max_eval_examples=8"]  # fmt: skip
    cmd = [sys.executable, str(ROOT / "bench" / "bench_plan_time.py"), "--name", "plan_time-smoke",
           "--results", str(tmp_path / "results"), "--", *study]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    data = json.loads((tmp_path / "results" / "plan_time-smoke.json").read_text())
    assert data["calibration"] and data["plan"]["rate"] > 0  # a fresh rate book: the calibration run measured it
    assert data["plan"]["rate_source"].startswith("the 1 ") and "seq 64 x batch 4" in data["plan"]["rate_source"]
    assert data["plan"]["total_s"] > 0 and data["measured"]["wall_s"] > 0 and data["measured"]["train_wall_s"] > 0
    assert data["ratio_plan_to_measured"] == pytest.approx(data["plan"]["total_s"] / data["measured"]["wall_s"])
    assert data["load_start"]["cpus"] >= 1 and data["machine"]["cpu"]
    table = (tmp_path / "results" / "plan_time-smoke.md").read_text()
    for what in ("Machine:", "load average", "| **total** |", "Within 30% of the measured time:", "Calibration first"):
        assert what in table, table

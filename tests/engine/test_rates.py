"""The rate book: a training phase records its rate only from enough steps, with what the rate depends on and the
machine's load; a plan takes the median of the comparable recent rates, calm ones preferred, and says which."""

from __future__ import annotations

import json

import torch

from backend.engine import rates
from backend.engine.models import load_masked_lm
from backend.runs.train import prepare_runs, train_run
from conftest import measured_rate, tiny_train_cfg


def test_a_phase_records_its_rate_only_from_enough_steps(tiny_modernbert_dir, isolated_runs_dir, one_torch_thread):
    """An 8-step phase (the 16-step run that once timed a one-hour study at six hours was of this kind) records
    nothing; a 30-step one records its median interval with its sequence length, batch, threads and load."""
    short = tiny_train_cfg(tiny_modernbert_dir, "short", recipe="clm_detour")
    (run,) = prepare_runs(short, root=isolated_runs_dir)
    assert train_run(run)["state"] == "done"
    assert rates.read("train") == []
    sets = {"phases.main.steps": 30, "phases.decay.steps": 2, "logging.log_every": 2, "logging.eval_every": 100}
    long = tiny_train_cfg(tiny_modernbert_dir, "long", recipe="clm_detour", **sets)
    (run,) = prepare_runs(long, root=isolated_runs_dir)
    assert train_run(run)["state"] == "done"
    (row,) = rates.read("train")  # the main phase only: its 2-step decay is too short to mean anything
    assert row["objective"] == "clm" and row["seq_len"] == 64 and row["batch_size"] == 4 and row["world"] == 1
    assert row["threads"] == torch.get_num_threads() and row["steps"] >= rates.MIN_STEPS and row["seconds"] > 0
    assert row["tokens_per_s"] > 0 and row["load"] is not None and row["cpus"] >= 1
    n = sum(p.numel() for p in load_masked_lm(str(tiny_modernbert_dir)).parameters())
    assert row["size"] == rates.size_key(n) and rates.pick(n, "fp32", "cpu", seq_len=64, batch_size=4)["n"] == 1


def test_a_plan_takes_the_median_of_comparable_recent_calm_rates():
    n = 5_500_000
    for r in (1000.0, 1200.0, 1100.0):
        measured_rate(n, "fp32", "cpu", "clm", r, 64, 4, load=1.2)  # calm on this machine's CPUs
    measured_rate(n, "fp32", "cpu", "clm", 300.0, 64, 4, load=99.0)  # under load: left out while calm ones exist
    measured_rate(n, "fp32", "cpu", "clm", 5000.0, 256, 8)  # another sequence length and batch: not comparable
    p = rates.pick(n, "fp32", "cpu", seq_len=64, batch_size=4)
    assert p["tokens_per_s"] == 1100.0 and p["n"] == 3 and p["calm"] and p["comparable"]
    text = rates.describe(p)
    assert text.startswith("median of 3 calm rates (CLM, seq 64 x batch 4, 1 thread) measured ")
    assert "1 measured under load left out" in text
    assert rates.pick(n, "fp32", "cpu", seq_len=256, batch_size=8)["tokens_per_s"] == 5000.0
    assert rates.pick(n * 10, "fp32", "cpu") is None  # another size: nothing measured


def test_rates_measured_only_under_load_are_used_and_said_so_and_the_newest_count():
    n = 700_000
    for r in (100.0, 200.0, 300.0):
        measured_rate(n, "fp32", "cpu", "mlm", r, 64, 4, load=50.0)
    p = rates.pick(n, "fp32", "cpu", seq_len=64, batch_size=4)
    assert p["tokens_per_s"] == 200.0 and not p["calm"] and "every one under load" in rates.describe(p)
    for _ in range(rates.RECENT):  # newer measurements push the old ones out of the median
        measured_rate(n, "fp32", "cpu", "mlm", 900.0, 64, 4, load=50.0)
    assert rates.pick(n, "fp32", "cpu", seq_len=64, batch_size=4)["tokens_per_s"] == 900.0


def test_without_a_comparable_rate_another_shape_stands_in_and_is_named():
    n = 700_000
    measured_rate(n, "fp32", "cpu", "clm", 800.0, 128, 8)
    p = rates.pick(n, "fp32", "cpu", seq_len=64, batch_size=4)
    assert p["tokens_per_s"] == 800.0 and not p["comparable"]
    assert "none measured at this plan's seq 64 x batch 4" in rates.describe(p)


def test_the_old_single_rate_file_and_other_machines_are_not_read(isolated_cache_dir):
    """measured-rates.json kept one rate per size of any length and unknown load (the 315 tokens/s): not read."""
    isolated_cache_dir.mkdir(parents=True, exist_ok=True)
    (isolated_cache_dir / "measured-rates.json").write_text(json.dumps({"cpu|fp32|5500000": {"clm": {
        "tokens_per_s": 315.0, "measured_at": "2026-11-26T10:00:00"}}}))  # fmt: skip
    row = {"kind": "train", "machine": "another CPU|avx512f", "size": 5_500_000, "precision": "fp32", "device": "cpu",
           "objective": "clm", "tokens_per_s": 9.0, "measured_at": "2026-11-26T10:00:00"}  # fmt: skip
    with open(rates.path(), "a") as f:
        f.write(json.dumps(row) + "\n" + '{"kind": "train", "mach')  # and a torn last line
    assert rates.pick(5_500_000, "fp32", "cpu") is None

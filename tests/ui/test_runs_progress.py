"""The Runs table and the run's throughput panel read one function (engine.progress.run_progress): the same ETA and
tokens/s for one run, the same state when it ends, and a run that trained its last step but is still evaluating and
saving says so in both (issue 32: the table's ETA was the trainer's last-interval figure, the panel's the doctor's,
and the table showed 'running' at 100% with ETA 0m00s while the panel said 'unknown')."""

from __future__ import annotations

import os

import pytest

from app import runs_tab, throughput_panel
from backend.core import atomic, process
from tests.runs.test_doctor import _row, _write_run

CFG = {"name": "r", "train": {"seq_len": 256}, "logging": {"eval_every": 5, "eval_batches": 8},
       "_meta": {"compile": {"resolved": True}}}  # fmt: skip
MACHINE = {"type": "machine", "step": 0, "device": "cpu", "precision": "fp32", "peak_flops": 8e11,
           "peak_source": "measured", "parameters": 5_500_000}  # fmt: skip


def _running(**fields) -> dict:
    return {"state": "running", "pid": os.getpid(), "pid_identity": process.identity(), "phase": "main", **fields}


def _row_of(name: str) -> dict:
    rows = {r[0]: dict(zip(runs_tab.TABLE_COLUMNS, r, strict=True)) for r in runs_tab.runs_table()}
    return rows[name]


def test_table_and_panel_show_one_eta_and_one_rate(isolated_runs_dir):
    # the trainer's own last-interval estimate (eta_s: 5 s) differs from the rate over wall time (10k tokens in 8 s
    # of logged intervals, 10k left: 8 s) -- the table used the first, the panel the second
    rows = [_row(s, {"data": 3.0, "forward_backward": 1.0}) for s in (5, 10)]
    _write_run(isolated_runs_dir, "r", CFG, MACHINE, rows,
               _running(step=10, total_steps=20, tokens_seen=10_000, total_tokens=20_000, eta_s=5.0))  # fmt: skip
    row, md = _row_of("r"), throughput_panel.panel_markdown("r")
    assert row["ETA"] == "0m08s", row
    assert f"ETA at the measured rate: **{row['ETA']}**" in md
    assert row["tok/s"] == "500" and "| whole run | | 500 |" in md


def test_a_run_saving_after_its_last_step_says_so_in_both(isolated_runs_dir):
    rows = [_row(s, {"forward_backward": 1.0}) for s in (5, 10)]
    _write_run(isolated_runs_dir, "r", CFG, MACHINE, rows,
               _running(step=10, total_steps=10, tokens_seen=10_000, total_tokens=10_000, eta_s=0.0))  # fmt: skip
    row, md = _row_of("r"), throughput_panel.panel_markdown("r")
    assert row["state"] == "running" and row["phase"] == "final evaluation and save" and row["ETA"] == "finishing"
    assert "(running: final evaluation and save)" in md and "ETA at the measured rate: **finishing**" in md


def test_the_panel_follows_the_run_to_its_end_with_the_table(isolated_runs_dir):
    rows = [_row(s, {"forward_backward": 1.0}) for s in (5, 10)]
    d = _write_run(isolated_runs_dir, "r", CFG, MACHINE, rows,
                   _running(step=10, total_steps=20, tokens_seen=10_000, total_tokens=20_000))  # fmt: skip
    first = runs_tab.poll_update([], "r", "tokens_seen", None)
    assert "(running)" in first["panel"] and _row_of("r")["state"] == "running"
    st = atomic.read_json(d / "status.json")
    atomic.write_json(d / "status.json", {**st, "state": "done", "finished_at": st.get("started_at") or 1.0})
    second = runs_tab.poll_update([], "r", "tokens_seen", first["state"])  # metrics.jsonl did not change
    assert _row_of("r")["state"] == "done" and _row_of("r")["ETA"] == ""
    assert second["panel"] is not None and "(done)" in second["panel"] and "ETA" not in second["panel"]


def test_hand_edited_metrics_rows_never_break_the_table(isolated_runs_dir):
    """Rows without a numeric step, tokens_seen, rate or wall time (a hand-edited metrics.jsonl) are left out of the
    reading; the table still lists the run with the rate of the rows that hold one."""
    good = [_row(s, {"forward_backward": 1.0}) for s in (5, 10)]
    bad = [{"type": "train"}, {"type": "train", "step": "x", "tokens_seen": 1}, {**good[0], "tokens_per_s": "fast"},
           {**good[1], "time_split": {"wall": "slow"}}]  # fmt: skip
    _write_run(isolated_runs_dir, "r", CFG, MACHINE, bad + good,
               _running(step=10, total_steps=20, tokens_seen=10_000, total_tokens=20_000))  # fmt: skip
    row = _row_of("r")
    assert row["state"] == "running" and row["tok/s"] == "500" and row["ETA"].endswith("s"), row
    assert "(running)" in throughput_panel.panel_markdown("r")


@pytest.mark.parametrize(
    "status",
    [
        {"state": "running", "started_at": 2_000.0},  # started in the future of now
        {"state": "done", "started_at": 2_000.0, "finished_at": 1_500.0},  # ended before it started
    ],
)
def test_a_clock_stepped_back_is_said_not_shown_as_zero(status):
    """Timestamps in the future of the clock read '0m00s' without a word: the duration cannot be measured."""
    from backend.analysis.plots import run_summary

    assert run_summary("r", status, now=1_000.0)["time"] == "clock moved back"
    normal = {"state": "done", "started_at": 1_000.0, "finished_at": 1_065.0}
    assert run_summary("r", normal, now=5_000.0)["time"] == "1m05s"

"""bench/bench_app_load.py as a smoke run: a few users for a few seconds against the real app, one run training, both
scenarios (back to back, and a classroom at a person's pace). The benchmark drives the app as a browser does (its
page's load events, a tab's select events, the Runs tab's timer) and through its API (the Launch action, fill-mask,
NER, the runs list, the curves): a UI change that breaks it fails here, not on the day the load is measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # starts the app, fine-tunes a tiny NER model and trains a tiny run: a few minutes on 2 busy cores
def test_app_load_bench_runs_both_scenarios_end_to_end(tmp_path):
    cmd = [sys.executable, str(ROOT / "bench" / "bench_app_load.py"), "--clients", "3", "--rounds", "1",
           "--duration", "90", "--baseline", "3", "--pause", "1", "--open-within", "1",
           "--out", str(tmp_path)]  # fmt: skip
    env = dict(os.environ, BENCH_APP_LOAD_SETSID="1")  # no re-exec under setsid: a timeout here kills the benchmark
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    back = json.loads((tmp_path / "app_load-3.json").read_text())
    assert back["errors"] == [] and back["scenario"] == "back-to-back"
    counts = {a: back["latency"][a].get("n", 0) for a in ("open_app", "fill_mask", "ner_tag", "list_runs", "curves")}
    assert counts == {"open_app": 3, "fill_mask": 3, "ner_tag": 3, "list_runs": 3, "curves": 3}
    assert 0 < back["page_load_events"] <= 3 and back["page_bytes"] > 100_000  # the page a browser loads, its events

    room = json.loads((tmp_path / "app_load-classroom-3.json").read_text())
    assert room["errors"] == [] and room["scenario"] == "classroom"
    assert (room["pause_s"], room["open_within_s"], room["seed"]) == (1.0, 1.0, 0)
    counts = {a: room["latency"][a].get("n", 0) for a in ("open_app", "show_tab", "fill_mask", "ner_tag", "curves")}
    assert counts == {"open_app": 3, "show_tab": 9, "fill_mask": 3, "ner_tag": 3, "curves": 3}  # 3 tabs each
    for data in (back, room):
        assert data["training_tokens_per_s_without_load"] > 0 and data["training_tokens_per_s_with_load"] > 0
        assert data["app_inference"] == {"threads": 1, "nice": 10, "session_nice": 0}
        assert len(data["load_average_at_start"]) == 3 and len(data["load_average_at_end"]) == 3
        assert data["machine"]["cpu"] and data["cpus"] >= 1
    table = (tmp_path / "app_load-classroom-3.md").read_text()
    for what in ("Machine:", "load average", "training tokens/s alone", "| fill_mask | 3 |", "a classroom",
                 "--scenario classroom --clients 3 --rounds 1", "--pause 1 --open-within 1"):  # fmt: skip
        assert what in table, table
    back_table = (tmp_path / "app_load-3.md").read_text()
    assert "Command: `python bench/bench_app_load.py --scenario back-to-back" in back_table

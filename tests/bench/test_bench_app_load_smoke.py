"""bench/bench_app_load.py as a smoke run: a few clients for a few seconds against the real app, one run training.
The benchmark drives the app through its API (the Launch action, fill-mask, NER, the runs list, the curves): a UI
change that breaks it fails here, not on the day the load is measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # starts the app, fine-tunes a tiny NER model and trains a tiny run: a few minutes on 2 busy cores
def test_app_load_bench_runs_end_to_end(tmp_path):
    cmd = [sys.executable, str(ROOT / "bench" / "bench_app_load.py"), "--clients", "3", "--rounds", "1",
           "--duration", "60", "--baseline", "3", "--out", str(tmp_path)]  # fmt: skip
    env = dict(os.environ, BENCH_APP_LOAD_SETSID="1")  # no re-exec under setsid: a timeout here kills the benchmark
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    data = json.loads((tmp_path / "app_load-3.json").read_text())
    assert data["errors"] == []
    assert {a: data["latency"][a]["n"] for a in ("open_app", "fill_mask", "ner_tag", "list_runs", "curves")} == {
        "open_app": 3, "fill_mask": 3, "ner_tag": 3, "list_runs": 3, "curves": 3,
    }  # fmt: skip
    assert data["training_tokens_per_s_without_load"] > 0 and data["training_tokens_per_s_with_load"] > 0
    assert data["app_inference"] == {"threads": 1, "nice": 10, "session_nice": 0}
    table = (tmp_path / "app_load-3.md").read_text()
    for what in ("Machine:", "cores", "load average", "training tokens/s alone", "| fill_mask | 3 |"):
        assert what in table, table

"""Figures shared by every page: the Runs tab's curves and the doctor's panel are built once per change of a run's
files (20 users polling one training run rebuilt them 20 times), and a change is always drawn."""

from __future__ import annotations

from app import runs_tab, throughput_panel
from app.figure_cache import FileKeyed
from backend.core import atomic
from tests.ui.test_runs_tab import make_run


def test_a_value_is_built_once_per_change_of_its_files(tmp_path):
    f = tmp_path / "metrics.jsonl"
    f.write_text("a\n")
    cache, calls = FileKeyed(4), []

    def build():
        calls.append(f.read_text() if f.exists() else None)
        return object()

    first = cache.get("k", [f], build)
    assert cache.get("k", [f], build) is first and len(calls) == 1
    with f.open("a") as out:
        out.write("b\n")  # a run logs by appending: the size changes
    assert cache.get("k", [f], build) is not first and calls[-1] == "a\nb\n"
    assert cache.get("other", [f], build) is not first and cache.builds == 3
    f.unlink()  # a vanished file is a change too
    assert len({id(cache.get("k", [f], build)) for _ in range(2)}) == 1 and cache.builds == 4


def test_the_cache_stays_bounded(tmp_path):
    cache = FileKeyed(3)
    for i in range(10):
        cache.get(i, [], lambda i=i: i)
    assert len(cache._items) == 3 and cache.get(9, [], lambda: -1) == 9 and cache.get(0, [], lambda: -1) == -1


def test_curves_are_shared_until_the_run_logs_again(isolated_runs_dir):
    d = make_run(isolated_runs_dir, "r1")
    before = runs_tab.CURVES.builds
    figs = runs_tab.curves(["r1"])
    assert runs_tab.curves(["r1"]) is figs and runs_tab.CURVES.builds == before + 1
    n = len(figs[0].data[0].x)
    atomic.append_jsonl(d / "metrics.jsonl", {"type": "train", "step": 13, "phase": "decay", "objective": "mlm",
                                              "loss": 5.0, "lr": 1e-5, "grad_norm": 1.0, "tokens_per_s": 900.0,
                                              "tokens_seen": 256 * 13})  # fmt: skip
    again = runs_tab.curves(["r1"])
    assert again is not figs and sum(len(t.x) for t in again[0].data) == sum(len(t.x) for t in figs[0].data) + 1
    assert n > 0 and runs_tab.curves(["r1"], "step") is not again  # another axis is another figure


def test_the_doctors_panel_follows_the_runs_files(isolated_runs_dir):
    d = make_run(isolated_runs_dir, "r2")
    before = throughput_panel.DIAGNOSES.builds
    text = throughput_panel.panel_markdown("r2")
    assert throughput_panel.panel_markdown("r2") == text and throughput_panel.DIAGNOSES.builds == before + 1
    atomic.write_json(d / "status.json", {**atomic.read_json(d / "status.json"), "state": "failed", "error": "x" * 9})
    throughput_panel.panel_markdown("r2")
    assert throughput_panel.DIAGNOSES.builds == before + 2

"""MFU cannot exceed 100% (issue 33): the CPU peak is the best of several probes, cached per machine and precision,
and raised whenever a run achieves more. A probe slowed on purpose (a machine under load) must not print an MFU
above 100% anywhere: train.log, metrics.jsonl, the doctor's report, the Runs tab's panel."""

from __future__ import annotations

import re

from backend.engine import throughput
from backend.engine.rundir import read_metrics
from backend.runs.doctor import diagnose, report
from backend.runs.train import prepare_runs, train_run
from conftest import tiny_train_cfg

SLOW = 2e6  # FLOP/s: a probe a thousand times too slow, what a one-second probe under heavy load can read


def _percentages(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"MFU[^%\n|]*?([0-9.]+)%", text)]


def test_the_peak_is_cached_per_precision_and_only_ever_raised(monkeypatch):
    monkeypatch.setattr(throughput, "probe_cpu_peak", lambda precision, probes=5: 5e10)
    rate, source = throughput.cpu_peak("fp32")
    assert rate == 5e10 and "best of 5 probes" in source
    monkeypatch.setattr(throughput, "probe_cpu_peak", lambda precision, probes=5: SLOW)  # later, under load
    rate, source = throughput.cpu_peak("fp32")
    assert rate == 5e10 and "(cached)" in source  # the slow probe does not lower it
    throughput.bounded_mfu(9e10, (rate, source), "bf16", "cpu", "a bf16 run")  # bf16 has its own entry
    assert set(throughput._read_peaks()[throughput._machine_key()]) == {"fp32", "bf16"}
    assert throughput.cpu_peak("fp32")[0] == 5e10
    mfu, peak = throughput.bounded_mfu(8e10, (rate, source), "fp32", "cpu", "run r at step 4")
    assert mfu == 1.0 and peak[0] == 8e10 and "achieved by run r at step 4" in peak[1]
    assert throughput.cpu_peak("fp32")[0] == 8e10  # the cache took the achieved rate
    assert throughput.bounded_mfu(4e10, peak, "fp32", "cpu", "x")[0] == 0.5


def test_a_slowed_probe_never_prints_mfu_above_100_percent(tiny_modernbert_dir, one_torch_thread, monkeypatch):
    from app.throughput_panel import panel_markdown

    monkeypatch.setattr(throughput, "probe_cpu_peak", lambda precision, probes=5: SLOW)
    sets = {"recipe": "clm_detour", "phases.main.steps": 4, "phases.decay.steps": 2, "logging.log_every": 2,
            "logging.eval_every": 100, "logging.checkpoint_every": 100, "logging.eval_batches": 1}  # fmt: skip
    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "slowprobe", **sets))
    assert train_run(run)["state"] == "done"
    rows = [r for r in read_metrics(run) if r["type"] == "train"]
    assert rows and all(0 < r["mfu"] <= 1 for r in rows)
    assert rows[0]["mfu"] == 1.0 and "achieved by run slowprobe" in rows[0]["peak_source"]  # the probe was beaten
    assert all(r["peak_flops"] > SLOW for r in rows)
    log = (run / "train.log").read_text()
    doc_text, panel = report(diagnose(run)), panel_markdown(run.name)
    for text in (log, doc_text, panel):
        found = _percentages(text) if text is not panel else [float(x) for x in re.findall(r"\| ([0-9.]+)% of", text)]
        assert found and max(found) <= 100, text
    assert "GFLOP/s (achieved by run slowprobe" in doc_text and "achieved by run slowprobe" in panel


def test_an_old_run_above_100_percent_is_called_unreliable():
    """Runs logged before the peak was bounded (train.log once printed MFU 985%): the figure is not repeated."""
    text = throughput.format_mfu(9.85, 1.5e8, "measured fp32 512x512 matmul")
    assert text.startswith("MFU unreliable") and "985" not in text and max(_percentages(text)) <= 100
    assert throughput.format_mfu(0.452, 1.5e11, "best of 5 probes") == "MFU 45.2% of 150 GFLOP/s (best of 5 probes)"


def test_the_doctor_never_sells_compile_to_an_fp32_cpu_run_with_a_bf16_figure():
    from backend.runs.doctor import findings

    cfg = {"train": {"compile": False, "seq_len": 256}, "logging": {}}
    fp32 = dict(findings(cfg, {"device": "cpu", "precision": "fp32"}, None))
    bf16 = dict(findings(cfg, {"device": "cpu", "precision": "bf16"}, None))
    assert "1.2x" not in fp32["compile is off"] and "not measured" in fp32["compile is off"]
    assert "about 1.2x in bf16" in bf16["compile is off"]


def test_the_probe_leaves_the_seeded_generator_where_it_was():
    """Training seeds torch before it measures the peak: the probe's random operands must not shift what follows."""
    import torch

    torch.manual_seed(0)
    expected = torch.rand(4)
    torch.manual_seed(0)
    throughput.probe_cpu_peak("fp32", probes=1)
    assert torch.equal(torch.rand(4), expected)

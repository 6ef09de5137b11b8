"""train.precision auto: bf16 only where the hardware runs it fast; the choice is cached, logged and recorded."""

from __future__ import annotations

import json

import pytest
import yaml

from backend.engine import precision
from backend.runs.train import prepare_runs, train_run
from conftest import tiny_train_cfg


def _probe(speedup: float) -> dict:
    return {"cpu": "Test CPU", "bf16_speedup": speedup, "fp32_gflops": 100.0, "bf16_gflops": 100.0 * speedup}


def test_explicit_precisions_are_kept():
    for p in ("fp32", "bf16", "fp16"):
        assert precision.resolve_precision(p, "cpu") == (p, "set in the config")


@pytest.mark.parametrize(("speedup", "want"), [(0.03, "fp32"), (1.1, "fp32"), (4.2, "bf16")])
def test_auto_on_cpu_follows_the_measured_bf16_speed(monkeypatch, speedup, want):
    monkeypatch.setattr(precision, "cpu_bf16_probe", lambda refresh=False: _probe(speedup))
    got, why = precision.resolve_precision("auto", "cpu")
    assert got == want and f"{speedup:.2f}x" in why and "Test CPU" in why


def test_bf16_warning_names_the_measured_factor(monkeypatch):
    monkeypatch.setattr(precision, "cpu_bf16_probe", lambda refresh=False: _probe(0.04))
    msg = precision.bf16_warning("bf16", "cpu")
    assert "25x slower" in msg and "auto" in msg
    assert precision.bf16_warning("fp32", "cpu") is None
    assert precision.bf16_warning("bf16", "cuda") is None
    monkeypatch.setattr(precision, "cpu_bf16_probe", lambda refresh=False: _probe(3.0))
    assert precision.bf16_warning("bf16", "cpu") is None


def test_probe_is_measured_once_per_machine_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DETOUR_CACHE_DIR", str(tmp_path))
    first = precision.cpu_bf16_probe()
    assert first["fp32_gflops"] > 0 and first["bf16_gflops"] > 0 and first["bf16_speedup"] > 0
    (cached,) = tmp_path.glob("cpu-bf16-*.json")
    assert json.loads(cached.read_text()) == first

    def boom(*a, **k):
        raise AssertionError("measured again")

    monkeypatch.setattr(precision, "_time_matmul", boom)
    assert precision.cpu_bf16_probe() == first


def test_auto_run_records_the_resolved_precision(tiny_modernbert_dir, isolated_runs_dir, monkeypatch):
    monkeypatch.setattr(precision, "cpu_bf16_probe", lambda refresh=False: _probe(0.05))
    cfg = tiny_train_cfg(tiny_modernbert_dir, "auto", recipe="mlm", **{"train.precision": "auto"})
    (run,) = prepare_runs(cfg)
    assert train_run(run)["state"] == "done"
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["train"]["precision"] == "auto"  # what was asked: a queued run may train on another machine
    assert saved["_meta"]["precision"]["requested"] == "auto"
    assert saved["_meta"]["precision"]["resolved"] == "fp32" and "no native bf16" in saved["_meta"]["precision"]["why"]
    assert "precision: fp32 (auto: bf16 matmul only 0.05x" in (run / "train.log").read_text()


def test_probe_takes_the_median_of_alternating_rounds_so_one_busy_moment_does_not_decide(tmp_path, monkeypatch):
    """A best-of-3 per precision once read 0.51x on a CPU whose bf16 runs 2x fp32 (the machine was busy while the
    bf16 side ran): the speed-up is the median of per-round ratios of fp32 and bf16 timed in alternation."""
    monkeypatch.setenv("DETOUR_CACHE_DIR", str(tmp_path))
    # (fp32 s, bf16 s) per round: one round where bf16 was slowed down, one where fp32 was
    rounds = iter([(2.0, 4.0), (2.0, 1.0), (2.0, 1.0), (9.0, 1.0), (2.2, 1.0)])
    pending: list[float] = []

    def fake(dtype, n=precision.PROBE_N, reps=3):
        if not pending:
            pending.extend(next(rounds))
        return pending.pop(0)

    monkeypatch.setattr(precision, "_time_matmul", fake)
    probe = precision.cpu_bf16_probe(refresh=True)
    assert probe["bf16_speedup"] == 2.0 and probe["speedup_range"] == [0.5, 9.0]
    assert precision.resolve_precision("auto", "cpu")[0] == "bf16"


def test_probe_cache_is_per_bf16_flags_not_only_per_cpu_name(tmp_path, monkeypatch):
    """Two hosts called "AMD EPYC", one with AVX512-BF16 and one without, must not share a cached answer."""
    monkeypatch.setenv("DETOUR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(precision, "cpu_name", lambda: "AMD EPYC")
    monkeypatch.setattr(
        precision, "_time_matmul", lambda dtype, n=0, reps=3: 1.0 if dtype == precision.torch.float32 else 4.0
    )
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2"}))
    assert precision.cpu_bf16_probe()["bf16_speedup"] == 0.25
    monkeypatch.setattr(
        precision, "_time_matmul", lambda dtype, n=0, reps=3: 1.0 if dtype == precision.torch.float32 else 0.25
    )
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "avx512_bf16"}))
    probe = precision.cpu_bf16_probe()
    assert probe["bf16_speedup"] == 4.0 and probe["bf16_flags"] == ["avx512_bf16"]
    assert len(list(tmp_path.glob("cpu-bf16-*.json"))) == 2

"""bench/bench_gpu.py on CPU: the --cpu-smoke run works end to end, and its causality check catches the known traps."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "bench_gpu.py"


def _load_bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_gpu"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench():
    return _load_bench()


@pytest.mark.slow  # ~1 min: compiles flex_attention (checks) and the encoder (sdpa:chunked:on, CLM and MLM)
def test_cpu_smoke_end_to_end(tmp_path, bench):
    out = tmp_path / "gpu.json"
    # as users run the bench: torch's threads on every core (the suite's own OMP_NUM_THREADS=1 is not passed on). A
    # compiled CLM step aborted with heap corruption on a 2-core AVX512-BF16 CPU on both cores, never on one.
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    # one sequence length (the smoke's default runs 64 and 128): the second only compiled the same step again for a
    # new shape, ~60 s of the suite for no path the first does not take
    cmd = [sys.executable, str(SCRIPT), "--cpu-smoke", "--seq-lens", "64", "--steps", "2", "--warmup", "1"]
    cmd += ["--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    rows = {(r["setup"], r["seq_len"], r["objective"]): r for r in data["results"]}
    setups = [*bench.SMOKE_SETUPS, "hf"]
    assert set(rows) == {(s, 64, o) for s in setups for o in ("clm", "mlm")}
    for (setup, t, objective), r in rows.items():
        if setup.startswith("flex_attention"):  # no flex backward on a CPU: said, not crashed
            assert r["status"] == "skipped" and "no flex backward on CPU" in r["reason"], r
            continue
        assert r["status"] == "ok", r
        assert r["tokens_per_s"] > 0 and r["mfu_vs_probe"] > 0 and r["model_flops_per_token"] > 0
        assert r["speedup_vs_hf"] == pytest.approx(r["tokens_per_s"] / rows[("hf", t, objective)]["tokens_per_s"])
        if setup not in ("hf", bench.BEFORE):  # same weights and batches as "before": the same losses
            assert r["loss_max_abs_diff_vs_before"] < 1e-4, r
    defaults = rows[(bench.DEFAULTS, 64, "clm")]
    assert (defaults["attn"], defaults["loss_kind"], defaults["compiled"]) == ("sdpa", "chunked", False)  # CPU
    assert rows[("sdpa:chunked:on", 64, "mlm")]["compiled"] is True
    assert rows[(bench.BEFORE, 64, "clm")]["labelled_fraction"] > 0.95  # every position but the last
    assert 0.15 < rows[(bench.BEFORE, 64, "mlm")]["labelled_fraction"] < 0.45
    assert 0.15 < rows[("hf", 64, "mlm")]["labelled_fraction"] < 0.45  # the collator's 30%, sparse prediction
    assert data["modernbert_pipeline"]["tokens_per_s_per_gpu"] == pytest.approx(304_267, rel=1e-3)
    ran = {(c["impl"], c["precision"]): c for c in data["causality"] if c["status"] == "ran"}
    assert set(ran) == {("sdpa", "fp32"), ("sdpa", "bf16"), ("eager", "fp32"), ("flex_attention", "fp32")}
    for c in ran.values():
        assert c["pass"], c
        assert set(c["checks"]) == {"future_invariance", "local_window", "global_reach", "reference"}
    (flash,) = [c for c in data["causality"] if c["impl"] == "flash_attention_2"]
    assert flash["status"] == "skipped" and flash["pass"] is None
    assert data["causality_pass"] is True
    table = out.with_suffix(".md").read_text()
    assert table.count("| hf |") == 2 and "| ref |" in table and "304,267" in table


def test_without_cuda_exits_with_a_message(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "x.json")], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 3
    assert "no CUDA device" in proc.stderr and "--cpu-smoke" in proc.stderr
    assert not (tmp_path / "x.json").exists()


# --- the check has teeth: each known trap makes the matching check fail -------------------------------------------


def _window_lost(model, input_ids, pad_mask, causal, dtype=None):
    """Trap 1: one 4D causal mask for every layer (local layers lose their window)."""
    t = input_ids.shape[1]
    allowed = torch.ones(t, t, dtype=torch.bool).tril()
    mask = torch.zeros(t, t).masked_fill(~allowed, torch.finfo(torch.float32).min)
    return contextlib.nullcontext(mask[None, None].expand(input_ids.shape[0], 1, t, t) if causal else None)


@contextlib.contextmanager
def _flag_only(model, input_ids, pad_mask, causal, dtype=None):
    """Trap 2: is_causal=True on every module with the model's own (bidirectional) masks present."""
    mods = [m.attn for m in model.model.layers] if causal else []
    for m in mods:
        m.is_causal = True
    try:
        yield torch.ones_like(input_ids) if causal else None
    finally:
        for m in mods:
            m.is_causal = False


def _never_causal(model, input_ids, pad_mask, causal, dtype=None):
    """Trap 3: the causal switch does nothing."""
    return contextlib.nullcontext(None)


@pytest.mark.parametrize(
    "trap, impl, expect_fail",
    [
        (_window_lost, "sdpa", {"local_window"}),
        (_window_lost, "eager", {"local_window"}),
        (_flag_only, "sdpa", {"future_invariance"}),
        (_never_causal, "sdpa", {"future_invariance", "global_reach"}),
    ],
)
def test_causality_check_catches_traps(bench, monkeypatch, trap, impl, expect_fail):
    a = bench.parse_args(["--cpu-smoke", "--check-only", "--check-impls", impl])
    monkeypatch.setattr(bench, "causal_attention", trap)
    (res,) = [r for r in bench.run_checks(bench.TINY_ARCH, a, torch.device("cpu")) if r["precision"] == "fp32"]
    assert not res["pass"]
    failed = {name for name, c in res["checks"].items() if not c["pass"]}
    assert expect_fail <= failed, res["checks"]


def test_oom_is_recorded_and_retried_with_more_accumulation(bench, monkeypatch):
    tried = []

    def fake_train(*args, seq_len, accum, **kw):
        tried.append(accum)
        if seq_len == 128 or accum < 4:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.00 GiB")
        return {"status": "ok", "tokens_per_s": 1.0, "step_time_s_mean": 1.0, "achieved_tflops": 1.0, "losses": []}

    monkeypatch.setattr(bench, "train_ours", fake_train)
    a = bench.parse_args(["--cpu-smoke", "--setups", bench.BEFORE, "--no-hf", "--objectives", "clm"])
    rows, errored = bench.run_benchmarks(bench.TINY_ARCH, a, torch.device("cpu"), {})
    assert not errored
    by_len = {r["seq_len"]: r for r in rows}
    assert by_len[64]["status"] == "ok" and tried[:3] == [1, 2, 4]  # batch 8: 1 -> 2 -> 4 fits
    assert by_len[128]["status"] == "oom" and by_len[128]["grad_accum"] == 4  # batch 4: 1 -> 2 -> 4, still OOM
    assert "out of memory" in by_len[128]["error"]
    a = bench.parse_args(["--cpu-smoke", "--setups", bench.BEFORE, "--no-hf", "--objectives", "clm", "--no-oom-retry"])
    tried.clear()
    rows, _ = bench.run_benchmarks(bench.TINY_ARCH, a, torch.device("cpu"), {})
    assert [r["status"] for r in rows] == ["oom", "oom"] and tried == [1, 1]


def test_a_setup_that_cannot_train_here_is_a_skipped_row_and_the_hf_row_is_the_yardstick(bench, monkeypatch):
    def row(tokens_per_s: float):
        ok = {"status": "ok", "tokens_per_s": tokens_per_s, "step_time_s_mean": 1.0, "achieved_tflops": 1.0}
        return lambda *a, accum, **kw: {**ok, "losses": []}

    monkeypatch.setattr(bench, "train_ours", row(300.0))
    monkeypatch.setattr(bench, "train_hf", row(200.0))
    a = bench.parse_args(
        ["--cpu-smoke", "--setups", "sdpa:chunked:off", "flash_attention_2:auto:auto", "--seq-lens", "64"]
    )
    a.objectives = ["mlm"]
    rows, errored = bench.run_benchmarks(bench.TINY_ARCH, a, torch.device("cpu"), {})
    got = {r["setup"]: r for r in rows}
    assert not errored and list(got) == ["sdpa:chunked:off", "flash_attention_2:auto:auto", "hf"]
    assert got["flash_attention_2:auto:auto"]["status"] == "skipped"
    assert "flash_attention_2 cannot run here: no CUDA device" in got["flash_attention_2:auto:auto"]["reason"]
    assert got["sdpa:chunked:off"]["speedup_vs_hf"] == 1.5 and got["hf"]["speedup_vs_hf"] == 1.0


def test_setups_are_parsed_and_bad_ones_named(bench):
    assert bench.Setup.parse("flex_attention:fused:on") == bench.Setup("flex_attention", "fused", "on")
    with pytest.raises(SystemExit):
        bench.parse_args(["--cpu-smoke", "--setups", "sdpa:cheap:off"])


def test_levers_parse_and_are_refused_where_they_cannot_run(bench):
    """A lever is part of the setup's name (so its row says what ran) and a CPU refuses it with the reason, as a
    'skipped' row rather than a silent run without it."""
    setup = bench.Setup.parse("auto:auto:auto+fp8+liger-norm")
    assert setup.levers == ("fp8", "liger-norm") and setup.name == "auto:auto:auto+fp8+liger-norm"
    with pytest.raises(ValueError, match="LEVER"):
        bench.Setup.parse("auto:auto:auto+turbo")
    with pytest.raises(bench.ConfigError, match="CUDA"):
        setup.resolve(bench._config(bench.TINY_ARCH), torch.device("cpu"))
    assert bench.gpu_levers.unavailable(("autotune", "cudagraphs"), torch.device("cuda")) is not None


def test_a_lever_that_changes_nothing_is_an_error(bench):
    """liger-geglu on a model without ModernBERT's MLP would measure the plain setup under the lever's name."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with pytest.raises(RuntimeError, match="found nothing"):
        bench.gpu_levers.apply(model, ("liger-geglu",))

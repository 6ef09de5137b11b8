"""LR values at phase boundaries, from the recipe's phase plan."""

from __future__ import annotations

import math

import pytest

from backend.detour.recipe import build_phases, locate, split_pair
from backend.engine.config import load_config


def _cfg(**over):
    sets = [f"{k.replace('__', '.')}={v}" for k, v in over.items()]
    return load_config(None, ["train.seq_len=64", "train.batch_size=4", *sets])


def test_detour_phase_plan_and_lr_at_boundaries():
    cfg = _cfg(recipe="clm_detour", phases__main__steps=100, train__warmup_tokens=64 * 4 * 10)
    warm, main = None, None
    phases = build_phases(cfg)
    main, decay = phases
    assert (main.objective, main.causal, decay.objective, decay.causal) == ("clm", True, "mlm", False)
    assert decay.steps == 10 and decay.mlm_probability == 0.15
    assert main.lr_factor(0) == pytest.approx(0.1)  # linear warmup over 10 steps
    assert main.lr_factor(9) == pytest.approx(1.0)
    assert main.lr_factor(99) == 1.0  # constant after warmup
    assert decay.lr_factor(0) == 1.0  # schedule resets to the peak, no warmup
    assert decay.lr_factor(5) == pytest.approx(0.1 + 0.9 * (1 - math.sqrt(0.5)))
    assert decay.lr_factor(10) == pytest.approx(0.1)  # ends at 10% of peak
    assert locate(phases, 99) == (0, 99) and locate(phases, 100) == (1, 0)
    del warm


def test_baseline_has_identical_structure_and_budget():
    cfg = _cfg(recipe="pair", phases__main__tokens=64 * 4 * 50)
    (r1, detour), (r2, mlm) = split_pair(cfg)
    pd, pm = build_phases(detour), build_phases(mlm)
    assert [p.steps for p in pd] == [p.steps for p in pm] == [50, 5]
    assert pm[0].objective == "mlm" and pm[0].mlm_probability == 0.30
    assert detour["train"]["seed"] == mlm["train"]["seed"]
    assert (detour["name"], mlm["name"]) == (f"{cfg['name']}-detour", f"{cfg['name']}-mlm")


def test_linear_decay_option_and_warmup_phase():
    cfg = _cfg(recipe="mlm", phases__main__steps=40, phases__warmup__steps=8, phases__decay__shape="linear")
    warm, main, decay = build_phases(cfg)
    assert warm.objective == "mlm" and main.warmup_steps == 0  # LR warmup happens in the warm-up phase
    assert decay.lr_factor(2) == pytest.approx(0.1 + 0.9 * (1 - 2 / 4))

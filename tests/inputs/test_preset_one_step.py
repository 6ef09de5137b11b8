"""Presets obey the phase list's one-step rule, per phase: a part given a share of the budget must hold one optimizer
step, or the config is refused naming the part and its budget (it used to be dropped without a word)."""

from __future__ import annotations

import pytest

from backend.core.errors import ConfigError
from backend.detour.budget import check_step_fits
from backend.detour.recipe import build_phases
from backend.engine.config import load_config


def refused(*sets: str) -> str:
    """The message of the check training and ``validate`` make (``preflight.check``: the phases, then the step)."""
    cfg = load_config(None, list(sets))
    with pytest.raises(ConfigError) as e:
        build_phases(cfg)
        check_step_fits(cfg)
    return str(e.value)


def test_alternate_small_budget_is_refused_naming_the_clm_block():
    msg = refused("recipe=alternate", "alternate.tokens=100")
    assert "phase 'b1-clm' gets 17 tokens" in msg and "one optimizer step of 4,096 tokens" in msg


def test_hybrid_small_budget_is_refused_naming_the_clm_part():
    assert "phase 'clm' gets 50 tokens" in refused("recipe=hybrid", "hybrid.tokens=100")


def test_a_tiny_weight_block_is_refused_whatever_the_budget():
    msg = refused("recipe=alternate", "alternate.tokens=1000000", "alternate.blocks=clm:1, mlm:100000000")
    assert "phase 'b1-clm' gets 0.01 tokens" in msg


def test_mask_schedule_small_budget_is_refused():
    assert "phase 'mask30' gets 100 tokens" in refused("recipe=mask_schedule", "mask_schedule.tokens=300")


def test_clm_detour_is_refused_by_the_same_rule():
    assert "the whole budget of phase 'main' (100 tokens)" in refused("recipe=clm_detour", "phases.main.tokens=100")


def test_share_zero_still_leaves_its_part_out_and_defaults_pass():
    cfg = load_config(None, ["recipe=hybrid", "hybrid.clm_share=0"])
    assert [p.objective for p in build_phases(cfg)][0] == "mlm"
    for recipe in ("alternate", "hybrid", "mask_schedule"):
        check_step_fits(load_config(None, [f"recipe={recipe}"]))


def test_validate_refuses_it_in_one_line(capsys):
    from backend.__main__ import main

    assert main(["validate", "--set", "recipe=alternate", "--set", "alternate.tokens=100"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "phase 'b1-clm' gets 17 tokens" in err


def test_a_step_just_over_the_budget_is_not_called_1_0x_the_budget():
    """A 512-token step against a 500-token phase read "1.0x the whole budget", as if it fitted."""
    msg = refused("recipe=clm_detour", "phases.main.tokens=500", "train.batch_size=2")
    assert "one optimizer step is 512 tokens" in msg and "1.02x the whole budget of phase 'main' (500 tokens)" in msg

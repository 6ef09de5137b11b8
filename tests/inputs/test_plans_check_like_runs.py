"""A ``--plan`` refuses what its run would refuse, in the same one line: it printed a time and a power for inputs the
run then rejected (``evaluate --suite --plan --seeds -2`` planned a negative time and an infinite difference)."""

from __future__ import annotations

import pytest

from tests.inputs.test_one_line_refusals import one_line

SUITE_PLAN = ["evaluate", "--suite", "demo", "--plan", "--models"]
EVALUATE = [
    (["detour-tiny-en", "no-such-model"], "model 'no-such-model': no run named no-such-model"),
    (["detour-tiny-en", "detour-tiny-en"], "model labels must be distinct"),
    (["detour-tiny-en", "detour-tiny-en", "--labels", "a", "a"], "model labels must be distinct"),
    (["detour-tiny-en", "--seeds", "-2"], "'seeds': got -2; give a count from 1 to 10,000"),
    (["detour-tiny-en", "--seeds", "0"], "'seeds': got 0; give a count"),  # was the suite's own seeds, silently
    (["detour-tiny-en", "--seeds", "1,1"], "'seeds': got [1, 1]; give a non-empty list of distinct integers"),
    (["detour-tiny-en", "--epochs", "0"], "'epochs': got 0"),
]


@pytest.mark.parametrize("flags, said", EVALUATE, ids=[" ".join(f) for f, _ in EVALUATE])
def test_a_suite_plan_checks_models_labels_seeds_and_settings_as_the_run_does(flags, said, capsys):
    assert said in one_line(capsys, [*SUITE_PLAN, *flags])


def test_a_suite_plan_of_good_inputs_still_plans(capsys):
    from backend.__main__ import main

    assert main([*SUITE_PLAN, "detour-tiny-en", "--seeds", "3"]) == 0
    out = capsys.readouterr().out
    assert "demo-ner: 3 seeds" in out and "ncbi-slice: 3 seeds" in out and "  power: " in out


def test_the_detour_studys_pretraining_seeds_are_named_by_their_own_flag(capsys):
    """``--pretrain-seeds 0`` was said as '--seeds', the flag of the fine-tuning seeds."""
    line = one_line(capsys, ["replicate", "--pretrain-seeds", "0", "--plan"])
    assert "'--pretrain-seeds': got 0" in line
    assert "config key 'seeds': got 0; a whole number of pretraining" in one_line(
        capsys, ["replicate", "--set", "seeds=0", "--plan"]
    )

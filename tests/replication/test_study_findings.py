"""The detour study's findings rules (low-layer ratio against the seed-noise control, the freezes) and the sweep's
CKA over several measures, cached per measure."""

from __future__ import annotations

import math

import pytest

from backend.replication.study_findings import freeze_verdict, low_blocks, ratio_summary, ratio_verdict, seed_ratio


def test_the_low_third_indexes_blocks_after_the_embeddings():
    assert low_blocks({"low_range": "0-1"}) == [1, 2] and low_blocks({"low_range": "0-7"}) == list(range(1, 9))
    assert low_blocks({"low_range": "0"}) == [1]


def test_a_seed_ratio_is_the_geometric_mean_over_the_low_blocks():
    arm, control = [0.0, 0.08, 0.02, 0.5], [0.0, 0.01, 0.01, 0.01]
    assert seed_ratio(arm, control, [1, 2]) == pytest.approx(math.sqrt(8 * 2))
    assert seed_ratio(arm, [0.0, 0.0, 0.01, 0.01], [1, 2]) is None  # a zero control divergence: no ratio, no inf
    assert seed_ratio(None, control, [1]) is None and seed_ratio(arm, control[:2], [1, 2]) is None


@pytest.mark.parametrize(
    "per_seed, verdict",
    [
        ({"0": 6.0, "1": 7.0, "2": 6.5}, "replicated"),  # above 1, at the paper's 5x
        ({"0": 3.0, "1": 3.2, "2": 2.8}, "partly replicated"),  # above 1, below 5x
        ({"0": 1.1, "1": 1.0, "2": 1.2}, "not replicated"),  # the interval lies below 2x
        ({"0": 0.5, "1": 9.0}, "inconclusive"),  # two seeds that disagree: the interval holds 1 and 2
        ({"0": 6.0}, "replicated"),  # one seed: the point alone (and the report says so)
        ({"0": 1.5}, "not replicated"),
        ({"0": None}, "not measured"),
    ],
)
def test_the_low_layer_verdict_reads_the_interval_over_pretraining_seeds(per_seed, verdict):
    r = ratio_summary(per_seed)
    assert ratio_verdict(r) == verdict
    if r["n"] >= 2:
        assert r["ci95"][0] < r["ratio"] < r["ci95"][1]


def _p(verdict: str, mean: float) -> dict:
    return {"verdict": verdict, "mean_delta": {"value": mean, "ci95": [mean - 1, mean + 1]}}


@pytest.mark.parametrize(
    "detour, low, mid, verdict",
    [
        (_p("better", 2.0), _p("inconclusive", 0.2), _p("better", 1.8), "replicated"),
        (_p("better", 2.0), _p("better", 1.9), _p("better", 1.8), "partly replicated"),  # low frozen keeps the gain
        (_p("better", 2.0), _p("inconclusive", 0.1), _p("inconclusive", 0.4), "partly replicated"),
        (_p("better", 2.0), _p("better", 2.5), _p("worse", -1.0), "not replicated"),
        (_p("worse", -2.0), _p("inconclusive", 0.0), _p("better", 1.0), "inconclusive"),  # no gain to remove
        (None, _p("inconclusive", 0.0), _p("better", 1.0), "not measured"),
    ],
)
def test_the_freeze_verdict_needs_a_gain_to_remove(detour, low, mid, verdict):
    assert freeze_verdict(detour, low, mid)[0] == verdict


def test_the_sweep_measures_each_cka_measure_once_and_keeps_the_ones_it_has():
    """A run measured with debiased CKA earlier gains linear without the debiased numbers being recomputed; the
    bundled model against itself diverges by ~0 under both."""
    from backend.core.paths import DEMO_CORPUS
    from backend.sweeps.measure import _cka

    ev = {"cka_texts": str(DEMO_CORPUS), "cka_n_texts": 16, "cka_max_len": 32, "cka_measures": ["debiased", "linear"]}
    kept = {"mean": 0.123, "layers": [0.0, 0.2, 0.3]}
    rec = _cka("detour-tiny-en", "detour-tiny-en", ev, {"cka_by_measure": {"debiased": kept}})
    assert rec["cka_by_measure"]["debiased"] == kept and rec["cka_divergence"] == 0.123
    lin = rec["cka_by_measure"]["linear"]
    assert len(lin["layers"]) == 7 and max(abs(x) for x in lin["layers"]) < 1e-6 and rec["cka_measure"] == "debiased"


@pytest.mark.parametrize(
    "points, says",
    [
        ([(1e6, -2, (-3, -1)), (1e7, 0.2, (-0.5, 0.9)), (1e8, 1.5, (0.4, 2.6))], "From somewhere between 1M and 100M"),
        ([(1e6, 0.1, (-1, 1)), (1e7, 1.0, (0.2, 1.8))], "From 10M tokens or fewer (below it the interval holds 0"),
        ([(1e6, 2.0, (1, 3)), (1e7, -1.5, (-2.6, -0.4))], "It pays at 1M and stops"),
        ([(1e6, -2, (-3, -1)), (1e7, 0.5, (-1, 2))], "Not within the budgets tried (1M-10M tokens): the detour is"),
    ],
)
def test_the_answer_names_a_budget_only_where_its_interval_lies_above_0(points, says):
    from backend.replication.crossover import crossover
    from backend.replication.study_findings import pays_from

    st = crossover([{"tokens": t, "value": v, "ci95": list(ci)} for t, v, ci in points])
    assert pays_from(st).startswith(says)


def test_a_study_without_its_control_and_freezes_states_no_rule_for_them(tmp_path):
    """Run with --no-interventions (the detour against MLM alone), the report read "the geometric mean over the lower
    third's blocks (None)" and gave rules for a control row and freezes it did not have."""
    import json

    from backend.replication.study_findings import findings, render

    cells = [{"values": {"arm": arm, "phases.main.tokens": 1024000}, "runs": {"0": f"{arm}-s0"}}
             for arm in ("mlm", "clm_detour")]  # fmt: skip
    manifest = {"axes": [{"key": "arm"}, {"key": "phases.main.tokens"}], "cells": cells}
    (tmp_path / "sweep.json").write_text(json.dumps(manifest))
    point = {"tokens": 1024000, "verdict": "inconclusive", "mean_delta": {"value": -4.51, "ci95": [-12.25, 3.23]}}
    rep = {"panels": {"CLM detour": [point]}}
    settings = {"budgets": [1024000], "cka": {"measures": ["debiased"]}}  # no "layers": --no-interventions
    f = findings(rep, tmp_path, settings, {"clm_detour": "CLM detour", "mlm": "MLM"})
    text = "\n".join(render(f))
    assert "None" not in text and "lower third's blocks" not in text, text
    assert "Low-layer ratio: not measured" in text and "control row" not in text and "Freezes:" not in text
    assert "-4.51 [-12.25, +3.23]" in text

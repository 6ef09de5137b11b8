"""The smallest detectable difference: the variance components recovered from simulated studies, and the planned
difference found 80% of the time by the very rule the report uses (``delta_verdict``), at both seed levels."""

from __future__ import annotations

import math

import numpy as np
import pytest

from backend.evaluation import power
from backend.evaluation.delta_verdict import delta_verdict


def _study(rng, delta, c: power.Components, p: int, t: int, f: int) -> np.ndarray:
    """One simulated study's differences (P x T x F) under the nested model of ``power``."""
    a = rng.normal(0, math.sqrt(c.pretraining), (p, 1, 1))
    r = rng.normal(0, math.sqrt(c.task), (p, t, 1))
    e = rng.normal(0, math.sqrt(c.finetune), (p, t, f))
    return delta + a + r + e


def test_the_components_are_recovered_from_a_large_simulated_study():
    rng = np.random.default_rng(1)
    truth = power.Components(pretraining=4.0, task=9.0, finetune=16.0)
    groups = [_study(rng, 0.0, truth, 40, 6, 4) for _ in range(10)]
    c = power.components(groups, [f"t{i}" for i in range(6)])
    assert c.finetune_measured and c.finetune == pytest.approx(16.0, rel=0.08)
    assert c.task == pytest.approx(9.0, rel=0.15) and c.pretraining == pytest.approx(4.0, rel=0.3)


@pytest.mark.parametrize("p, t, f", [(3, 3, 1), (5, 3, 2), (2, 4, 3)])
def test_the_planned_difference_is_found_80_percent_of_the_time_by_the_reports_rule(p, t, f):
    """Pretraining seeds: the rule is t over the pretraining-seed means; at the planned difference it says 'up' in
    about 80% of simulated studies (and at no difference in about 2.5%)."""
    c = power.Components(pretraining=4.9, task=12.9, finetune=30.0)
    mde = power.detectable(c, p, t, f)
    rng = np.random.default_rng(7)
    for delta, want in ((mde, 0.80), (0.0, 0.025)):
        ups = 0
        for _ in range(1000):
            d = _study(rng, delta, c, p, t, f)
            diffs = {f"t{j}": {(i, k): float(d[i, j, k]) for i in range(p) for k in range(f)} for j in range(t)}
            ups += delta_verdict(diffs)["direction"] == "up"
        assert ups / 1000 == pytest.approx(want, abs=0.04), (delta, ups)


def test_with_one_pretraining_seed_the_suites_rule_is_simulated():
    """Fixed checkpoints: the per-task paired t over fine-tuning seeds combined by Stouffer's z, as the suite says."""
    c = power.Components(pretraining=0.0, task=0.0, finetune=25.0)
    mde = power.detectable(c, 1, 3, 4)
    rng = np.random.default_rng(3)
    ups = 0
    for _ in range(1500):
        d = rng.normal(mde, 5.0, (3, 4))
        ups += delta_verdict({f"t{j}": dict(enumerate(d[j])) for j in range(3)})["direction"] == "up"
    assert ups / 1500 == pytest.approx(0.8, abs=0.035)
    assert math.isinf(power.detectable(c, 1, 3, 1))  # one checkpoint, one fine-tuning seed: no interval at all


def test_more_evaluation_sentences_shrink_only_the_evaluation_share_and_never_below_the_measured():
    """One fine-tuning seed: the evaluation sample's binomial share of the residual is what more sentences remove;
    the share is never larger than what was measured."""
    rng = np.random.default_rng(2)
    truth = power.Components(pretraining=1.0, task=4.0, finetune=30.0)
    groups = [_study(rng, 0.0, truth, 5, 3, 1) for _ in range(20)]
    tasks = ["a", "b", "c"]
    c = power.components(groups, tasks, {k: 80 for k in tasks}, {k: 1.0 for k in tasks}, {k: 20.0 for k in tasks})
    binomial = 2 * 0.2 * 0.8 / 1.0 * 1e4  # two models' F1 of 20 points, one entity a sentence, per sentence
    assert not c.finetune_measured and 0 < c.kappa["a"] <= binomial
    assert c.finetune_at()["a"] == pytest.approx(c.kappa["a"] / 80)  # one seed: the residual beyond it is task-level
    at80, at800 = power.detectable(c, 5, 3, 1), power.detectable(c, 5, 3, 1, {k: 800 for k in tasks})
    assert at800 < at80 and at800 > power.floor(c, 5)
    whole = power.detectable(c, 5, 3, 1, {k: 10**9 for k in tasks})
    assert whole == pytest.approx(power._effect_needed(5) * math.sqrt(c.pretraining + c.task / 3), rel=1e-6)


def test_what_it_takes_is_the_smallest_count_that_reaches_the_target():
    c = power.Components(pretraining=0.5, task=6.0, finetune=20.0)
    n = power.smallest(lambda k: power.detectable(c, k, 3, 1), 1.0, 3)
    assert power.detectable(c, n, 3, 1) <= 1.0 < power.detectable(c, n - 1, 3, 1)
    assert power.smallest(lambda k: power.detectable(c, 3, k, 1), 1.0, 3, limit=1000) is None  # pretraining floor
    assert power.floor(c, 3) > 1.0

"""Issue 31 section 2: the suite statistics against an independent, direct implementation of Agarwal et al. 2021's
definitions (rliable's own code cannot be a test dependency: rliable 1.2.0 needs arch < 8, and arch 7.2 does not
import with our pandas 3.1.1), and the case the section is for: every task favours A by a little, no task alone
says so, the suite does."""

from __future__ import annotations

import random
import statistics

import numpy as np
import pytest
from scipy import stats

from backend.evaluation.aggregate import bootstrap, compare, iqm, percentile_ci, probability_of_improvement, t_summary

# Test F1 (points) of two models, 5 fine-tuning seeds x 3 tasks (runs x tasks, rliable's layout).
A = np.array([[61.2, 48.9, 70.3], [58.7, 52.4, 71.8], [63.0, 47.1, 69.9], [60.1, 50.6, 72.5], [57.4, 49.8, 70.8]])
B = np.array([[59.8, 47.2, 70.9], [58.1, 50.9, 69.7], [61.7, 48.3, 70.1], [57.9, 49.0, 71.2], [58.8, 46.5, 69.4]])
REPS = 4000


def cols(m):
    return [m[:, j] for j in range(m.shape[1])]


def close(ci, ref, width):
    """Two bootstrap intervals from different random draws: endpoints within 10% of the interval's width."""
    ref = np.ravel(ref)
    return abs(ci[0] - ref[0]) < 0.1 * width and abs(ci[1] - ref[1]) < 0.1 * width


def ref_iqm(values: list[float]) -> float:
    """The mean of the middle half, written out (n divisible by 4: no fractional weights)."""
    v = sorted(values)
    q = len(v) // 4
    return statistics.fmean(v[q : len(v) - q])


def ref_poi(a_tasks, b_tasks) -> float:
    """P(A > B): per task the Mann-Whitney U of A over B (scipy) over all run pairs, averaged over tasks."""
    u = [
        stats.mannwhitneyu(x, y, alternative="greater").statistic / (len(x) * len(y)) for x, y in zip(a_tasks, b_tasks)
    ]
    return statistics.fmean(u)


def ref_bootstrap(a_tasks, b_tasks, reps, seed, paired):
    """Loop by loop: per replicate, per task, seeds drawn with replacement (the same draw for both when paired)."""
    rng = random.Random(seed)
    out = {"mean_delta": [], "iqm_a": [], "poi": []}
    for _ in range(reps):
        ra, rb = [], []
        for x, y in zip(a_tasks, b_tasks):
            ia = [rng.randrange(len(x)) for _ in x]
            ib = ia if paired else [rng.randrange(len(y)) for _ in y]
            ra.append([x[i] for i in ia])
            rb.append([y[i] for i in ib])
        out["mean_delta"].append(
            statistics.fmean(statistics.fmean(p - q for p, q in zip(x, y)) for x, y in zip(ra, rb))
        )
        out["iqm_a"].append(ref_iqm([v for x in ra for v in x]))
        wins = [statistics.fmean((p > q) + 0.5 * (p == q) for p in x for q in y) for x, y in zip(ra, rb)]
        out["poi"].append(statistics.fmean(wins))
    return {k: np.array(v) for k, v in out.items()}


A8 = np.vstack([A, A[:3] + 0.7])  # 8 runs: the IQM cuts whole runs


def test_point_estimates_match_the_definitions():
    assert iqm(A8) == pytest.approx(ref_iqm(list(A8.ravel())), abs=1e-12)
    assert probability_of_improvement(cols(A), cols(B)) == pytest.approx(ref_poi(cols(A), cols(B)), abs=1e-12)
    tied = B.copy()
    tied[0, 0] = A[0, 0]  # a tie counts half
    assert probability_of_improvement(cols(A), cols(tied)) == pytest.approx(ref_poi(cols(A), cols(tied)), abs=1e-12)


@pytest.mark.parametrize("paired", [True, False])
def test_stratified_bootstrap_matches_a_direct_implementation(paired):
    keys = [list(range(8))] * 3
    b8 = np.vstack([B, B[:3] - 0.4])
    ours = bootstrap(cols(A8), cols(b8), keys, REPS, seed=1, paired=paired)
    ref = ref_bootstrap(cols(A8), cols(b8), 1000, seed=2, paired=paired)
    for k in ("mean_delta", "iqm_a", "poi"):
        ci, rci = percentile_ci(ours[k]), percentile_ci(ref[k])
        assert close(ci, rci, ci[1] - ci[0]), (k, ci, rci)
    if paired:  # pairing removes the seed effect both models share: a narrower interval than independent draws
        ind = percentile_ci(bootstrap(cols(A8), cols(b8), keys, REPS, seed=1, paired=False)["mean_delta"])
        ci = percentile_ci(ours["mean_delta"])
        assert ci[1] - ci[0] < ind[1] - ind[0]


def test_t_interval_is_scipys():
    x = A[:, 0]
    s = t_summary(list(x))
    lo, hi = stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
    assert s["ci95"] == pytest.approx([lo, hi], abs=1e-12)


def test_small_margin_on_every_task_is_a_suite_verdict_though_no_task_alone_is():
    rng = np.random.default_rng(7)
    tasks = {}
    for t in range(12):
        base = rng.normal(60, 8, 3)  # a seed moves both models alike: the paired difference removes it
        d = 1.0 + (0.8 + 0.04 * t) * np.array([1.5, -1.8, 0.3])  # every task: A ahead by 1 point on average
        tasks[f"task{t}"] = {"A": dict(enumerate(base + d)), "B": dict(enumerate(base))}
    r = compare(tasks, "A", "B", reps=4000)
    assert all(r["per_task"][t]["delta"] > 0 for t in tasks)
    assert all(r["per_task"][t]["verdict"] == "inconclusive" for t in tasks)
    assert r["verdict"] == "A better"
    assert r["aggregate"]["mean_delta"]["ci95"][0] > 0
    assert r["task_wins"] == {"a": 12, "b": 0, "ties": 0}
    assert r["settle"] is None


def test_inconclusive_suite_says_what_would_settle_it():
    rng = np.random.default_rng(3)
    tasks = {f"t{t}": {"A": dict(enumerate(rng.normal(60.3, 3, 3))), "B": dict(enumerate(rng.normal(60, 3, 3)))}
             for t in range(3)}  # fmt: skip
    r = compare(tasks, "A", "B", reps=2000)
    assert r["verdict"] == "inconclusive"
    assert r["settle"]["seeds_per_task"] > 3 and "seeds per task" in r["settle"]["text"]


def test_two_seed_levels_pair_by_both_and_interval_over_pretraining_seed_means():
    # 3 pretraining seeds x 4 fine-tuning seeds; pretraining moves A - B a lot, fine-tuning a little
    rng = np.random.default_rng(0)
    a, b = {}, {}
    for p in range(3):
        shift = [3.0, -1.0, 2.5][p]
        for f in range(4):
            b[(p, f)] = 50 + rng.normal(0, 1)
            a[(p, f)] = b[(p, f)] + shift + rng.normal(0, 0.3)
    r = compare({"ner": {"A": a, "B": b}}, "A", "B", reps=3000)
    t = r["per_task"]["ner"]
    assert t["n"] == 12 and "pretraining-seed means" in t["interval"]
    flat = t_summary([a[k] - b[k] for k in a])["ci95"]
    assert t["ci95"][1] - t["ci95"][0] > (flat[1] - flat[0])  # the interval carries the pretraining spread
    means = [sum(a[(p, f)] - b[(p, f)] for f in range(4)) / 4 for p in range(3)]
    assert t["ci95"] == pytest.approx(list(stats.t.interval(0.95, 2, loc=np.mean(means), scale=stats.sem(means))))
    assert "pretraining seeds" in r["seed_levels"]["advice"]
    one = compare({"ner": {"A": {(0, f): a[(0, f)] for f in range(4)}, "B": {(0, f): b[(0, f)] for f in range(4)}}},
                  "A", "B", reps=500)  # fmt: skip
    assert "pretraining variance not measured" in one["per_task"]["ner"]["interval"]
    assert "pretraining variance not measured" in one["seed_levels"]["advice"]
    # one fine-tuning seed under each pretraining seed: that level is not measured, never counted as 0
    ft1 = compare({"ner": {"A": {(p, 0): a[(p, 0)] for p in range(3)}, "B": {(p, 0): b[(p, 0)] for p in range(3)}}},
                  "A", "B", reps=500)  # fmt: skip
    lv = ft1["seed_levels"]
    assert lv["var_finetuning"] is None and lv["var_pretraining"] is None
    assert "fine-tuning variance not measured" in lv["advice"]

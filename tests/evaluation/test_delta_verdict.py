"""Issue 41 section 3: the verdict rule stays honest with few seeds at both levels. By simulation with no true
difference (fixed RNG seeds: deterministic), at 2, 3 and 5 seeds per level and 1-12 tasks: at most 5% false
verdicts and at least 95% coverage, where the old percentile bootstrap gives false verdicts far above 5%; the two
real cases that showed it, rebuilt from their numbers; the uninformative-task rule; F1 intervals clipped to
[0, 100] and said so."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from backend.evaluation.aggregate import bootstrap, compare, percentile_ci
from backend.evaluation.delta_verdict import (
    delta_verdict,
    pretraining_means,
    stouffer_p,
    t_interval,
)
from backend.evaluation.suite_report import panel, render_markdown, write_suite_report

FT_SEEDS, PRE_SEEDS, TASK_COUNTS = (2, 3, 5), (2, 3, 5), (1, 2, 3, 5, 8, 12)
REPS = 4000  # replicates per setting: the false-verdict rate's Monte-Carlo sd is 0.34 points at 5%


def slack(reps: int, rate: float = 0.05) -> float:
    """Monte-Carlo allowance: 3.5 standard errors of a rate estimated from ``reps`` replicates (the largest of
    ~50 settings lands within it whatever the draw)."""
    return 3.5 * math.sqrt(rate * (1 - rate) / reps)


def null_one_level(rng, reps: int, tasks: int, ft: int, noise=None) -> np.ndarray:
    """(reps, tasks, fine-tuning seeds) differences of two equally good checkpoints: every task its own spread
    (a 20-fold range), the seeds' noise normal unless ``noise`` draws it."""
    sd = np.exp(rng.normal(0, 1.5, tasks))
    e = noise((reps, tasks, ft)) if noise else rng.normal(0, 1, (reps, tasks, ft))
    return e * sd[None, :, None]


def null_two_levels(rng, reps: int, tasks: int, pre: int, ft: int) -> np.ndarray:
    """(reps, tasks, pretraining seeds, fine-tuning seeds) of two equally good recipes: a pretraining seed moves
    every task (shared) and each task its own way, fine-tuning noise on top with every task its own spread."""
    sd = np.exp(rng.normal(0, 1.5, tasks))
    shared = rng.normal(0, 1.0, (reps, 1, pre, 1))
    per_task = rng.normal(0, 0.7, (reps, tasks, pre, 1))
    return shared + per_task + rng.normal(0, 1, (reps, tasks, pre, ft)) * sd[None, :, None, None]


def rule_rejects(d: np.ndarray) -> np.ndarray:
    """The rule's 95% decision per replicate with the very functions ``delta_verdict`` uses, vectorized."""
    if d.ndim == 3:  # one pretraining seed
        return stouffer_p(d) < 0.05
    _, lo, hi = t_interval(pretraining_means(d))
    return (lo > 0) | (hi < 0)


def as_diffs(d: np.ndarray) -> dict:
    if d.ndim == 2:
        return {f"t{t}": dict(enumerate(d[t])) for t in range(d.shape[0])}
    return {f"t{t}": {(p, f): d[t, p, f] for p in range(d.shape[1]) for f in range(d.shape[2])}
            for t in range(d.shape[0])}  # fmt: skip


def test_no_true_difference_gives_at_most_5_percent_false_verdicts_at_every_size():
    rng = np.random.default_rng(20261126)
    rates = {}
    for ft in FT_SEEDS:
        for tasks in TASK_COUNTS:
            rates[(1, ft, tasks)] = rule_rejects(null_one_level(rng, REPS, tasks, ft)).mean()
            for pre in PRE_SEEDS:
                rates[(pre, ft, tasks)] = rule_rejects(null_two_levels(rng, REPS, tasks, pre, ft)).mean()
    worst = max(rates, key=rates.get)
    assert rates[worst] <= 0.05 + slack(REPS), (worst, rates[worst])
    pooled = float(np.mean(list(rates.values())))  # ~500,000 replicates: the rule's size itself, not just its noise
    assert pooled <= 0.05 + slack(REPS * len(rates)), pooled
    # heavy-tailed seed noise (t with 3 df): the rule does not need the normal to hold its size
    heavy = [rule_rejects(null_one_level(rng, REPS, tasks, ft, noise=lambda s: rng.standard_t(3, s))).mean()
             for ft in FT_SEEDS for tasks in (1, 3, 12)]  # fmt: skip
    assert max(heavy) <= 0.05 + slack(REPS), heavy


@pytest.mark.parametrize("pre, ft, tasks", [(1, 2, 1), (1, 3, 4), (1, 2, 12), (2, 3, 1), (3, 2, 12), (5, 5, 3)])
def test_the_reports_intervals_are_that_test_inverted_and_cover_the_true_shift(pre, ft, tasks):
    """Through ``delta_verdict`` itself (the function the reports call): its direction is the vectorized decision
    above, replicate by replicate, and its interval on data shifted by +1.5 in every task covers +1.5 exactly
    when that decision does not reject, so the coverage is 1 - the false-verdict rate measured above."""
    rng = np.random.default_rng(pre * 100 + ft * 10 + tasks)
    reps = 100
    d = null_one_level(rng, reps, tasks, ft) if pre == 1 else null_two_levels(rng, reps, tasks, pre, ft)
    rejects = list(rule_rejects(d))
    verdicts = [delta_verdict(as_diffs(x)) for x in d]
    assert [v["direction"] is not None for v in verdicts] == rejects
    assert [not (v["ci95"][0] <= 0 <= v["ci95"][1]) for v in verdicts] == rejects
    shifted = [delta_verdict(as_diffs(x + 1.5))["ci95"] for x in d]
    assert [not (lo <= 1.5 <= hi) for lo, hi in shifted] == rejects
    assert 1 - np.mean(rejects) >= 0.95 - slack(reps)


def old_bootstrap_rejects(d: np.ndarray, boot: int = 400) -> float:
    """The old verdict: the stratified (nested with pretraining seeds) percentile bootstrap interval of the mean
    delta excludes 0 (``aggregate.bootstrap``, which still draws the descriptive IQM and P(A > B) intervals)."""
    out = []
    for i, x in enumerate(d):
        if x.ndim == 2:
            keys = [list(range(x.shape[1]))] * x.shape[0]
            xa = list(x)
        else:
            keys = [[(p, f) for p in range(x.shape[1]) for f in range(x.shape[2])]] * x.shape[0]
            xa = [row.ravel() for row in x]
        ci = percentile_ci(bootstrap(xa, [np.zeros_like(v) for v in xa], keys, boot, seed=i)["mean_delta"])
        out.append(ci[0] > 0 or ci[1] < 0)
    return float(np.mean(out))


def test_the_old_percentile_bootstrap_fails_the_same_test():
    rng = np.random.default_rng(7)
    one_task = old_bootstrap_rejects(null_one_level(rng, 200, 1, 3))
    suite = old_bootstrap_rejects(null_one_level(rng, 200, 3, 3))
    two_pre = old_bootstrap_rejects(null_two_levels(rng, 200, 1, 2, 3))
    assert one_task > 0.15 and suite > 0.08 and two_pre > 0.3, (one_task, suite, two_pre)


# ---- the real cases, rebuilt from their numbers ----------------------------------------------------------------

# Case 1: a multi-label classification task where every fine-tune of both models gave one constant answer
# (macro-F1 0.00), and an NER task with 3 seeds all favouring A: NER paired t [-0.73, +4.19]; the old suite said
# "A better", mean delta +0.86 [+0.44, +1.40], P(A > B) 0.64.
NER_B = [40.0, 41.0, 42.0]
NER_A = [b + d for b, d in zip(NER_B, [0.87, 1.50, 2.81], strict=True)]


def _results(label_scores: dict[str, list[float]], metric: str, constant: bool) -> dict:
    return {
        "primary_metric": metric,
        "task": "classification" if constant else "ner",
        "models": [
            {"label": lab, "path": f"/models/{lab}",
             "runs": [{"seed": s, "status": "ok", "test": {metric: v / 100, "constant": "none" if constant else None}}
                      for s, v in enumerate(vals)]}
            for lab, vals in label_scores.items()
        ],
    }  # fmt: skip


def _suite(tmp_path):
    out = tmp_path / "suite"
    for name, res in {
        "hoc": _results({"B": [0.0] * 3, "A": [0.0] * 3}, "macro_f1", constant=True),
        "ncbi": _results({"B": NER_B, "A": NER_A}, "f1", constant=False),
    }.items():
        (out / "tasks" / name).mkdir(parents=True)
        (out / "tasks" / name / "results.json").write_text(json.dumps(res))
    spec = {"name": "two-tasks", "path": str(tmp_path / "two.yaml"), "tasks": [{"name": "hoc"}, {"name": "ncbi"}]}
    return out, spec


def test_real_case_one_the_constant_task_is_left_out_and_three_seeds_do_not_make_a_verdict(tmp_path):
    scores = {"hoc": {"A": dict.fromkeys(range(3), 0.0), "B": dict.fromkeys(range(3), 0.0)},
              "ncbi": {"A": dict(enumerate(NER_A)), "B": dict(enumerate(NER_B))}}  # fmt: skip
    keys = [list(range(3))] * 2
    xa = [np.array(list(scores[t]["A"].values())) for t in scores]
    xb = [np.array(list(scores[t]["B"].values())) for t in scores]
    old = percentile_ci(bootstrap(xa, xb, keys, 5000, seed=0)["mean_delta"])  # the old suite verdict's interval
    assert old == pytest.approx([0.44, 1.40], abs=0.01) and old[0] > 0  # "A better": the real case reproduced

    out, spec = _suite(tmp_path)
    rep = write_suite_report(out, spec, png=False)
    [c] = rep["comparisons"]
    assert c["excluded_tasks"] == {"hoc": "every run of both models gave one constant answer"}
    assert c["tasks"] == ["ncbi"] and c["verdict"] == "inconclusive"
    ner = c["per_task"]["ncbi"]
    assert ner["ci95"] == pytest.approx(list(stats.t.interval(0.95, 2, loc=np.mean(NER_A) - np.mean(NER_B),
                                                              scale=stats.sem(np.subtract(NER_A, NER_B)))))  # fmt: skip
    agg = c["aggregate"]["mean_delta"]
    assert agg["value"] == pytest.approx(ner["delta"])  # not halved by three ties
    assert agg["ci95"][0] < 0 < agg["ci95"][1]
    md = (out / "suite.md").read_text()
    assert "Left out of the aggregate (they measure nothing): hoc: every run of both models gave one constant" in md
    assert "pretraining variance not measured" in md and "**Verdict over the suite: inconclusive.**" in md


def test_a_task_with_one_score_everywhere_is_left_out_without_run_records():
    """A sweep's suite (no per-run flags in old results): every run of both scored the same, so it measures nothing."""
    c = compare({"hoc": {"A": dict.fromkeys(range(3), 0.0), "B": dict.fromkeys(range(3), 0.0)},
                 "ncbi": {"A": dict(enumerate(NER_A)), "B": dict(enumerate(NER_B))}}, "A", "B")  # fmt: skip
    assert c["excluded_tasks"] == {"hoc": "every run of both models scored 0.00"} and c["tasks"] == ["ncbi"]
    assert c["per_task"]["hoc"]["verdict"].startswith("left out")
    alone = compare({"hoc": {"A": dict.fromkeys(range(3), 0.0), "B": dict.fromkeys(range(3), 0.0)}}, "A", "B")
    assert "no task measures anything" in alone["verdict"] and "aggregate" not in alone
    # one model constant, the other not: the task measures something and stays
    kept = compare({"hoc": {"A": dict(enumerate([3.0, 5.0, 4.0])), "B": dict.fromkeys(range(3), 0.0)}}, "A", "B",
                   constant={"hoc": {"B"}})  # fmt: skip
    assert kept["excluded_tasks"] == {} and kept["tasks"] == ["hoc"]


# Case 2: two pretraining seeds x three fine-tuning seeds: the old nested bootstrap gave [-2.59, -1.84] ("B
# better"), the t interval over the two pretraining-seed means is far wider.
def _two_pretraining_seeds() -> tuple[dict, dict]:
    a, b = {}, {}
    for p, m in enumerate((-2.53, -1.88)):
        for f, e in enumerate((-0.12, 0.0, 0.12)):
            b[(p, f)] = 60 + p + 0.3 * f
            a[(p, f)] = b[(p, f)] + m + e
    return a, b


def test_real_case_two_two_pretraining_seeds_get_a_t_interval_over_their_means():
    a, b = _two_pretraining_seeds()
    keys = sorted(a)
    old = percentile_ci(bootstrap([np.array([a[k] for k in keys])], [np.array([b[k] for k in keys])], [keys])[
        "mean_delta"])  # fmt: skip
    assert old == pytest.approx([-2.59, -1.84], abs=0.01)  # the old interval, reproduced
    t = compare({"ner": {"A": a, "B": b}}, "A", "B")["per_task"]["ner"]
    ref = stats.t.interval(0.95, 1, loc=np.mean([-2.53, -1.88]), scale=stats.sem([-2.53, -1.88]))
    assert t["ci95"] == pytest.approx(list(ref)) and t["ci95"][1] - t["ci95"][0] > 10 * (old[1] - old[0])
    assert t["verdict"] == "inconclusive" and "t over 2 pretraining-seed means (1 df)" in t["interval"]


def test_the_report_says_which_level_is_not_measured():
    one = delta_verdict({"ner": {(0, f): v for f, v in enumerate([1.0, 2.0, 0.5])}})
    assert one["unmeasured"] == [
        "one pretraining seed: pretraining variance not measured (the verdict is about these checkpoints, not the "
        "recipes that made them)"
    ]
    flat = delta_verdict({"ner": dict(enumerate([1.0, 2.0, 0.5]))})
    assert flat["unmeasured"] == one["unmeasured"] and flat["ci95"] == pytest.approx(one["ci95"])
    single_ft = delta_verdict({"ner": {(p, 0): v for p, v in enumerate([1.0, 2.0, 0.5])}})
    assert single_ft["unmeasured"] == [] and "fine-tuning variance not measured apart" in single_ft["notes"][0]
    lone = delta_verdict({"ner": {0: 1.0}, "cls": dict(enumerate([1.0, 2.0]))})
    assert "ner: one fine-tuning seed: fine-tuning variance not measured" in lone["unmeasured"][1]
    loss = delta_verdict({"loss": dict(enumerate([0.1, 0.12, 0.11]))}, seed_level="pretraining")
    assert loss["unmeasured"] == [] and loss["direction"] == "up"


def test_f1_intervals_past_the_scale_are_clipped_and_said_so():
    scores = {"ner": {"A": dict(enumerate([1.0, 0.0, 5.0])), "B": dict(enumerate([99.0, 100.0, 97.0]))}}
    pan = panel(scores, ["A", "B"], [])
    a, b = pan["cells"]["A|ner"], pan["cells"]["B|ner"]
    raw_a = stats.t.interval(0.95, 2, loc=2.0, scale=stats.sem([1.0, 0.0, 5.0]))
    assert raw_a[0] < 0 and a["ci95"] == pytest.approx([0.0, raw_a[1]]) and a["ci95_clipped"]
    assert b["ci95"][1] == 100.0 and b["ci95_clipped"]
    rep = {"suite": "s", "suite_file": "s.yaml", "out": "o", "tasks": [{"name": "ner", "metric": "f1"}],
           "models": [{"label": "A", "identity": None}, {"label": "B", "identity": None}], "missing_tasks": [],
           **pan}  # fmt: skip
    for c in rep["cells"].values():
        c["stability"] = {"sd": c["sd"], "range": [0, 1], "failed": [], "diverged": [], "constant": []}
    md = render_markdown(rep)
    assert "[0.00, " in md and "†" in md and "clipped to [0, 100]" in md

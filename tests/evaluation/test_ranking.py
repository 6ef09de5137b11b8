"""N models ranked with tie groups stay honest at few seeds, by simulation (numpy only, fixed RNG seeds: deterministic):
five models, two truly equal and the others apart by a few points, at one seed level (fine-tuning seeds of one
checkpoint each) and at two (pretraining seeds, with one or two fine-tuning seeds each). The equal pair shares a
tie group in at least 95% of simulations; how often each separated neighbour pair is split is printed. Then the
groups and rank intervals of hand-made cases, and the ranking in a suite's report, JSON and figure."""

from __future__ import annotations

import json

import numpy as np
import pytest

from backend.evaluation.ranking import leaderboard, pairwise, rank_intervals, separated, suite_score, tie_groups
from backend.evaluation.suite_report import write_suite_report

TRUE = np.array([50.0, 50.0, 54.0, 58.0, 62.0])  # models 0 and 1 truly equal; the others 4 points apart
SIMS = 2000


def simulate(rng, sims: int, tasks: int, pre: int, ft: int, pre_sd: float = 1.5) -> np.ndarray:
    """(sims, models, tasks, pretraining seeds, fine-tuning seeds) test scores in points: a level per task (its
    difficulty), each model's true level, a pretraining seed's shift shared by every task (and one per task) when
    there are several, and fine-tuning noise with every task its own spread."""
    m = len(TRUE)
    task_level = rng.normal(0, 10, tasks)[None, None, :, None, None]
    spread = np.exp(rng.normal(0.7, 0.4, tasks))[None, None, :, None, None]
    shared = rng.normal(0, pre_sd, (sims, m, 1, pre, 1)) if pre > 1 else 0.0
    own = rng.normal(0, pre_sd / 2, (sims, m, tasks, pre, 1)) if pre > 1 else 0.0
    noise = rng.normal(0, 1, (sims, m, tasks, pre, ft)) * spread
    return TRUE[None, :, None, None, None] + task_level + shared + own + noise


def groups_per_sim(arr: np.ndarray) -> tuple[np.ndarray, list[list[list[int]]]]:
    """The separations and the tie groups of every simulated suite, by the functions a report runs."""
    p, _ = pairwise(arr)
    sep = separated(p)
    scores = np.nanmean(arr.reshape(*arr.shape[:3], -1), axis=(-1, -2))
    orders = np.argsort(-scores, axis=-1, kind="stable")
    return sep, [tie_groups(sep[s], list(orders[s])) for s in range(len(arr))]


@pytest.mark.parametrize(
    "tasks, pre, ft",
    [(3, 1, 5), (3, 1, 3), (5, 1, 2), (3, 3, 1), (3, 5, 1), (3, 3, 2)],
    ids=[
        "3 tasks x 5 ft seeds",
        "3 tasks x 3 ft seeds",
        "5 tasks x 2 ft seeds",
        "3 pretraining x 1 ft",
        "5 pretraining x 1 ft",
        "3 pretraining x 2 ft",
    ],  # fmt: skip
)
def test_the_equal_pair_shares_a_group_in_95_percent_of_simulations(tasks, pre, ft, capsys):
    rng = np.random.default_rng(20261128 + 100 * tasks + 10 * pre + ft)
    arr = simulate(rng, SIMS, tasks, pre, ft)
    sep, groups = groups_per_sim(arr)
    shared = np.mean([any(0 in g and 1 in g for g in gs) for gs in groups])
    assert shared == 1 - sep[:, 0, 1].mean()  # two models share a group exactly when they are not separated
    split = {f"{a}|{a + 1}": float(sep[:, a, a + 1].mean()) for a in range(1, len(TRUE) - 1)}
    whole = np.mean([sorted(map(sorted, gs)) == [[0, 1], [2], [3], [4]] for gs in groups])
    with capsys.disabled():
        print(f"\n{tasks} tasks, {pre} pretraining x {ft} fine-tuning seeds: equal pair shares a group in "
              f"{100 * shared:.1f}% of {SIMS}; neighbours 4 points apart split: "
              + ", ".join(f"{k} {100 * v:.0f}%" for k, v in split.items())
              + f"; 12 points apart (0|4) {100 * sep[:, 0, 4].mean():.0f}%; the true grouping found whole in "
              f"{100 * whole:.0f}%")  # fmt: skip
    assert shared >= 0.95
    assert sep[:, 0, 4].mean() > 0.2  # not merely silent: 12 points apart are told apart, more often with more units


def test_one_fine_tuning_seed_per_pretraining_seed_is_not_zero_variance():
    """Three pretraining seeds with one fine-tuning seed each and a large pretraining spread: a rule that took the
    (pretraining, fine-tuning) keys as fine-tuning seeds of one checkpoint would find the equal pair apart often;
    the units here are the pretraining seeds, and their spread is in the interval."""
    rng = np.random.default_rng(7)
    arr = simulate(rng, SIMS, 3, 3, 1, pre_sd=4.0)
    sep, _ = groups_per_sim(arr)
    assert sep[:, 0, 1].mean() <= 0.05
    naive = pairwise(arr.reshape(SIMS, len(TRUE), 3, 1, 3))[0]  # the same numbers read as one checkpoint's seeds
    assert separated(naive)[:, 0, 1].mean() > 2 * sep[:, 0, 1].mean()


def test_one_seed_tells_nothing_apart_and_says_no_interval():
    scores = {t: {m: {0: 50.0 + 10 * i + k} for i, m in enumerate("ABC")} for k, t in enumerate(("t1", "t2"))}
    lb = leaderboard(scores, ["A", "B", "C"])
    assert [g["models"] for g in lb["groups"]] == [["C", "B", "A"]]
    assert all(m["rank_interval"] == [1, 3] and m["ci95"] is None for m in lb["models"])
    assert not any(p["separated"] for p in lb["pairs"])


def test_groups_overlap_when_the_separations_are_not_transitive():
    """A and C apart, B close to both: two groups, B in each (letters 'ab'), A ranks 1-2, C 2-3."""
    sep = np.array([[False, False, True], [False, False, False], [True, False, False]])
    sign = np.array([[0, 1, 1], [-1, 0, 1], [-1, -1, 0]])
    assert tie_groups(sep, [0, 1, 2]) == [[0, 1], [1, 2]]
    assert rank_intervals(sep, sign) == [(1, 2), (1, 3), (2, 3)]


def test_a_pair_is_separated_exactly_when_its_simultaneous_interval_excludes_zero():
    """The report's decision (the vectorized test) and the interval it prints (``delta_verdict`` at 1 - 0.05/K)
    are one rule: they agree on every pair of many random suites, one and two seed levels."""
    rng = np.random.default_rng(3)
    agree = 0
    for trial in range(40):
        two = trial % 2 == 1
        arr = simulate(rng, 1, 2, 3 if two else 1, 2 if two else 3)[0]
        keys = [(p, f) for p in range(arr.shape[2]) for f in range(arr.shape[3])]
        scores = {f"t{t}": {m: {(k if two else k[1]): arr[i, t, k[0], k[1]] for k in keys}
                            for i, m in enumerate("ABCDE")} for t in range(arr.shape[1])}  # fmt: skip
        for pair in leaderboard(scores, list("ABCDE"))["pairs"]:
            lo, hi = pair["ci"]
            assert pair["separated"] == (lo > 0 or hi < 0), pair
            agree += 1
    assert agree == 40 * 10


def test_a_models_suite_score_is_the_table_average_with_a_t_interval_over_its_units():
    a = np.array([[[60.0, 62.0, 64.0]], [[30.0, 31.0, 35.0]]])  # 2 tasks x 1 pretraining x 3 fine-tuning seeds
    s = suite_score(a)
    units = [45.0, 46.5, 49.5]  # each fine-tuning seed's mean over the two tasks
    assert s["score"] == pytest.approx(47.0) and s["units"] == 3 and s["level"] == "fine-tuning"
    from scipy import stats

    assert s["ci95"] == pytest.approx(list(stats.t.interval(0.95, 2, loc=np.mean(units), scale=stats.sem(units))))


def _results(scores: dict[str, list[float]]) -> dict:
    return {"primary_metric": "f1", "task": "ner",
            "models": [{"label": lab, "path": f"/models/{lab}",
                        "runs": [{"seed": s, "status": "ok", "test": {"f1": v / 100}} for s, v in enumerate(vals)]}
                       for lab, vals in scores.items()]}  # fmt: skip


def test_a_suite_over_three_models_reports_a_leaderboard(tmp_path):
    out = tmp_path / "suite"
    tasks = {
        "ncbi": {"base": [40.0, 41.0, 42.5], "detour": [48.0, 50.5, 49.0], "mlm": [47.5, 49.0, 50.0]},
        "anatem": {"base": [30.0, 31.5, 30.5], "detour": [39.0, 41.0, 40.5], "mlm": [40.0, 39.5, 41.5]},
    }
    for name, sc in tasks.items():
        (out / "tasks" / name).mkdir(parents=True)
        (out / "tasks" / name / "results.json").write_text(json.dumps(_results(sc)))
    spec = {"name": "two", "path": str(tmp_path / "two.yaml"), "tasks": [{"name": "ncbi"}, {"name": "anatem"}]}
    rep = write_suite_report(out, spec, png=False)
    lb = json.loads((out / "suite.json").read_text())["leaderboard"]
    assert lb == json.loads(json.dumps(rep["leaderboard"]))
    assert [m["label"] for m in lb["models"]][2] == "base"
    assert sorted(lb["groups"][0]["models"]) == ["detour", "mlm"] and lb["groups"][1]["models"] == ["base"]
    assert lb["models"][2]["rank_interval"] == [3, 3] and lb["models"][0]["rank_interval"] == [1, 2]
    md = (out / "suite.md").read_text()
    assert "## Leaderboard" in md and "| 3 | base |" in md and "Tie groups" in md and "Bonferroni" in md
    assert (out / "figures" / "leaderboard.html").exists()
    assert "Leaderboard" in (out / "suite.html").read_text()


def test_two_models_keep_the_pairwise_report_alone(tmp_path):
    out = tmp_path / "suite"
    (out / "tasks" / "ncbi").mkdir(parents=True)
    (out / "tasks" / "ncbi" / "results.json").write_text(json.dumps(_results({"a": [1.0, 2.0], "b": [2.0, 3.0]})))
    rep = write_suite_report(out, {"name": "s", "path": "s.yaml", "tasks": [{"name": "ncbi"}]}, png=False)
    assert rep["leaderboard"] is None and "## Leaderboard" not in (out / "suite.md").read_text()


def test_a_suite_score_interval_past_the_scale_is_clipped_and_said_so(tmp_path):
    out = tmp_path / "suite"
    sc = {"low": [0.0, 9.0], "mid": [30.0, 31.0], "high": [60.0, 62.0]}  # two seeds: 'low' reaches below 0
    (out / "tasks" / "t").mkdir(parents=True)
    (out / "tasks" / "t" / "results.json").write_text(json.dumps(_results(sc)))
    rep = write_suite_report(out, {"name": "s", "path": "s.yaml", "tasks": [{"name": "t"}]}, png=False)
    low = next(m for m in rep["leaderboard"]["models"] if m["label"] == "low")
    assert low["ci95"][0] == 0.0 and low["ci95_clipped"]
    md = (out / "suite.md").read_text()
    assert f"| 3 | low | 4.50 | [0.00, {low['ci95'][1]:.2f}]† |" in md and "† clipped to [0, 100]" in md

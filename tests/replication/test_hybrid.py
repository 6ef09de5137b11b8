"""The second paper's study without training: its plan on the sweep machinery (splits x two budgets, matched compute
within a budget) and how the findings read the suite's paired verdicts."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.engine.schema import BY_KEY
from backend.replication import hybrid, hybrid_report

needs_hybrid = pytest.mark.skipif("hybrid.clm_share" not in BY_KEY, reason="recipe hybrid is not in this tree yet")


def _settings(**over) -> dict:
    from tests.conftest import require_shared

    for name in ("craft_pmc_oa_text", "ncbi_disease", "anatem", "bc2gm"):
        require_shared(name)
    return hybrid.resolve_hybrid("quick", overrides=[f"{k}={v}" for k, v in over.items()])


def test_presets_resolve_with_overrides():
    s = _settings(seeds=3)
    assert s["seeds"] == 3 and len(s["budgets"]) == 2 and s["corpus"].endswith("craft_pmc_oa_text")
    assert hybrid.base_config(s)["model"]["name"] == "from_scratch"
    with pytest.raises(Exception, match="unknown"):
        _settings(nope=1)


@needs_hybrid
def test_the_splits_sweep_is_the_shares_by_two_budgets_with_matched_compute():
    s = _settings(shares="[0.0,0.25,0.5,0.75,1.0]")
    m = hybrid.splits_manifest(s)
    assert len(m["cells"]) == 10 and m["reference"] == 0.0
    assert m["matched"]["matched_budget"] and m["matched"]["budget_axes"] == ["hybrid.tokens"]
    by_budget = {}
    for c in m["cells"]:
        by_budget.setdefault(c["values"]["hybrid.tokens"], set()).add(c["tokens"])
    assert all(len(t) == 1 for t in by_budget.values())  # the CLM share never changes the compute


def _point(tokens, verdict, mean):
    return {"tokens": tokens, "verdict": verdict, "mean_delta": {"value": mean, "ci95": [mean - 1, mean + 1]}}


def _cpt(verdict_word):
    c = {"a": "cpt clm", "b": "cpt mlm", "verdict": {"better": "cpt clm better", "worse": "cpt mlm better"}.get(
        verdict_word, "inconclusive"), "aggregate": {"mean_delta": {"value": 0.4, "ci95": [-1.0, 1.8]}}}  # fmt: skip
    return {"suite": {"comparisons": [c]}}


def test_findings_read_the_paired_verdicts():
    hybrids = ("25% CLM / 75% MLM", "50% CLM / 50% MLM", "75% CLM / 25% MLM")
    panels = {arm: [_point(t, "better", 2.0) for t in (1, 2)] for arm in hybrids}
    panels["100% CLM"] = [_point(t, "worse", -5.0) for t in (1, 2)]
    f = hybrid_report.suite_findings({"panels": panels}, _cpt("inconclusive"))
    assert f["splits"]["verdict"] == "replicated"
    assert f["splits"]["counts"] == {"better": 6, "worse": 0, "inconclusive": 0}  # pure CLM is no hybrid
    assert {c["split"] for c in f["splits"]["comparisons"]} == {*hybrids, "100% CLM"}
    assert f["cpt"]["verdict"] == "inconclusive" and f["cpt"]["delta"]["mean"] == 0.4
    panels[hybrids[0]][0]["verdict"] = "inconclusive"
    assert hybrid_report.suite_findings({"panels": panels}, None)["splits"]["verdict"] == "inconclusive"
    assert hybrid_report.suite_findings({"panels": panels}, None)["cpt"]["verdict"] == "not measured"
    for arm in hybrids:
        for p in panels[arm]:
            p["verdict"] = "worse"
    assert hybrid_report.suite_findings({"panels": panels}, _cpt("better"))["splits"]["verdict"] == "not replicated"
    assert hybrid_report.suite_findings({"panels": panels}, _cpt("better"))["cpt"]["verdict"] == "replicated"


def test_one_task_is_a_suite_of_one():
    """The older one-NER-set form of the study is a suite of one task: the same sweep, the same rule."""
    from backend.replication.budget_study import SUITE

    assert Path(_settings()["suite"]) == Path(SUITE).resolve()  # the suite's aggregate, both seed levels
    one = hybrid.resolve_hybrid("quick", suite="configs/suites/ncbi-disease.yaml")
    assert Path(one["suite"]).name == "ncbi-disease.yaml"
    assert hybrid._evaluation(one)["suite"] == one["suite"] and "task" not in hybrid._evaluation(one)


def test_a_study_without_its_continuation_counts_no_continuation_step():
    """cpt=false: the status counts the steps that run, never one that is not meant to."""
    assert hybrid.steps({"cpt": False}) == ["splits", "measure", "report"]
    assert hybrid.steps({"cpt": True}) == ["splits", "cpt", "measure", "report"]

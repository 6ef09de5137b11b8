"""The second paper's study without training: its plan on the sweep machinery (five splits x two budgets, matched
compute within a budget) and how the findings read the sweeps' paired deltas."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.engine.schema import BY_KEY
from backend.replication import hybrid

needs_hybrid = pytest.mark.skipif("hybrid.clm_share" not in BY_KEY, reason="recipe hybrid is not in this tree yet")


def _settings(**over) -> dict:
    from tests.conftest import require_shared

    require_shared("craft_pmc_oa_text")
    require_shared("ncbi_disease")
    return hybrid.resolve_hybrid("quick", overrides=[f"{k}={v}" for k, v in over.items()])


def test_presets_resolve_with_overrides():
    s = _settings(seeds=3)
    assert s["seeds"] == 3 and len(s["budgets"]) == 2 and s["corpus"].endswith("craft_pmc_oa_text")
    assert hybrid.base_config(s)["model"]["name"] == "from_scratch"
    with pytest.raises(Exception, match="unknown"):
        _settings(nope=1)


@needs_hybrid
def test_the_splits_sweep_is_five_shares_by_two_budgets_with_matched_compute():
    s = _settings()
    m = hybrid.splits_manifest(s)
    assert len(m["cells"]) == 10 and m["reference"] == 0.0
    assert m["matched"]["matched_budget"] and m["matched"]["budget_axes"] == ["hybrid.tokens"]
    by_budget = {}
    for c in m["cells"]:
        by_budget.setdefault(c["values"]["hybrid.tokens"], set()).add(c["tokens"])
    assert all(len(t) == 1 for t in by_budget.values())  # the CLM share never changes the compute


def _row(share, tokens, verdict=None, mean=0.6, delta=0.02, ci=(0.01, 0.03)):
    d = None
    if verdict:
        d = {"mean": delta, "ci95": list(ci), "n": 2, "verdict": verdict, "seeds_needed": 9}
    return {
        "label": f"clm_share={share}, tokens={tokens}",
        "values": {"hybrid.clm_share": share, "hybrid.tokens": tokens},
        "mean": mean,
        "ci95": [mean - 0.01, mean + 0.01],
        "delta": d,
    }


def _rep(rows):
    return {"tables": {"finetune": rows}, "primary": "finetune", "summary": "matched"}


def test_findings_read_the_paired_verdicts():
    rows = [_row(0.0, t) for t in (1, 2)]
    rows += [_row(x, t, "better") for x in (0.25, 0.5, 0.75) for t in (1, 2)]
    rows += [_row(1.0, t, "worse", delta=-0.05, ci=(-0.08, -0.02)) for t in (1, 2)]
    cpt = _rep([_row("mlm", 1), {**_row("clm", 1, "inconclusive", delta=0.01, ci=(-0.02, 0.04))}])
    f = hybrid.hybrid_findings(_rep(rows), cpt)
    assert f["splits"]["verdict"] == "replicated" and f["splits"]["counts"] == {
        "better": 6,
        "worse": 0,
        "inconclusive": 0,
    }
    assert {c["split"] for c in f["splits"]["comparisons"]} == {
        "25% CLM / 75% MLM",
        "50% CLM / 50% MLM",
        "75% CLM / 25% MLM",
        "100% CLM",
    }
    assert f["cpt"]["verdict"] == "inconclusive"
    rows[3]["delta"]["verdict"] = "inconclusive"
    assert hybrid.hybrid_findings(_rep(rows), None)["splits"]["verdict"] == "inconclusive"
    assert hybrid.hybrid_findings(_rep(rows), None)["cpt"]["verdict"] == "not measured"
    for r in rows[2:8]:
        r["delta"]["verdict"] = "worse"
    assert hybrid.hybrid_findings(_rep(rows), None)["splits"]["verdict"] == "not replicated"


def test_the_report_says_what_the_paper_found_and_what_this_run_found():
    rows = [_row(0.0, 1), _row(0.5, 1, "inconclusive", delta=0.004, ci=(-0.01, 0.018))]
    cpt = _rep([_row("mlm", 1), _row("clm", 1, "better")])
    rep = {
        "preset": "quick",
        "description": "d",
        "metric": "NER test F1 (entity level)",
        "splits_summary": "matched",
        "splits_rows": rows,
        "findings": hybrid.hybrid_findings(_rep(rows), cpt),
        "times": {"splits_train_s": 10.0},
    }
    md = hybrid.render_hybrid(rep)
    assert md.count("Paper:") == 2 and "INCONCLUSIVE" in md and "REPLICATED" in md
    assert "+0.40 | [-1.0, +1.8]" in md and "~9 seeds would detect it" in md


def test_the_study_fine_tunes_on_the_suite_unless_single_task():
    from backend.replication.budget_study import SUITE
    from backend.replication.plan import ReplicationError

    assert Path(_settings()["suite"]) == Path(SUITE).resolve()  # the suite's aggregate, both seed levels
    assert hybrid.resolve_hybrid("quick", single_task=True)["suite"] is None  # one NER set, as before
    with pytest.raises(ReplicationError, match="--single-task"):
        hybrid.resolve_hybrid("quick", single_task=True, suite=SUITE)


def test_a_study_without_its_continuation_counts_two_steps(tmp_path):
    """cpt=false: the status says 2/2 steps when done, not "2/3 steps done" for a step never meant to run."""
    import json

    for cpt, total in ((False, 2), (True, 3)):
        (tmp_path / "settings.json").write_text(json.dumps({"study": "hybrid-splits", "cpt": cpt}))
        hybrid._status(tmp_path, "done", None)
        assert json.loads((tmp_path / "status.json").read_text())["steps_total"] == total

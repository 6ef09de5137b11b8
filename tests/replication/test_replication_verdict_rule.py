"""Issue 41 section 3: the replication's finding 1 is decided by the one rule the suite aggregate and the sweep
report use (``evaluation.delta_verdict``), and says which seed level it does not measure."""

from __future__ import annotations

from backend.evaluation.delta_verdict import delta_verdict
from backend.evaluation.stats import paired_comparison
from backend.replication.verdicts import assess, significance

MLM = {0: 0.40, 1: 0.41, 2: 0.42}
DETOUR = {s: v + d for (s, v), d in zip(MLM.items(), (0.0087, 0.0150, 0.0281), strict=True)}  # 3 of 3 favour it


def _ner(detour: dict) -> dict:
    c = paired_comparison(MLM, detour)
    models = [{"key": k, "mean": sum(v.values()) / 3, "std": 0.01} for k, v in (("mlm", MLM), ("detour", detour))]
    return {"data": "ncbi_disease", "models": models, "comparisons": [{"a": "mlm", "b": "detour", **c}]}


def test_finding_one_follows_the_rule_and_names_the_level_it_does_not_measure():
    ner = _ner(DETOUR)
    c = ner["comparisons"][0]
    assert c["ci95_bootstrap"][0] > 0  # every resample of three positive differences is positive
    rule = delta_verdict({"ncbi": dict(zip(c["seeds"], c["diffs"], strict=True))})
    assert rule["direction"] is None and significance(c) == "ns"
    f1 = assess(ner, None, {"layers": {"low_range": "0-1", "mid_range": "2-3"}})[0]
    assert f1["verdict"] == "inconclusive (CI crosses 0)"
    assert "one pretraining seed: pretraining variance not measured" in f1["measured"]
    clear = _ner({s: v + 0.02 + 0.001 * s for s, v in MLM.items()})
    assert significance(clear["comparisons"][0]) == "up"
    assert assess(clear, None, {"layers": {"low_range": "0-1", "mid_range": "2-3"}})[0]["verdict"] == "replicated"

"""Seed statistics (mean ± std, paired t and bootstrap intervals, wins), classification scores, the report."""

from __future__ import annotations

import json
import math

import pytest

from backend.evaluation.classification import classification_scores
from backend.evaluation.report import refresh, results_markdown, write_results
from backend.evaluation.stats import (
    mean_std,
    paired_bootstrap_ci,
    paired_comparison,
    paired_t_ci,
    win_counts,
)


def test_mean_std_sample_std():
    s = mean_std([0.80, 0.82, 0.84])
    assert s["mean"] == pytest.approx(0.82)
    assert s["std"] == pytest.approx(0.02)  # sample (n-1) std
    assert s["n"] == 3
    assert mean_std([0.5]) == {"mean": 0.5, "std": None, "n": 1}
    assert mean_std([]) == {"mean": None, "std": None, "n": 0}


def test_paired_t_interval_hand_computed():
    # diffs 1,2,3,4: mean 2.5, sd sqrt(5/3), se sd/2, t(0.975, 3) = 3.1824
    lo, hi = paired_t_ci([1.0, 2.0, 3.0, 4.0])
    half = 3.182446 * math.sqrt(5 / 3) / 2
    assert lo == pytest.approx(2.5 - half, abs=1e-4)
    assert hi == pytest.approx(2.5 + half, abs=1e-4)
    assert paired_t_ci([1.0]) is None


def test_bootstrap_interval():
    d = [1.0, 2.0, 3.0, 4.0]
    lo, hi = paired_bootstrap_ci(d)
    assert 1.0 <= lo < 2.5 < hi <= 4.0
    assert paired_bootstrap_ci(d) == [lo, hi]  # fixed resampling seed
    assert paired_bootstrap_ci([0.5] * 5) == [0.5, 0.5]
    assert paired_bootstrap_ci([0.5]) is None


def test_wins_and_pairing_on_shared_seeds():
    assert win_counts([1, 2, 3], [2, 2, 1]) == {"wins_b": 1, "wins_a": 1, "ties": 1}
    a = {0: 0.80, 1: 0.81, 2: 0.79, 3: 0.90}
    b = {0: 0.82, 1: 0.84, 2: 0.80, 4: 0.99}  # seed 3 only in a, seed 4 only in b: not paired
    c = paired_comparison(a, b)
    assert c["seeds"] == [0, 1, 2]
    assert c["diffs"] == pytest.approx([0.02, 0.03, 0.01])
    assert c["mean_diff"] == pytest.approx(0.02)
    assert (c["wins_b"], c["wins_a"], c["ties"]) == (3, 0, 0)
    assert c["ci95_t"][0] < 0.02 < c["ci95_t"][1]
    assert c["ci95_bootstrap"][0] >= 0.01 - 1e-12 and c["ci95_bootstrap"][1] <= 0.03 + 1e-12


def test_classification_scores_hand_checked():
    # labels 0,1,2: F1 = 1, 0, 0.5 -> macro 0.5; micro = accuracy = 0.5
    s = classification_scores([[0], [1], [2], [2]], [[0], [2], [2], [1]], 3, multi_label=False)
    assert s["per_label_f1"] == pytest.approx([1.0, 0.0, 0.5])
    assert s["macro_f1"] == pytest.approx(0.5)
    assert s["micro_f1"] == pytest.approx(0.5)
    assert s["accuracy"] == pytest.approx(0.5)
    # multi-label: label 0 F1 1, label 1 F1 2/3, label 2 F1 0; exact match 1/3; micro tp2 fp1 fn1
    m = classification_scores([[0, 1], [1], []], [[0], [1, 2], []], 3, multi_label=True)
    assert m["macro_f1"] == pytest.approx((1 + 2 / 3 + 0) / 3)
    assert m["accuracy"] == pytest.approx(1 / 3)
    assert m["micro_f1"] == pytest.approx(2 / 3)


def _results():
    def runs(vals, failed_seed=None):
        out = []
        for seed, v in enumerate(vals):
            if seed == failed_seed:
                out.append({"seed": seed, "status": "failed", "error": "RuntimeError: boom | bad"})
            else:
                out.append(
                    {
                        "seed": seed,
                        "status": "ok",
                        "test": {"f1": v, "precision": v, "recall": v, "macro_f1": v, "token_accuracy": 0.9},
                        "dev": {"f1": v - 0.01},
                    }
                )
        return out

    return {
        "task": "ner",
        "data": "toy",
        "primary_metric": "f1",
        "seeds": [0, 1, 2],
        "hparams": {"epochs": 20, "lr": 5e-5},
        "status": "complete_with_failures",
        "data_notes": ["no dev split: using a fixed 10% of train"],
        "models": [
            {"label": "base", "runs": runs([0.80, 0.82, 0.81])},
            {"label": "detour", "runs": runs([0.83, 0.84, 0.0], failed_seed=2)},
        ],
    }


def test_report_summary_comparison_and_failures(tmp_path):
    r = refresh(_results())
    base, detour = r["models"]
    assert base["summary"]["f1"]["mean"] == pytest.approx(0.81)
    assert base["summary"]["f1"]["seeds"] == [0, 1, 2]
    assert base["summary"]["dev_f1"]["mean"] == pytest.approx(0.80)
    assert (detour["n_ok"], detour["n_failed"]) == (2, 1)
    [c] = r["comparisons"]
    assert (c["a"], c["b"], c["n"]) == ("base", "detour", 2)
    assert c["mean_diff"] == pytest.approx(0.025)
    assert (c["wins_b"], c["wins_a"], c["ties"]) == (2, 0, 0)
    assert r["failures"] == [{"model": "detour", "seed": 2, "error": "RuntimeError: boom | bad"}]

    md = results_markdown(r)
    assert "| base | 3/3 | 81.00 ± 1.00 |" in md
    assert "| detour | 2/3 (1 failed) | 83.50 ± 0.71 |" in md
    assert "| base | detour | 2 | +2.50 |" in md
    assert "2 / 0 / 0" in md
    assert "## Failed runs" in md and "boom \\| bad" in md
    assert "Note: no dev split" in md

    write_results(r, tmp_path)
    assert json.loads((tmp_path / "results.json").read_text())["comparisons"][0]["n"] == 2
    assert (tmp_path / "results.md").read_text() == md

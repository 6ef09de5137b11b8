"""CKA's measure as a setting of the replication and of sweeps, checked at planning, named in the report's
heatmaps; old results (written before measures existed) read as the paper's linear CKA."""

from __future__ import annotations

import pytest

from backend.core.errors import ConfigError, DataError
from backend.replication.plan import resolve_settings


def test_cka_measure_is_a_checked_setting():
    assert resolve_settings("quick")["cka"]["measure"] == "debiased"
    assert resolve_settings("quick", overrides=["cka.measure=linear"])["cka"]["measure"] == "linear"
    with pytest.raises(ConfigError, match="cka.measure.*use one of debiased, linear, procrustes"):
        resolve_settings("quick", overrides=["cka.measure=cosine"])
    with pytest.raises(DataError, match="cka.n_texts: got 3; debiased needs at least 4 samples"):
        resolve_settings("quick", overrides=["cka.n_texts=3"])


def test_report_heatmaps_name_measure_n_hidden_sizes_and_baseline():
    from backend.replication.figures import heatmaps_figure
    from backend.replication.render import _similarity_line

    layers = ["embeddings", "block_0"]
    cka = {
        "layers": layers,
        "n_texts": 100,
        "measure": "debiased",
        "samples": {"unit": "texts", "n": 100},
        "hidden_sizes": {"a": 256, "b": 256},
        "baseline": {"unit": "texts", "mean": 0.004, "min": -0.02, "max": 0.03, "matrix": [[0.0, 0.0]] * 2},
        "matrix": [[0.99, 0.9], [0.9, 0.98]],
    }
    title = heatmaps_figure(cka).layout.title.text
    assert "Layer × layer Debiased CKA" in title and "n = 100 texts · hidden 256 / 256" in title
    assert "shuffled-texts baseline 0.004 (-0.020 to 0.030)" in title
    old = {k: v for k, v in cka.items() if k not in ("measure", "samples", "hidden_sizes", "baseline")}
    assert heatmaps_figure(old).layout.title.text.startswith("Layer × layer Linear CKA")
    assert _similarity_line(old) == "Measured with Linear CKA (biased) · n = 100 texts."


def test_sweep_cka_measure_is_planned_and_checked():
    from backend.sweeps.sweep import _evaluation

    assert _evaluation({})["cka_measure"] == "debiased"
    assert _evaluation({"cka_measure": "linear"})["cka_measure"] == "linear"
    with pytest.raises(ConfigError, match="--cka-measure.*use one of debiased, linear, procrustes"):
        _evaluation({"cka_measure": "cosine"})

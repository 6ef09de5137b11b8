"""CKA's measure as a setting of the detour study and of sweeps, checked at planning."""

from __future__ import annotations

import pytest

from backend.core.errors import ConfigError, DataError
from backend.replication.budget_study import resolve_budget_study
from tests.conftest import require_shared


def test_cka_measure_is_a_checked_setting():
    for name in ("craft_pmc_oa_text", "ncbi_disease", "anatem", "bc2gm"):
        require_shared(name)
    assert resolve_budget_study("quick")["cka"]["measures"] == ["debiased", "linear"]
    assert resolve_budget_study("quick", cka="linear")["cka"]["measures"] == ["linear"]
    with pytest.raises(ConfigError, match="cka.measure.*use one of debiased, linear, procrustes"):
        resolve_budget_study("quick", overrides=["cka.measures=[cosine]"])
    with pytest.raises(DataError, match="cka.n_texts: got 3; debiased needs at least 4 samples"):
        resolve_budget_study("quick", overrides=["cka.n_texts=3"])


def test_sweep_cka_measure_is_planned_and_checked():
    from backend.sweeps.sweep import _evaluation

    assert _evaluation({})["cka_measure"] == "debiased"
    assert _evaluation({"cka_measure": "linear"})["cka_measure"] == "linear"
    with pytest.raises(ConfigError, match="--cka-measure.*use one of debiased, linear, procrustes"):
        _evaluation({"cka_measure": "cosine"})

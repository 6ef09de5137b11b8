"""Each preset declares the budget and settings keys it reads (``backend/presets/*.yaml``), and the Launch form
shows those and no other recipe's. So the declaration must be exact: a key a recipe declares changes what it trains,
and a recipe key it does not declare changes nothing. Before the declarations, the form showed "Main-phase tokens"
and "Total tokens" for ``alternate`` and ``mixed``, which read neither (they trained ``<recipe>.tokens``)."""

from __future__ import annotations

import copy

import pytest

import backend.presets as presets
from backend.detour.recipe import expand_phases, split_pair
from backend.engine import schema
from backend.engine.config import default_config, load_config

# a value other than the default for each recipe key, still valid for every recipe
CHANGED = {
    "train.total_tokens": 300_000,
    "phases.warmup.tokens": 20_000,
    "phases.main.tokens": 120_000,
    "phases.decay.fraction": 0.3,
    "phases.main.mlm_probability": 0.2,
    "phases.decay.mlm_probability": 0.25,
    "phases.main.freeze.layers": "0",
    "phases.main.freeze.embeddings": True,
    "phases.decay.freeze.layers": "1",
    "phases.decay.freeze.embeddings": True,
    "phases.decay.shape": "linear",
    "pair.mlm_probability": 0.2,
    "hybrid.tokens": 120_000,
    "hybrid.clm_share": 0.3,
    "hybrid.mlm_probability": 0.2,
    "hybrid.decay_fraction": 0.2,
    "mask_schedule.tokens": 120_000,
    "mask_schedule.rates": [0.4, 0.1],
    "mask_schedule.shares": [0.5, 0.25, 0.25],
    "mask_schedule.decay_shape": "linear",
    "alternate.tokens": 120_000,
    "alternate.blocks": "clm:1, mlm:3",
    "alternate.mlm_probability": 0.25,
    "alternate.decay_shape": "linear",
    "mixed.tokens": 120_000,
    "mixed.causal_share": 0.25,
    "mixed.mlm_probability": 0.25,
    "mixed.decay_fraction": 0.2,
}


def _set(cfg: dict, key: str, value) -> None:
    *path, last = key.split(".")
    node = cfg
    for p in path:
        node = node[p]
    node[last] = value


def _trained(cfg: dict) -> list:
    """What every run of ``cfg`` trains: each phase as data (a pair: both runs)."""
    cfg = load_config(copy.deepcopy(cfg))
    return [expand_phases(c) for _, c in split_pair(cfg)]


def _base(recipe: str) -> dict:
    cfg = default_config()
    cfg["recipe"] = recipe
    cfg["train"].update(seq_len=64, batch_size=4)
    return cfg


def test_every_declared_key_is_a_config_key_with_a_form_field():
    for key in presets.recipe_keys():
        assert key in schema.BY_KEY and schema.BY_KEY[key].label, key
    assert set(CHANGED) == set(presets.recipe_keys())  # a key declared later needs a changed value here


@pytest.mark.parametrize("recipe", [r for r in presets.form_names() if r != presets.CUSTOM])
def test_a_recipe_reads_the_keys_it_declares_and_no_other_recipes(recipe):
    base = _base(recipe)
    if recipe == "mask_schedule":  # shares must match the rates: give both
        base["mask_schedule"]["rates"] = [0.4, 0.1, 0.05]
    before = _trained(base)
    declared = set(presets.form_keys(recipe))
    for key in presets.recipe_keys():
        cfg = copy.deepcopy(base)
        _set(cfg, key, CHANGED[key])
        if key == "mask_schedule.rates":
            cfg["mask_schedule"]["shares"] = None
        changed = _trained(cfg) != before
        why = "is read but not declared" if changed else "is declared but not read"
        assert changed == (key in declared), f"{recipe}: {key} {why}"


def test_a_phase_list_reads_its_total_and_what_its_preset_declares_for_lists():
    phases = [{"objective": "clm", "fraction": 0.5, "shape": "constant"},
              {"objective": "mlm", "fraction": 0.5, "mlm_probability": 0.3, "shape": "1-sqrt"}]  # fmt: skip
    for recipe in ("custom", "pair"):
        base = _base(recipe)
        base["phases"], base["train"]["total_tokens"] = phases, 200_000
        before = _trained(base)
        declared = set(presets.form_keys(recipe, listed=True))
        assert "train.total_tokens" in declared
        for key in presets.recipe_keys():
            cfg = copy.deepcopy(base)
            if not key.startswith("phases."):  # the list replaces the phase keys
                _set(cfg, key, CHANGED[key])
            changed = _trained(cfg) != before
            assert changed == (key in declared and not key.startswith("phases.")), f"{recipe} list: {key}"

"""Arms: named override sets as the values of one axis (the study's control and freeze arms, outside a Cartesian
grid), their per-seed values, the manifest that keeps them for a resume, and the refusals. No training."""

from __future__ import annotations

import pytest

from backend.core.errors import ConfigError
from backend.sweeps.grid import Cell, per_seed, run_config
from backend.sweeps.sweep import _queue_missing, plan_sweep
from tests.conftest import tiny_train_cfg

ARMS = {
    "mlm": {"recipe": "mlm"},
    "detour": {"recipe": "clm_detour"},
    "control": {"recipe": "mlm", "train.data_seed": "{seed}", "train.seed": "{seed+1000}"},
    "freeze-low": {"recipe": "clm_detour", "phases.main.freeze.layers": "0-1"},
}


def _plan(tiny_modernbert_dir, arms=ARMS, grid=("arm=mlm,detour,control,freeze-low",), **kw):
    base = tiny_train_cfg(tiny_modernbert_dir, name="arms")
    return plan_sweep(base, grid=list(grid), seeds=2, arms=arms, reference="mlm", **kw)


def _configs(m: dict) -> dict[tuple[str, int], dict]:
    out = {}
    for c in m["cells"]:
        cell = Cell(c["index"], c["values"], c["label"], c["slug"])
        for s in m["seeds"]:
            out[(c["values"]["arm"], s)] = run_config(m["base"], cell, s, m["name"], m.get("arms"))
    return out


def test_per_seed_values():
    assert per_seed("{seed}", 3) == 3 and per_seed("{seed+1000}", 2) == 1002
    assert per_seed("runs/base-s{seed}", 1) == "runs/base-s1" and per_seed(0.5, 7) == 0.5


def test_each_arm_runs_its_own_overrides_on_every_seed(tiny_modernbert_dir):
    m = _plan(tiny_modernbert_dir)
    assert m["arms"] == ARMS and m["reference"] == "mlm" and len(m["cells"]) == 4
    cfgs = _configs(m)
    for s in m["seeds"]:
        assert cfgs[("mlm", s)]["recipe"] == "mlm" and cfgs[("mlm", s)]["train"]["seed"] == s
        assert cfgs[("detour", s)]["recipe"] == "clm_detour" and cfgs[("detour", s)]["train"]["seed"] == s
        # the seed-noise control: seed s's data order, another seed for the masks
        ctrl = cfgs[("control", s)]["train"]
        assert ctrl["data_seed"] == s and ctrl["seed"] == s + 1000 and cfgs[("mlm", s)]["train"]["data_seed"] is None
        assert cfgs[("freeze-low", s)]["phases"]["main"]["freeze"]["layers"] == "0-1"
        assert cfgs[("mlm", s)]["phases"]["main"]["freeze"]["layers"] is None
    # every arm trains the same tokens: the matched-compute promise holds across arms
    assert len({c["tokens"] for c in m["cells"]}) == 1 and m["matched"]["matched_budget"]


def test_a_resume_queues_each_arm_with_its_overrides(tiny_modernbert_dir, tmp_path):
    """The manifest keeps the arms: a resumed sweep rebuilds each run's config from it, not from a default."""
    from backend.engine.config import load_config as read_yaml_config
    from backend.sweeps.manifest import write_manifest

    m = _plan(tiny_modernbert_dir)
    out = tmp_path / "sw"
    write_manifest(out, m)
    started = _queue_missing(out, m)
    assert len(started) == 8
    ctrl = next(c for c in m["cells"] if c["values"]["arm"] == "control")
    cfg = read_yaml_config(str(out / "runs" / ctrl["runs"]["1"] / "config.yaml"))
    assert cfg["train"]["seed"] == 1001 and cfg["train"]["data_seed"] == 1 and cfg["recipe"] == "mlm"


@pytest.mark.parametrize(
    "arms, grid, says",
    [
        (None, ("arm=mlm,detour",), "a study plans"),
        (ARMS, ("arm=mlm,nope",), "among the planned ones"),
        (ARMS, ("arm=mlm,mlm",), "each arm once"),
        ({"mlm": {"recipe": "mlm"}, "bad": {"train.nope": 1}}, ("arm=mlm,bad",), "train.nope"),
    ],
)
def test_unknown_repeated_or_broken_arms_are_refused_at_planning(tiny_modernbert_dir, arms, grid, says):
    with pytest.raises(ConfigError, match=says):
        _plan(tiny_modernbert_dir, arms=arms, grid=grid)


def test_arm_is_not_a_grid_axis_a_user_types(capsys, tmp_path):
    from backend.__main__ import main

    assert main(["sweep", "--grid", "arm=mlm,clm_detour", "--out", str(tmp_path / "sw")]) == 2
    assert "a study plans" in capsys.readouterr().err and not (tmp_path / "sw").exists()

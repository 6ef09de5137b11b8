"""A sweep's files and arguments are checked before anything is read into a KeyError or trained in vain: a torn or
foreign sweep.json is one line naming it, ``--out`` a file or inside a run folder is refused before planning, and a
misspelt ``--eval-set`` key or an empty ``--grid`` value is refused at planning."""

from __future__ import annotations

import json
import os

import pytest

from backend.__main__ import main
from backend.core.atomic import write_yaml
from backend.core.errors import ConfigError
from backend.engine import rundir
from backend.engine.config import default_config
from backend.sweeps.grid import parse_axis


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{}", "not a sweep manifest: name, base, axes, seeds, cells, executor missing"),
        ('{"name": "x", "cel', "not valid JSON"),
        ("[]", "holds a JSON list"),
        ('{"name": "x", "base": {}, "axes": [], "seeds": [0], "executor": "queue", "cells": [{}]}', "cell 0"),
        (
            '{"name": "x", "base": {}, "axes": [], "seeds": [0], "executor": "queue", "cells": [{"index": 0, '
            '"label": "a", "values": {}, "runs": {"0": "../../etc"}}]}',
            "not a plain folder name",
        ),
    ],
)
def test_a_broken_sweep_json_is_one_line_for_every_command(tmp_path, capsys, text, says):
    out = tmp_path / "sw"
    out.mkdir()
    (out / "sweep.json").write_text(text)
    for flag in ("--status", "--report", "--resume", "--cancel"):
        assert main(["sweep", flag, str(out)]) == 2, flag
        err = capsys.readouterr().err
        assert err.startswith(f"error: {out / 'sweep.json'}: ") and says in err and "Traceback" not in err, err


def test_a_sweep_json_that_links_out_of_its_folder_is_refused(tmp_path, capsys):
    out = tmp_path / "sw"
    out.mkdir()
    (tmp_path / "elsewhere.json").write_text("{}")
    os.symlink(tmp_path / "elsewhere.json", out / "sweep.json")
    assert main(["sweep", "--status", str(out)]) == 2
    assert "outside" in capsys.readouterr().err


def test_out_a_file_or_inside_a_run_folder_is_refused_before_planning(tmp_path, capsys):
    f = tmp_path / "a-file"
    f.write_text("")
    assert main(["sweep", "--grid", "train.lr=1e-4,2e-4", "--out", str(f)]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    write_yaml(run / "config.yaml", default_config())
    rundir.write_status(run, state="done")
    assert main(["sweep", "--grid", "train.lr=1e-4,2e-4", "--out", str(run / "sweep")]) == 2
    assert f"inside the run folder {run}" in capsys.readouterr().err
    assert not (run / "sweep").exists()


@pytest.mark.parametrize("setting", ["epoch=2", "max_train_exmples=100"])
def test_a_misspelt_eval_setting_is_refused_at_planning(tmp_path, capsys, setting):
    args = ["sweep", "--grid", "train.lr=1e-4,2e-4", "--eval", "ner", "--eval-data", str(tmp_path)]
    assert main([*args, "--eval-set", setting, "--out", str(tmp_path / "sw")]) == 2
    err = capsys.readouterr().err
    assert f"--eval-set {setting.split('=')[0]}" in err and "unknown fine-tuning setting" in err
    assert not (tmp_path / "sw").exists()


def test_an_eval_setting_without_a_task_is_refused(tmp_path, capsys):
    assert main(["sweep", "--grid", "train.lr=1e-4,2e-4", "--eval-set", "epochs=2", "--out", str(tmp_path / "s")]) == 2
    assert "need --eval" in capsys.readouterr().err


@pytest.mark.parametrize("item", ["train.lr=1e-4,,2e-4", "train.lr=1e-4,", "train.lr=", "train.lr= , "])
def test_an_empty_grid_value_is_refused_not_dropped(item):
    with pytest.raises(ConfigError, match="--grid"):
        parse_axis(item)
    assert [json.dumps(v) for v in parse_axis("train.lr=1e-4, 2e-4").values] == ["0.0001", "0.0002"]


def test_a_batch_size_grid_with_a_phase_budgeted_in_steps_is_refused():
    from backend.sweeps.sweep import plan_sweep

    sets = ["phases.decay.steps=4", "train.seq_len=64"]
    with pytest.raises(ConfigError, match="phases.decay.steps is budgeted in steps.*allow-unmatched-budget") as e:
        plan_sweep(None, sets, ["train.batch_size=4,8"], 1)
    assert e.value.key == "--grid"
    m = plan_sweep(None, sets, ["train.batch_size=4,8"], 1, allow_unmatched_budget=True)
    assert not m["matched"]["matched_budget"] or m["matched"]["budget_axes"]


def test_a_sweep_whose_run_is_refused_at_launch_leaves_no_sweep_behind(tmp_path, monkeypatch):
    """A cell refused at its preflight (one optimizer step larger than the decay's budget) said "Not started" while
    sweep.json stayed, marked running: the Sweeps list showed a sweep with no runs, and the same name with a fixed
    budget was refused as another sweep's folder."""
    from backend.core import catalogue, paths
    from backend.sweeps.sweep import _same_sweep, check_out, launch, plan_sweep

    monkeypatch.setenv(paths.SWEEPS_ENV, str(tmp_path / "sweeps"))
    out = tmp_path / "sweeps" / "small"
    m = plan_sweep(None, ["recipe=mlm"], ["phases.main.tokens=8192,16384"], 1, name="small")
    with pytest.raises(ConfigError, match="whole budget of phase 'decay'"):
        launch(m)
    assert not out.exists() and catalogue.entries("sweep") == []
    fixed = plan_sweep(None, ["recipe=mlm", "train.batch_size=2"], ["phases.main.tokens=8192,16384"], 1, name="small")
    assert check_out(out) == out and not _same_sweep(m, fixed)  # the name is free for the fixed sweep


@pytest.mark.parametrize(("sets", "grid"), [([], "train.lr=1e-4,2e-4"), (["recipe=mlm"], "recipe=pair,clm_detour")])
def test_a_sweep_of_pairs_is_refused_before_anything_is_written(tmp_path, sets, grid):
    """The Sweeps tab's defaults (recipe pair) queued two runs a cell (``-detour``, ``-mlm``) while the sweep waited
    for one run a cell named without the suffix: it said '2 missing' for ever and never wrote its report."""
    from backend.sweeps.sweep import SweepError, launch, plan_sweep

    m = plan_sweep(None, sets, [grid], 1, name="pairs")
    with pytest.raises(SweepError, match="recipe 'pair' trains two runs.*recipe = mlm,clm_detour"):
        launch(m, tmp_path / "pairs")
    assert not (tmp_path / "pairs").exists()


@pytest.mark.parametrize("flag", ["--cancel", "--report", "--resume", "--status"])
def test_an_empty_sweep_folder_flag_is_named_not_taken_as_absent(flag, capsys):
    """``--cancel ''`` was read as no --cancel: the line asked for a --grid nobody meant to give."""
    assert main(["sweep", flag, ""]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {flag} is empty: give the sweep's folder, e.g. {flag} sweeps/NAME"

"""Executors are checked before anything is written, and a submission that fails is a state, not an exception:
``sweep --executor slurm`` where Slurm is missing or not configured printed "internal error" (submitit's
"Could not detect srun", or sbatch's error) and left the sweep running with its cells queued, which --resume
repeated and --cancel left alone."""

from __future__ import annotations

import json
import os

import pytest

from backend.__main__ import main
from backend.engine.rundir import read_status

SWEEP = ["sweep", "--grid", "train.lr=1e-3,2e-3", "--set", "recipe=mlm", "--set", "phases.main.steps=2",
         "--executor", "slurm"]  # fmt: skip


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "internal error" not in err and "Traceback" not in err, err
    return err


def test_slurm_missing_from_path_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # a machine without Slurm's commands
    out = tmp_path / "sw"
    assert main([*SWEEP, "--out", str(out)]) == 2
    err = _one_line(capsys)
    assert "sbatch, srun, sinfo are not on this machine's PATH" in err and "--executor queue" in err
    assert not out.exists()


def test_slurm_not_configured_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys):
    if not all(os.access(f"/usr/bin/{c}", os.X_OK) for c in ("sbatch", "srun", "sinfo")):
        pytest.skip("Slurm's client commands are not installed")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "no-slurm.conf"))
    out = tmp_path / "sw"
    assert main([*SWEEP, "--out", str(out)]) == 2
    err = _one_line(capsys)
    assert "SLURM_CONF names" in err and "not a file" in err and "--executor queue" in err
    assert not out.exists()


def test_a_refused_submission_leaves_cells_that_resume_and_cancel_handle(slurm_cluster, tmp_path, capsys):
    out = tmp_path / "sw"
    assert main([*SWEEP, "--out", str(out), "--set", "slurm.partition=nope"]) == 2
    err = _one_line(capsys)
    assert "2 run(s) not submitted to slurm" in err and "invalid partition" in err.lower() and "--resume" in err
    runs = sorted((out / "runs").iterdir())
    assert [read_status(d)["state"] for d in runs] == ["failed", "failed"]
    assert all("not submitted" in read_status(d)["error"] for d in runs)
    assert main(["sweep", "--resume", str(out)]) == 2  # the same refusal, one line; the cells stay failed
    assert "not submitted" in _one_line(capsys)
    assert main(["sweep", "--cancel", str(out)]) == 0
    assert json.loads((out / "sweep.json").read_text())["state"] == "cancelled"

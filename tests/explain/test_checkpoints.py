"""A run's saved models in order, with the phase each had reached: the scrub slider's points."""

from __future__ import annotations

import shutil

import pytest

from backend.core.errors import DetourError
from backend.engine import rundir
from backend.explain.checkpoints import run_checkpoints


def test_points_of_a_detour_run_cross_the_phase_switch(detour_run_dir, tiny_modernbert_dir):
    res = run_checkpoints(detour_run_dir)
    pts = res["points"]
    assert [p["step"] for p in pts] == [0, 2, 4, 6, 8]
    assert [p["objective"] for p in pts] == [None, "clm", "clm", "mlm", "mlm"]
    assert [p["tag"] for p in pts] == ["start", None, "end-main", None, "end-decay"]
    assert pts[0]["model"] == str(tiny_modernbert_dir.resolve())
    assert pts[2]["label"] == "step 4 (end-main) · main: CLM"
    assert pts[-1]["label"] == "step 8 (end-decay) = final · decay: MLM"  # final/ holds the same weights
    assert res["switches"] == [3] and res["advice"] is None
    assert [p["tokens_seen"] for p in pts] == [0, 512, 1024, 1536, 2048]  # 4 x 64 tokens per step


def test_few_points_say_how_to_get_more(detour_run_dir, tmp_path):
    run = tmp_path / "sparse"
    shutil.copytree(detour_run_dir, run, ignore=shutil.ignore_patterns("state"))
    for ck in rundir.list_checkpoints(run)[:-1]:
        shutil.rmtree(ck)
    res = run_checkpoints(run)
    assert [p["step"] for p in res["points"]] == [0, 8]
    assert "kept 1 saved model" in res["advice"] and "--set logging.checkpoint_every=1" in res["advice"]
    assert "Keep checkpoints = 20 (the Launch form's Advanced fields)" in res["advice"]
    shutil.rmtree(run / "checkpoints")
    res = run_checkpoints(run)
    assert res["points"][-1]["label"] == "final · decay: MLM" and res["points"][-1]["step"] == 8
    with pytest.raises(DetourError, match="not a run directory"):
        run_checkpoints(tmp_path)

"""Two CPU processes (gloo) under torchrun: the same loop, DDP, checkpoints written once."""

from __future__ import annotations

import pytest

from backend.engine.rundir import read_metrics, read_status
from backend.runs.train import prepare_runs
from conftest import tiny_train_cfg, torchrun_train


@pytest.mark.slow
def test_two_process_gloo_run_completes(tiny_modernbert_dir, isolated_runs_dir):
    (run,) = prepare_runs(
        tiny_train_cfg(
            tiny_modernbert_dir, "ddp", recipe="clm_detour", **{"phases.main.steps": 4, "phases.decay.steps": 2}
        )
    )
    proc = torchrun_train(run, port=29517, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert read_status(run)["state"] == "done"
    rows = [r for r in read_metrics(run) if r["type"] == "train"]
    # global batch = 2 processes x 4 sequences x 64 tokens: the token budget counts both processes
    assert rows[-1]["step"] == 6 and rows[-1]["tokens_seen"] == 6 * 2 * 4 * 64
    assert len([r for r in rows if r["step"] == 6]) == 1  # only rank 0 logs
    assert (run / "final" / "model.safetensors").exists()
    # checkpoints are written from rank 0 in the background, with every rank's RNG states, and seal whole
    from backend.engine.checkpoint import verify

    cks = sorted((run / "checkpoints").glob("step-*"))
    assert [c.name for c in cks] == ["step-00000004", "step-00000006"]
    state_files = {"model.safetensors", "optimizer.bin", "random_states_0.pkl", "random_states_1.pkl"}
    for ck in cks:
        verify(ck)
        assert {p.name for p in (ck / "state").iterdir()} >= state_files
    # and a DDP run resumes from one and reproduces the steps after it
    import shutil

    want = {r["step"]: r["loss"] for r in rows}
    shutil.rmtree(cks[-1])
    shutil.rmtree(run / "final")
    proc = torchrun_train(run, port=29518, timeout=600, resume=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = {r["step"]: r["loss"] for r in read_metrics(run) if r["type"] == "train"}
    assert sorted(got) == sorted(want) and all(abs(got[s] - want[s]) < 1e-5 for s in want), (got, want)

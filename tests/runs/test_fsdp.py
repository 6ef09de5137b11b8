"""train.fsdp: refused where accelerate would not shard (here: CPU), before anything is created or trained.

Tried for real (torch 2.13 CPU, accelerate 1.15, 2 processes under torchrun, gloo): accelerate ignores its
FSDP plugin on CPU and wraps the model in DDP, so an FSDP run would quietly be a DDP run. See
``backend.trainer.make_accelerator``.
"""

from __future__ import annotations

import pytest
import torch
import yaml

from backend.core.errors import ConfigError
from backend.engine.rundir import read_status
from backend.runs.train import prepare_runs, train_run
from conftest import tiny_train_cfg, torchrun_train

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")

SHORT = {"recipe": "clm_detour", "phases.main.steps": 4, "phases.decay.steps": 2, "phases.main.freeze": "{layers: 0-1}"}


def test_fsdp_refused_up_front_without_cuda(tiny_modernbert_dir, isolated_runs_dir):
    cfg = tiny_train_cfg(tiny_modernbert_dir, "fsdp", **SHORT, **{"train.fsdp": True})
    with pytest.raises(ConfigError) as exc:
        prepare_runs(cfg)
    msg = str(exc.value)
    assert exc.value.key == "train.fsdp"
    assert "no CUDA device" in msg and "DDP" in msg and "train.fsdp false" in msg
    assert not isolated_runs_dir.exists() or not any(isolated_runs_dir.iterdir())  # no run directory made


def _prepared_then_fsdp(model_dir, name: str):
    """A run prepared with FSDP on a GPU machine (its config and the queued record that fixes it say so), then
    trained here, where FSDP cannot run: the trainer refuses it itself. ``prepare_runs`` here refuses FSDP already."""
    from backend.engine import resume_guard
    from backend.engine.rundir import write_status

    (run,) = prepare_runs(tiny_train_cfg(model_dir, name, **SHORT))
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["train"]["fsdp"] = True
    (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    queued, sha = resume_guard.fixed_config(cfg)
    write_status(run, queued_config=queued, queued_config_sha256=sha)
    return run


def _nothing_trained(run):
    assert not (run / "checkpoints").exists() and not (run / "final").exists()
    assert not (run / "metrics.jsonl").exists()


def test_trainer_refuses_fsdp_in_one_process(tiny_modernbert_dir):
    run = _prepared_then_fsdp(tiny_modernbert_dir, "fsdp1p")
    st = train_run(run)
    assert st["state"] == "failed"
    assert "train.fsdp" in st["error"] and "accelerate chose NO" in st["error"], st["error"]
    _nothing_trained(run)


@pytest.mark.slow
def test_two_process_gloo_fsdp_refused_not_silently_ddp(tiny_modernbert_dir):
    run = _prepared_then_fsdp(tiny_modernbert_dir, "fsdp2p")
    proc = torchrun_train(run, port=29527, timeout=300)
    assert proc.returncode != 0
    st = read_status(run)
    assert st["state"] == "failed"
    # both ranks refuse at the Accelerator, before the model is wrapped: no DDP run in FSDP's name
    assert "train.fsdp" in st["error"] and "accelerate chose MULTI_CPU" in st["error"], st["error"]
    _nothing_trained(run)

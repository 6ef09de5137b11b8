"""train.compile auto: on with a CUDA GPU, off on CPU; resolved where the run trains, logged and recorded; the
C++ compiler is required only where compile will really be on."""

from __future__ import annotations

import shutil

import pytest
import torch
import yaml

from backend.core.errors import ConfigError
from backend.engine import compiling
from backend.runs.train import prepare_runs, train_run
from conftest import tiny_train_cfg


def test_explicit_values_are_kept_and_auto_follows_the_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Test GPU")
    assert compiling.resolve_compile(True, "cpu") == (True, "set in the config")
    assert compiling.resolve_compile(False, "cuda") == (False, "set in the config")
    on, why = compiling.resolve_compile("auto", "cuda")
    assert on and "Test GPU" in why
    on, why = compiling.resolve_compile("auto", "cpu")
    assert not on and "off on CPU" in why
    on, why = compiling.resolve_compile("auto", "cuda", fsdp=True)
    assert not on and "fsdp" in why
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(shutil, "which", lambda _: None)
    on, why = compiling.resolve_compile("auto", "cuda")
    assert not on and "compiler" in why


def test_compiler_is_required_only_when_compile_will_be_on(tiny_modernbert_dir, isolated_runs_dir, monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(shutil, "which", lambda _: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "auto-cc", **{"train.compile": "auto"}))  # off on CPU
    with pytest.raises(ConfigError, match="C\\+\\+ compiler"):
        prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "true-cc", **{"train.compile": "true"}))


def test_fsdp_refuses_only_an_explicit_compile():
    from backend.engine.config import load_config

    assert load_config(None, ["train.fsdp=true"])["train"]["compile"] == "auto"  # resolves to off with FSDP
    with pytest.raises(ConfigError, match="train.fsdp"):
        load_config(None, ["train.fsdp=true", "train.compile=true"])


def test_auto_run_records_the_resolved_compile(tiny_modernbert_dir, isolated_runs_dir, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = tiny_train_cfg(tiny_modernbert_dir, "auto", recipe="mlm", **{"phases.main.steps": 2, "phases.decay.steps": 0})
    (run,) = prepare_runs(cfg)
    assert train_run(run)["state"] == "done"
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["train"]["compile"] == "auto"  # what was asked: a queued run may train on another machine
    assert saved["_meta"]["compile"] == {"requested": "auto", "resolved": False, "why": compiling.resolve_compile(
        "auto", "cpu")[1]}  # fmt: skip
    log = (run / "train.log").read_text()
    assert "compile: off (auto: off on CPU" in log and "encoder compiled" not in log


def test_a_run_made_before_compile_was_auto_stays_uncompiled(tiny_modernbert_dir, isolated_runs_dir):
    from backend.engine.rundir import read_config

    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "older", recipe="mlm"))
    saved = yaml.safe_load((run / "config.yaml").read_text())
    del saved["train"]["compile"]
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    assert read_config(run)["train"]["compile"] is False


def test_kernels_are_cached_under_the_project_cache(isolated_cache_dir, monkeypatch):
    import os

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/somewhere/else")  # restored after the test
    path = compiling.kernel_cache_dir()
    assert path == isolated_cache_dir / "inductor" and path.is_dir()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(path)
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    assert cache_dir() == str(path)  # where inductor will look

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


ABORT_IN_FIRST_CALL = """
import os, sys
from backend.engine.compiling import CompileClock
clock = CompileClock(True, print, sys.argv[1])
with clock.time("mlm training step", 7):  # a first call that returns: it leaves nothing behind
    pass
with clock.time("clm training step", 8):
    os.abort()  # what heap corruption in a compiled kernel does: no Python error, the process ends
"""


def test_a_process_that_dies_in_a_first_compiled_call_is_named_and_its_resume_trains_without_compile(
    tiny_modernbert_dir, isolated_runs_dir, monkeypatch
):
    """A compiled step aborted a CPU smoke run with heap corruption: nothing in the process can catch that. The
    run's error says which compiled call ended it, and its resume trains without compile instead of dying again."""
    import subprocess
    import sys

    from backend.core.paths import REPO_ROOT
    from backend.engine.rundir import read_status, write_status
    from backend.runs import jobs

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    steps = {"phases.main.steps": 2, "phases.decay.steps": 0, "train.compile": "true"}
    cfg = tiny_train_cfg(tiny_modernbert_dir, "aborts", recipe="mlm", **steps)
    (run,) = prepare_runs(cfg)
    assert compiling.aborted_call(run) is None
    write_status(run, state="running")
    proc = subprocess.Popen([sys.executable, "-c", ABORT_IN_FIRST_CALL, str(run)], cwd=REPO_ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    assert proc.wait(timeout=300) < 0  # killed by its own abort
    assert compiling.aborted_call(run)["kind"] == "clm training step"
    jobs._finish_child(run, proc)  # what the queue worker does when its trainer exits
    error = read_status(run)["error"]
    assert "the first compiled clm training step at step 8 ended the training process (SIGABRT)" in error
    assert "resume to continue without compile" in error

    on, why = compiling.resolve_compile(True, "cpu", aborted=compiling.aborted_call(run))
    assert not on and why.startswith("off: the first compiled clm training step") and compiling.ABORT_MARK in why
    assert compiling.resolve_compile(False, "cpu", aborted={"kind": "x"}) == (False, "set in the config")
    assert train_run(run, resume=True)["state"] == "done"  # eager, where compiling killed it
    log = (run / "train.log").read_text()
    assert "compile: off (off: the first compiled clm training step" in log and "encoder compiled" not in log


def test_a_first_compiled_call_that_returns_or_raises_leaves_no_mark(tmp_path):
    clock = compiling.CompileClock(True, lambda _: None, tmp_path)
    with clock.time("held-out evaluation"):
        assert (tmp_path / compiling.ABORT_MARK).exists()  # while it runs
    assert not (tmp_path / compiling.ABORT_MARK).exists()
    with pytest.raises(RuntimeError), clock.time("clm training step", 1):
        raise RuntimeError("a Python error is the run's own failure, with its traceback")
    assert compiling.aborted_call(tmp_path) is None
    with compiling.CompileClock(False, print, tmp_path).time("clm training step", 1):  # not compiled: no mark
        assert not (tmp_path / compiling.ABORT_MARK).exists()

"""Checkpoints written in the background: the same files as a synchronous save, the state of the step they were
taken at, one write at a time, and a kill -9 mid-write leaves the previous checkpoint the one to resume from."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from backend.core.paths import REPO_ROOT
from backend.engine import checkpoint


def trained(model_dir):
    """(accelerator, lm, optimizer, tokenizer, step) for a tiny model that has optimizer state; ``step()`` trains."""
    from backend.detour.encoder_lm import EncoderLM
    from backend.detour.recipe import build_optimizer
    from backend.engine.config import load_config
    from backend.engine.models import load_masked_lm, load_tokenizer, resolve_model, resolve_tokenizer
    from backend.engine.precision import make_accelerator
    from backend.objectives import clm_labels

    torch.manual_seed(0)
    accelerator = make_accelerator("fp32")
    hf = load_masked_lm(resolve_model(str(model_dir)))
    lm, opt = accelerator.prepare(EncoderLM(hf), build_optimizer(hf, load_config(None)["train"]))
    ids = torch.randint(5, 500, (2, 32))
    labels = clm_labels(ids, torch.zeros_like(ids, dtype=torch.bool))

    def step():
        loss, _, _ = lm(ids, labels, causal=False)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    return accelerator, lm, opt, load_tokenizer(resolve_tokenizer(str(model_dir))), step


def _files(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if hasattr(a, "dtype") and hasattr(a, "shape"):  # numpy arrays in the RNG states
        return (a == b).all()
    return a == b


def test_background_checkpoint_holds_what_a_synchronous_save_holds(tiny_modernbert_dir, tmp_path):
    acc, lm, opt, tok, _ = trained(tiny_modernbert_dir)
    (tmp_path / "sync").mkdir()  # a run folder exists before its checkpoints (they never make it: run_home.py)
    sync = checkpoint.save(acc, lm, tok, tmp_path / "sync", 3, {"step": 3}, keep=2)
    with checkpoint.Checkpointer(acc, lm, opt, tok, tmp_path / "bg", keep=2, background=True) as ck:
        bg = ck.save(3, {"step": 3})
    checkpoint.verify(bg)
    assert _files(bg) == _files(sync)  # same names: old and new checkpoints load the same way
    for rel in _files(sync):
        if rel.endswith(".safetensors"):
            assert _same(load_file(sync / rel), load_file(bg / rel)), rel
        elif rel.endswith((".bin", ".pkl")):
            assert _same(torch.load(sync / rel, weights_only=False), torch.load(bg / rel, weights_only=False)), rel
        elif rel != checkpoint.MANIFEST:
            assert (sync / rel).read_bytes() == (bg / rel).read_bytes(), rel
    # and it loads back into a fresh model through accelerate, as a resume does
    acc2, lm2, _, _, _ = trained(tiny_modernbert_dir)
    acc2.load_state(str(bg / "state"))
    assert _same(dict(lm2.state_dict()), dict(lm.state_dict()))


def test_training_goes_on_while_a_checkpoint_is_written_one_at_a_time(tiny_modernbert_dir, tmp_path, monkeypatch):
    import accelerate.utils

    gate, real = threading.Event(), accelerate.utils.save

    def held(*a, **k):  # the writer thread waits here until the test lets it go on
        assert gate.wait(60)
        return real(*a, **k)

    monkeypatch.setattr(accelerate.utils, "save", held)
    acc, lm, opt, tok, step = trained(tiny_modernbert_dir)
    hf = acc.unwrap_model(lm).hf_model
    at_save = {k: v.clone() for k, v in hf.state_dict().items()}
    ck = checkpoint.Checkpointer(acc, lm, opt, tok, tmp_path, keep=5, background=True)
    first = ck.save(1, {"step": 1})  # returns while the write waits
    assert not first.exists()
    step()  # training goes on and changes the weights under the writer
    second = threading.Thread(target=ck.save, args=(2, {"step": 2}))
    second.start()
    second.join(1.0)
    assert second.is_alive() and not list((tmp_path / "checkpoints").glob("*-00000002"))  # waits for the first
    gate.set()
    second.join(60)
    ck.wait()
    checkpoint.verify(first)
    checkpoint.verify(tmp_path / "checkpoints" / "step-00000002")
    saved = load_file(first / "model" / "model.safetensors")
    assert all(torch.equal(saved[k], at_save[k]) for k in saved)  # the weights of the step it was taken at
    assert not all(torch.equal(saved[k], hf.state_dict()[k]) for k in saved)


def test_a_failed_write_is_raised_in_the_training_thread(tiny_modernbert_dir, tmp_path, monkeypatch):
    def full_disk(ck):
        raise OSError(28, "No space left on device")

    acc, lm, opt, tok, _ = trained(tiny_modernbert_dir)
    ck = checkpoint.Checkpointer(acc, lm, opt, tok, tmp_path, keep=5, background=True)
    ck.save(1, {"step": 1})
    ck.wait()
    monkeypatch.setattr(checkpoint, "write_manifest", full_disk)
    ck.save(2, {"step": 2})
    with pytest.raises(checkpoint.CheckpointError, match="No space left on device"):
        ck.wait()
    assert checkpoint.latest_good(tmp_path)[1]["step"] == 1  # the previous one is still the one to resume from


KILLED = """
import sys, threading
import accelerate.utils
import torch
from backend.engine import checkpoint
{trained}
acc, lm, opt, tok, step = trained(sys.argv[1])
ck = checkpoint.Checkpointer(acc, lm, opt, tok, sys.argv[2], keep=1, background=True)
ck.save(1, {{"step": 1}})
ck.wait()
step()
real = accelerate.utils.save

def stuck(obj, f, **k):  # writes its file, then stops as if the process were killed mid-checkpoint
    real(obj, f, **k)
    sys.stdout.write("writing\\n"); sys.stdout.flush()  # one write: print() writes the newline apart
    threading.Event().wait()

accelerate.utils.save = stuck
ck.save(2, {{"step": 2}})
sys.stdout.write("training goes on\\n"); sys.stdout.flush()
threading.Event().wait()
"""


def test_kill_9_during_a_background_write_leaves_the_previous_checkpoint(tiny_modernbert_dir, tmp_path):
    import inspect

    script = KILLED.format(trained=inspect.getsource(trained))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(tiny_modernbert_dir), str(tmp_path)],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    said = {proc.stdout.readline().strip() for _ in range(2)}
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert said == {"writing", "training goes on"}
    ck_root = tmp_path / "checkpoints"
    assert [p.name for p in ck_root.iterdir() if p.name.startswith("step-")] == ["step-00000001"]  # kept: not pruned
    assert (ck_root / ".tmp-step-00000002" / "state" / "model.safetensors").exists()  # the torn write, never sealed
    found, state = checkpoint.latest_good(tmp_path)
    assert found.name == "step-00000001" and state["step"] == 1

"""A compiled pair: the eager losses, one graph per attention kind and mode and no recompile afterwards (evaluations
and the phase switch included), compile times in train.log, and kernels cached for the next process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from backend.core.paths import REPO_ROOT
from backend.runs.train import prepare_runs, train_run
from conftest import TINY_MODERNBERT, save_tiny_model, tiny_train_cfg, train_rows

# The tiny corpus holds 68 held-out rows of 64 tokens: in batches of 5, the last has 3 rows (a new shape for an
# evaluation that does not pad it). Evaluations every 2 steps land on both sides of the CLM -> MLM switch.
PAIR = {
    "recipe": "pair",
    "train.batch_size": 5,
    "logging.eval_batches": 14,
    "logging.eval_every": 2,
    "phases.main.steps": 4,
    "phases.decay.steps": 3,
    "logging.checkpoint_every": 3,
}


def _start_train(model, name: str, env: dict, tmp_path):
    """(run, process, its output file): ``python -m backend train`` of a compiled clm_detour run named ``name``, in
    a fresh process."""
    (run,) = prepare_runs(tiny_train_cfg(model, name, **{**PAIR, "recipe": "clm_detour", "train.compile": "true"}))
    out = tmp_path / f"{name}.out"
    with open(out, "wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "backend", "train", "--run-dir", str(run)], cwd=REPO_ROOT,
                                env=env, stdout=f, stderr=subprocess.STDOUT)  # fmt: skip
    return run, proc, out


def _compile_lines(run, proc, out) -> list[str]:
    """Once the fresh process has trained ``run``: its train.log's "compile: first ..." lines."""
    try:
        proc.wait(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out.read_text()[-6000:]
    assert json.loads((run / "status.json").read_text())["state"] == "done"
    return [ln for ln in (run / "train.log").read_text().splitlines() if "compile: first" in ln]


@pytest.mark.slow
def test_compiled_pair_matches_eager_compiles_each_graph_once_and_caches_its_kernels(
    tmp_path, isolated_runs_dir, isolated_cache_dir, monkeypatch
):
    import torch._dynamo
    from safetensors.torch import load_file
    from torch._dynamo.utils import counters

    import backend.detour.trainer as trainer
    from backend.engine.compiling import cpp_compiler

    if cpp_compiler() is None:
        pytest.skip("torch.compile on CPU needs a C++ compiler (g++/clang++); none on this machine")
    # two layers (one global, one sliding-window): both attention kinds, half the compile time of four
    model = save_tiny_model(tmp_path / "model", {**TINY_MODERNBERT, "num_hidden_layers": 2})
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)  # the trainer sets it; restored after the test
    torch._dynamo.reset()  # graphs compiled by earlier tests in this process would be reused, not compiled
    graphs = lambda: counters["stats"]["unique_graphs"]  # noqa: E731
    start, calls = graphs(), []  # (what ran, graphs compiled so far) after every training step and evaluation
    real_step, real_eval = trainer._train_step, trainer.evaluate

    def step(s, phase, *a):
        out = real_step(s, phase, *a)
        calls.append((f"{phase.objective} training step", graphs()))
        return out

    def evaluate(s):
        out = real_eval(s)
        calls.append(("held-out evaluation", graphs()))
        return out

    # A fresh process compiles a clm_detour run meanwhile, on the other core, into a cache of its own (checked at the
    # end: a later process loads its kernels); this process's kernels are checked in isolated_cache_dir alone.
    env = {**os.environ, "DETOUR_CACHE_DIR": str(tmp_path / "fresh-cache")}
    fresh = _start_train(model, "first", env, tmp_path)

    monkeypatch.setattr(trainer, "_train_step", step)
    monkeypatch.setattr(trainer, "evaluate", evaluate)
    compiled = prepare_runs(tiny_train_cfg(model, "comp", **PAIR, **{"train.compile": "true"}))
    for run in compiled:
        assert train_run(run)["state"] == "done"
    # {CLM, MLM} x {training, evaluation}: four graphs for the whole pair, each compiled on its first call ...
    assert graphs() - start == 4, calls
    before = [start] + [n for _, n in calls]
    first: dict[str, int] = {}
    for i, (kind, n) in enumerate(calls):
        first.setdefault(kind, i)
        assert n == before[i] or first[kind] == i, f"recompiled at call {i} ({kind}): {calls}"
    assert list(first) == ["held-out evaluation", "clm training step", "mlm training step"]
    assert sum(kind == "held-out evaluation" for kind, _ in calls) >= 8  # ... through many evaluations and a switch
    log = (compiled[0] / "train.log").read_text()
    for line in ("first held-out evaluation took", "first clm training step (step 1) took", "first mlm training step"):
        assert f"compile: {line}" in log
    assert "recompiled" not in log + (compiled[1] / "train.log").read_text()

    # the same losses as eager, through the causal switch; checkpoints keep HF's parameter names
    monkeypatch.setattr(trainer, "_train_step", real_step)
    monkeypatch.setattr(trainer, "evaluate", real_eval)
    eager = prepare_runs(tiny_train_cfg(model, "eager", **PAIR, **{"train.compile": "false"}))
    for run in eager:
        assert train_run(run)["state"] == "done"
    for c, e in zip(compiled, eager):
        a, b = train_rows(e), train_rows(c)
        assert sorted(a) == sorted(b) == list(range(1, 8))
        for s in a:
            assert b[s]["loss"] == pytest.approx(a[s]["loss"], rel=2e-3), (c.name, s)
        names = lambda run: sorted(load_file(run / "final" / "model.safetensors"))  # noqa: E731
        assert names(c) == names(e) and not any("_orig_mod" in n for n in names(c))
    assert [train_rows(compiled[0])[s]["objective"] for s in (4, 5)] == ["clm", "mlm"]

    # kernels are written under the project cache ...
    kernels = isolated_cache_dir / "inductor"
    assert any((kernels / "fxgraph").rglob("*")) and any((kernels / "aotautograd").rglob("*"))
    # ... and a fresh process (the queue trains every run in its own, a resume too) loads the kernels an earlier
    # process compiled instead of building them. Both are fresh processes, as in use: this pytest process has
    # compiled other graphs before (flex attention tests), whose state can key its cache entries differently.
    logs = [_compile_lines(*fresh)]
    logs.append(_compile_lines(*_start_train(model, "again", env, tmp_path)))  # once "first" has finished
    lines = logs[1]
    assert len(lines) == 3 and all("0 miss(es)" in ln and "0 hit(s)" not in ln for ln in lines), logs

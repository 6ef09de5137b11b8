"""torch.compile policy: whether the encoder is compiled, where its kernels are kept, and what compiling cost.

``train.compile: auto`` (the default) compiles on a CUDA GPU and not on a CPU. On an H100 (issue 17) a
compiled ModernBERT-base encoder trained 1.26x faster at seq 1024 (docs/results.md); on a CPU the cold compile costs
minutes of C++ builds (~1.5 min for the bundled tiny model on 2 busy cores) for a gain a short CPU run never pays
back. Like ``train.precision`` it is resolved on the machine that trains (``backend/runs/train.py``).

What gets compiled, and how often: the encoder only (the vocabulary head sees a data-dependent number of labelled
positions), in place (``nn.Module.compile``: parameter names and checkpoints stay HF's), with ``dynamic=False``.
Dynamo then keeps one graph per attention kind and mode: {CLM (causal masks), MLM (bidirectional)} x {training,
held-out evaluation under ``no_grad``}, each compiled once; the evaluation pads its last batch to the training
batch so no new shape ever appears (a recompile is a bug: ``CompileClock`` says so in train.log).

Kernels persist under ``<cache>/inductor`` (``DETOUR_CACHE_DIR``; inductor's FX graph and AOTAutograd caches), so
the other run of a pair, a resumed run and the next experiment load compiled kernels instead of building them
(``TORCHINDUCTOR_CACHE_DIR`` is set to it: move the folder with ``DETOUR_CACHE_DIR``).

A compiled step can end the process with no Python error to catch: on a 2-core AMD EPYC with AVX512-BF16 the CPU
smoke run of ``bench/bench_gpu.py`` aborted with heap corruption (``malloc_consolidate(): invalid chunk size``) in its
first compiled CLM step. So the first call of each kind leaves a mark in the run folder (``ABORT_MARK``) that only
its return removes: a process that died inside one is named in the run's error, and the run's resume trains without
compile (``resolve_compile``'s ``aborted``), from its last checkpoint: a phase's first step comes right after the
previous phase's checkpoint, the held-out graphs compile at step 0. A new run tries compiling again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

import torch

from backend.core import atomic
from backend.core.paths import cache_dir
from backend.engine.compile_abort import ABORT_MARK, aborted_call, died  # noqa: F401 (read here by the trainer's callers)


def cpp_compiler() -> str | None:
    """What torch.compile's CPU backend (inductor) would build its kernels with, if anything."""
    return os.environ.get("CXX") or next((c for c in ("g++", "clang++", "c++") if shutil.which(c)), None)


def resolve_compile(
    requested: bool | str, device: str | None = None, fsdp: bool = False, aborted: dict | None = None
) -> tuple[bool, str]:
    """``train.compile`` (auto|true|false) -> (compile?, why). Explicit values are kept as they are, but for a run
    whose process a compiled call ended before (``aborted``: ``aborted_call(run_dir)``): it trains without."""
    wanted = resolve_compile(requested, device, fsdp) if aborted else None
    if wanted and wanted[0]:
        return False, (f"off: {died(aborted)}; this run trains without compile from here on (a new run compiles "
                       f"again; delete {ABORT_MARK} in the run folder to retry here)")  # fmt: skip
    if requested is not None and requested != "auto":
        return bool(requested), "set in the config"
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if fsdp:
        return False, "auto: off with train.fsdp (not supported together here)"
    if device != "cuda":
        return False, "auto: off on CPU (a cold compile takes minutes there; set true to compile anyway)"
    if cpp_compiler() is None:
        return False, "auto: no C/C++ compiler found (inductor builds its launchers with one)"
    return True, f"auto: on with {torch.cuda.get_device_name()}"


def kernel_cache_dir() -> Path:
    """Point inductor's persistent caches (and Triton's, which live inside) at ``<cache>/inductor``; return it."""
    path = cache_dir() / "inductor"
    path.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)  # inductor reads it at each cache lookup
    return path


def compile_encoder(lm: torch.nn.Module) -> Path:
    """Compile ``lm``'s encoder in place (static shapes); returns where its kernels are cached."""
    where = kernel_cache_dir()
    lm.encoder().compile(dynamic=False)
    return where


def _counts() -> tuple[int, int, int]:
    """(graphs dynamo has compiled, AOTAutograd cache hits, misses) in this process so far."""
    from torch._dynamo.utils import counters

    aot = counters["aot_autograd"]
    return counters["stats"]["unique_graphs"], aot["autograd_cache_hit"], aot["autograd_cache_miss"]


class CompileClock:
    """Writes what compiling cost to train.log: the time of the first call of each kind (a training step of each
    objective, the held-out evaluation), which is when its graph is compiled, and any later recompile. With
    ``run_dir``, a first call runs under ``ABORT_MARK``: what a process that dies in it leaves behind."""

    def __init__(self, on: bool, log, run_dir: Path | None = None):
        self.on, self.log, self.seen = on, log, set()
        self.mark = Path(run_dir) / ABORT_MARK if run_dir is not None else None

    @contextlib.contextmanager
    def time(self, kind: str, step: int | None = None):
        if not self.on:
            yield
            return
        before, t0 = _counts(), time.perf_counter()
        first = kind not in self.seen and self.mark is not None
        if first:
            atomic.write_json(self.mark, {"kind": kind, "step": step, "pid": os.getpid(), "at": time.time()})
        try:
            yield
        finally:  # a Python error is the run's own failure, with its traceback: only a dead process leaves the mark
            if first:
                self.mark.unlink(missing_ok=True)
        seconds = time.perf_counter() - t0
        graphs, hits, misses = (a - b for a, b in zip(_counts(), before))
        where = "" if step is None else f" (step {step})"
        if kind not in self.seen:
            self.seen.add(kind)
            what = "no new graph: compiled earlier in this process"
            if graphs:
                what = f"{graphs} graph(s) compiled; kernel cache: {hits} hit(s), {misses} miss(es)"
            self.log(f"compile: first {kind}{where} took {seconds:.1f} s ({what})")
        elif graphs:
            self.log(f"warning: compile: {kind}{where} recompiled ({graphs} graph(s), {seconds:.1f} s); "
                     "TORCH_LOGS=recompiles names the guard that failed")  # fmt: skip

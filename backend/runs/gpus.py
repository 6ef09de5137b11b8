"""One run per GPU: which GPUs a queue worker may hand out, and which one the next run gets.

A worker started with ``pin_gpus`` (sweeps do) launches each run with ``CUDA_VISIBLE_DEVICES`` set to one free
GPU and records it in the run's status (``gpu``), so two cells never share a device and a restarted worker sees
which devices the runs it did not launch still hold."""

from __future__ import annotations

import os
import shutil
import subprocess

GPUS_ENV = "DETOUR_GPUS"


def visible_gpus() -> list[str]:
    """GPU ids this machine offers: ``DETOUR_GPUS`` (comma list) if set, else ``CUDA_VISIBLE_DEVICES`` if set, else
    what ``nvidia-smi -L`` lists; [] on a machine without NVIDIA GPUs (no torch import: the worker stays light)."""
    for env in (GPUS_ENV, "CUDA_VISIBLE_DEVICES"):
        raw = os.environ.get(env)
        if raw is not None:
            return [g.strip() for g in raw.split(",") if g.strip() and g.strip() != "-1"]
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def slots(max_concurrent: int, gpus: list[str]) -> int:
    """Runs at once: one per GPU when pinning (capped by ``max_concurrent``), else ``max_concurrent``."""
    return min(max_concurrent, len(gpus)) if gpus else max_concurrent


def pick_gpu(gpus: list[str], held: list[str | None]) -> str | None:
    """The first GPU no running run holds; None when all are taken (the run waits)."""
    taken = {str(g) for g in held if g is not None}
    return next((g for g in gpus if g not in taken), None)

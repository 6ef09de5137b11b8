"""What machine this is, for model cards and benchmark records."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo, else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (``avx512_bf16``, ``amx_bf16``, ...) from /proc/cpuinfo; empty where unknown.

    Two hosts may share a model name ("AMD EPYC") and differ in these, which decide how fast bf16 runs."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


# The flags that decide how fast a CPU trains: fp32 vector width (AVX2 / AVX-512) and native bf16 (AVX512-BF16, AMX).
SPEED_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def cpu_speed_flags() -> list[str]:
    """Which of ``SPEED_FLAGS`` this CPU has: two "AMD EPYC" hosts may differ in exactly these, so a measured rate
    (a benchmark result, a cached matmul peak) is kept with them and never compared across them."""
    flags = cpu_flags()
    return [f for f in SPEED_FLAGS if f in flags]

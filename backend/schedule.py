"""Learning rate as a pure function of (phase, step in phase).

No torch scheduler object: nothing to reset, carry or mis-step under Accelerate (which steps an
``AcceleratedScheduler`` once per process and skips non-update steps). Phase 2 "resets the
schedule" simply because its step counter starts at 0, while the optimizer state is untouched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Phase:
    name: str  # warmup | main | decay
    objective: str  # clm | mlm
    mlm_probability: float
    steps: int
    schedule: str  # warmup_constant | 1-sqrt | linear
    warmup_steps: int = 0
    final_lr_ratio: float = 0.1
    freeze: tuple = ()  # resolved (layers, embeddings, head)

    @property
    def causal(self) -> bool:
        return self.objective == "clm"


def lr_factor(phase: Phase, step: int) -> float:
    """Multiplier of the peak LR at ``step`` (0-based) within ``phase``."""
    if phase.schedule == "warmup_constant":
        if phase.warmup_steps > 0 and step < phase.warmup_steps:
            return (step + 1) / phase.warmup_steps
        return 1.0
    t = min(step / max(phase.steps, 1), 1.0)
    a = phase.final_lr_ratio
    if phase.schedule == "1-sqrt":
        return a + (1 - a) * (1 - math.sqrt(t))
    if phase.schedule == "linear":
        return a + (1 - a) * (1 - t)
    raise ValueError(phase.schedule)


def locate(phases: list[Phase], global_step: int) -> tuple[int, int]:
    """(phase index, step within phase) of a 0-based global optimizer step."""
    s = global_step
    for i, p in enumerate(phases):
        if s < p.steps:
            return i, s
        s -= p.steps
    return len(phases) - 1, phases[-1].steps

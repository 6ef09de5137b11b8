"""One optimizer step must fit in every phase's budget.

Before this, ``train.grad_accum=100000`` on a 4,096-token budget validated: the phase rounds up to one step of
25.6M tokens (12,500x the budget), and a cancel could not stop it for hours. The budgets are read from
``build_phases`` itself (with a one-token step, each token-budgeted phase has as many steps as tokens), so the
check follows the phases wherever the config keeps them.
"""

from __future__ import annotations

import copy
import math

from backend.core.errors import ConfigError
from backend.detour.recipe import Phase, build_phases, tokens_per_step


def _with_step_of(cfg: dict, tokens: int) -> list[Phase]:
    unit = copy.deepcopy(cfg)
    unit["train"].update(batch_size=1, grad_accum=1, seq_len=tokens)
    try:
        return build_phases(unit, 1)
    except ConfigError:  # a preset's part under one token: the real step size was refused first, or fits
        return []


def _times(ratio: float) -> str:
    """1.2x, not "1x", for a step just over the budget; 12,500x for a far larger one; never "1.0x" for a step over it
    (512 tokens against 500 is 1.02x: more decimals until the figure says "more")."""
    if ratio >= 10:
        return f"{ratio:,.0f}x"
    digits = 1
    while digits < 4 and round(ratio, digits) <= 1:
        digits += 1
    return f"{ratio:.{digits}f}x"


def check_step_fits(cfg: dict, world_size: int = 1) -> None:
    """Raise ConfigError when one optimizer step (batch_size x seq_len x grad_accum x processes) holds more tokens
    than a phase's whole token budget. Phases budgeted in steps always fit (a step-budgeted phase keeps its step
    count whatever the step size: that tells the two apart)."""
    tps = tokens_per_step(cfg, world_size)
    phases = build_phases(cfg, world_size)
    wt = cfg["train"]["warmup_tokens"]
    if wt and phases and math.ceil(wt / tps) > phases[0].steps:  # build_phases cut it at the phase end: silently
        raise ConfigError(
            "train.warmup_tokens",
            wt,
            f"longer than the first phase '{phases[0].name}' ({phases[0].steps * tps:,} tokens): the LR would still "
            "be rising when it ends and never reach its peak there; use at most that, or null (10% of main)",
        )
    ones, twos = _with_step_of(cfg, 1), _with_step_of(cfg, 2)
    if not (len(ones) == len(twos) == len(phases)):
        return  # a budget that rounds to zero at one size: nothing to compare
    for phase, one, two in zip(phases, ones, twos, strict=True):
        budget = one.steps  # tokens, for a phase budgeted in tokens
        if one.steps == two.steps or tps <= budget:
            continue
        t = cfg["train"]
        key = "train.grad_accum" if t["grad_accum"] > 1 else "train.batch_size"
        world = f" x {world_size} processes" if world_size > 1 else ""
        raise ConfigError(
            key,
            t["grad_accum"] if key == "train.grad_accum" else t["batch_size"],
            f"one optimizer step is {tps:,} tokens (batch_size {t['batch_size']} x seq_len {t['seq_len']} x "
            f"grad_accum {t['grad_accum']}{world}), {_times(tps / budget)} the whole budget of phase '{phase.name}' "
            f"({budget:,} tokens); lower train.grad_accum, batch_size or seq_len, or raise that phase's tokens",
        )

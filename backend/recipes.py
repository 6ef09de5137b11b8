"""Recipes -> phases. The whole recipe is readable here.

``clm_detour``: [warmup MLM?] -> main: CLM (causal attention, next-token through the MLM head)
                -> decay: bidirectional MLM 15%, ``decay.fraction`` of main's tokens, LR 1-sqrt to 10%.
``mlm``:        [warmup MLM?] -> main: MLM 30% (bidirectional)  -> the same decay.
``pretrain``:   from-scratch MLM (main) -> the same decay.
``pair``:       ``clm_detour`` and ``mlm`` with the same seed, data order and budgets.
The LR warms up linearly over ``train.warmup_tokens`` at the start of the first phase, then stays
at the peak; the decay phase restarts the schedule (optimizer state is kept).
"""

from __future__ import annotations

import math

from .schedule import Phase


def tokens_per_step(cfg: dict, world_size: int = 1) -> int:
    t = cfg["train"]
    return t["batch_size"] * t["grad_accum"] * world_size * t["seq_len"]


def _steps(p: dict, tps: int, default_tokens: int | None = None) -> int:
    if p.get("steps"):
        return int(p["steps"])
    tokens = p.get("tokens") or default_tokens or 0
    return math.ceil(tokens / tps) if tokens else 0


def build_phases(cfg: dict, world_size: int = 1) -> list[Phase]:
    recipe = cfg["recipe"]
    assert recipe in ("clm_detour", "mlm", "pretrain"), "pair is split into two runs before training"
    ph = cfg["phases"]
    tps = tokens_per_step(cfg, world_size)
    phases: list[Phase] = []

    warm_steps = _steps(ph["warmup"], tps)
    main_steps = _steps(ph["main"], tps)
    first_steps = warm_steps or main_steps
    wt = cfg["train"]["warmup_tokens"]
    lr_warmup = math.ceil(wt / tps) if wt is not None else max(1, round(0.1 * main_steps))
    lr_warmup = min(lr_warmup, first_steps)

    if warm_steps:
        phases.append(Phase("warmup", "mlm", ph["warmup"]["mlm_probability"], warm_steps, "warmup_constant", lr_warmup))
    objective = "clm" if recipe == "clm_detour" else "mlm"
    phases.append(
        Phase(
            "main",
            objective,
            ph["main"]["mlm_probability"],
            main_steps,
            "warmup_constant",
            0 if warm_steps else lr_warmup,
            freeze=_freeze_tuple(ph["main"]["freeze"]),
        )
    )
    d = ph["decay"]
    decay_steps = _steps(d, tps, default_tokens=round(d["fraction"] * main_steps * tps))
    if decay_steps:
        phases.append(
            Phase(
                "decay",
                "mlm",
                d["mlm_probability"],
                decay_steps,
                d["shape"],
                final_lr_ratio=d["final_lr_ratio"],
                freeze=_freeze_tuple(d["freeze"]),
            )
        )
    return phases


def _freeze_tuple(fr: dict) -> tuple:
    layers = fr.get("layers")
    return (tuple(layers) if isinstance(layers, list) else layers, bool(fr.get("embeddings")), bool(fr.get("head")))


def freeze_dict(phase: Phase) -> dict | None:
    if not phase.freeze:
        return None
    layers, emb, head = phase.freeze
    return {"layers": list(layers) if isinstance(layers, tuple) else layers, "embeddings": emb, "head": head}


def split_pair(cfg: dict) -> list[tuple[str, dict]]:
    """A pair config -> [(role, cfg)] with names '<name>-detour' and '<name>-mlm'."""
    import copy

    if cfg["recipe"] != "pair":
        return [(None, cfg)]
    out = []
    for role, recipe in (("detour", "clm_detour"), ("mlm", "mlm")):
        c = copy.deepcopy(cfg)
        c["recipe"] = recipe
        c["name"] = f"{cfg['name']}-{role}"
        c.setdefault("_meta", {})
        c["_meta"] = {**c.get("_meta", {}), "pair": cfg["name"], "role": role}
        out.append((role, c))
    return out

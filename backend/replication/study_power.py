"""Each study's power before it runs (``sweeps.power_plan`` on its tasks, fine-tuning settings, base and seeds), and
its pilot: the same fine-tuning settings on the MLM / detour pair (or pure MLM / 50-50 / pure CLM) at the smallest
budget, 3 pretraining seeds x 2 fine-tuning seeds, so its sweep measures both seed levels at these settings and the
plan afterwards reads it as its source (``replicate --pilot``)."""

from __future__ import annotations

import copy

from backend.sweeps import power_plan, variance

PILOT_SEEDS, PILOT_FINETUNE_SEEDS = 3, 2


def detour_power(s: dict) -> dict:
    """The detour study's detectable difference (detour - MLM over the suite) at its settings."""
    from backend.replication.study_time import suite_tasks

    tasks = variance.finetune_tasks(s["suite"], s["finetune"])
    f = int(s["finetune"].get("seeds") or min(t["seeds"] for t in suite_tasks(s["suite"], s["finetune"])))
    return power_plan.plan_power(tasks, s["model"], s["seeds"], f)


def hybrid_power(s: dict) -> dict:
    """The second study's detectable difference (a split - pure MLM over the suite) at its settings."""
    from backend.replication.hybrid import base_config

    tasks = variance.finetune_tasks(s["suite"], s["eval"])
    model = variance.model_label(base_config(s)["model"])
    return power_plan.plan_power(tasks, model, s["seeds"], int(s["eval"].get("seeds") or 1))


def pilot_detour(s: dict) -> dict:
    """The detour study's pilot: its settings on the MLM / detour pair at the smallest budget, 3 x 2 seeds."""
    p = copy.deepcopy(s)
    p.update(budgets=s["budgets"][:1], seeds=PILOT_SEEDS, interventions=False, arms=["mlm", "clm_detour"], cka=None,
             description=f"pilot of the {s['preset']} preset: its fine-tuning settings on the MLM / detour pair at "
             f"{s['budgets'][0]:,} tokens, {PILOT_SEEDS} pretraining x {PILOT_FINETUNE_SEEDS} fine-tuning seeds (the "
             "seed noise its plan reads)")  # fmt: skip
    p["finetune"] = {**s["finetune"], "seeds": PILOT_FINETUNE_SEEDS}
    p.pop("layers", None)
    return p


def pilot_hybrid(s: dict) -> dict:
    """The second study's pilot: pure MLM / 50-50 / pure CLM at the first budget, 3 x 2 seeds, no continuation."""
    p = copy.deepcopy(s)
    p.update(budgets=s["budgets"][:1], seeds=PILOT_SEEDS, shares=[0.0, 0.5, 1.0], cpt=False,
             description=f"pilot of the hybrid-splits {s['preset']} preset: its fine-tuning settings at "
             f"{s['budgets'][0]:,} tokens, {PILOT_SEEDS} pretraining x {PILOT_FINETUNE_SEEDS} fine-tuning "
             "seeds")  # fmt: skip
    p["eval"] = {**s["eval"], "seeds": PILOT_FINETUNE_SEEDS}
    return p


def pilot_command(study: str, preset: str) -> str:
    extra = " --study hybrid-splits" if study == "hybrid-splits" else ""
    return f"python -m backend replicate{extra} --preset {preset} --pilot"

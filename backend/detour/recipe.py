"""The recipe: which phases run, with what objective, attention, masking, LR and frozen parameters.

``clm_detour``: [warmup MLM?] -> main: CLM (causal attention, next-token through the MLM head)
                -> decay: bidirectional MLM 15%, ``decay.fraction`` of main's tokens, LR 1-sqrt to 10%.
``mlm``:        [warmup MLM?] -> main: MLM 30% (bidirectional)  -> the same decay.
``pretrain``:   from-scratch MLM (main) -> the same decay.
``pair``:       ``clm_detour`` and ``mlm`` with the same seed, data order and budgets (two runs).

**One optimizer spans all phases.** AdamW is built once (``build_optimizer``) and its state (moments,
step counts) is carried from phase to phase untouched. A phase change changes only three things: the
attention mode (``Phase.causal``), the objective, and the LR, which is a pure function of the step
*within* the phase (``Phase.lr_factor``). So the decay "resets the schedule" because its step counter
starts at 0, not because any scheduler object is rebuilt (nothing to mis-step under Accelerate, which
steps an ``AcceleratedScheduler`` once per process and skips non-update steps).

**Frozen means bit-identical.** Zeroing a frozen parameter's gradient is not enough once optimizer state
exists (AdamW's momentum and weight decay still move it), so the trainer drops its gradient entirely
(``p.grad = None``) after backward: torch's AdamW skips such parameters (no update, no decay, no state
change). Gradients are still computed, since DDP needs a fixed set of parameters that require grad.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import nn

from backend.engine.config import parse_layer_range
from backend.engine.models import parameter_groups


@dataclass(frozen=True)
class Phase:
    name: str  # warmup | main | decay
    objective: str  # clm | mlm
    mlm_probability: float  # masking rate (MLM phases)
    steps: int  # optimizer steps
    schedule: str  # warmup_constant | 1-sqrt | linear
    warmup_steps: int = 0  # linear LR warm-up at the start of this phase (warmup_constant only)
    final_lr_ratio: float = 0.1  # where 1-sqrt / linear end, as a fraction of the peak
    freeze_layers: tuple[int, ...] = ()  # transformer blocks left untouched in this phase
    freeze_embeddings: bool = False
    freeze_head: bool = False  # everything above the blocks: final norm, prediction head, decoder bias

    @property
    def causal(self) -> bool:
        """CLM trains with causal attention; every MLM phase is bidirectional."""
        return self.objective == "clm"

    def lr_factor(self, step: int) -> float:
        """Multiplier of the peak LR at ``step`` (0-based) within this phase."""
        if self.schedule == "warmup_constant":
            if self.warmup_steps > 0 and step < self.warmup_steps:
                return (step + 1) / self.warmup_steps
            return 1.0
        t = min(step / max(self.steps, 1), 1.0)
        a = self.final_lr_ratio
        if self.schedule == "1-sqrt":
            return a + (1 - a) * (1 - math.sqrt(t))
        if self.schedule == "linear":
            return a + (1 - a) * (1 - t)
        raise ValueError(self.schedule)

    def frozen_names(self, hf_model: nn.Module) -> set[str]:
        """Names of the parameters this phase keeps fixed."""
        groups = parameter_groups(hf_model)
        names = {n for i in self.freeze_layers for n in groups.get(f"layer.{i}", [])}
        if self.freeze_embeddings:
            names.update(groups.get("embeddings", []))
        if self.freeze_head:
            names.update(groups.get("head", []))
        return names


def tokens_per_step(cfg: dict, world_size: int = 1) -> int:
    t = cfg["train"]
    return t["batch_size"] * t["grad_accum"] * world_size * t["seq_len"]


def _steps(p: dict, tps: int, default_tokens: int | None = None) -> int:
    if p.get("steps"):
        return int(p["steps"])
    tokens = p.get("tokens") or default_tokens or 0
    return math.ceil(tokens / tps) if tokens else 0


def _freeze(cfg: dict, phase: str, num_layers: int | None) -> dict:
    fr = cfg["phases"][phase]["freeze"]
    layers = parse_layer_range(fr["layers"], f"phases.{phase}.freeze.layers", num_layers)
    return {"freeze_layers": tuple(layers), "freeze_embeddings": fr["embeddings"], "freeze_head": fr["head"]}


def build_phases(cfg: dict, world_size: int = 1, num_layers: int | None = None) -> list[Phase]:
    """The recipe's phases for a validated single-run config (``num_layers`` range-checks the freeze sets)."""
    recipe = cfg["recipe"]
    assert recipe in ("clm_detour", "mlm", "pretrain"), "pair is split into two runs before training"
    ph = cfg["phases"]
    tps = tokens_per_step(cfg, world_size)
    warm_steps, main_steps = _steps(ph["warmup"], tps), _steps(ph["main"], tps)
    wt = cfg["train"]["warmup_tokens"]
    lr_warmup = math.ceil(wt / tps) if wt is not None else max(1, round(0.1 * main_steps))
    lr_warmup = min(lr_warmup, warm_steps or main_steps)  # LR warm-up happens in the first phase only

    phases: list[Phase] = []
    if warm_steps:
        phases.append(Phase("warmup", "mlm", ph["warmup"]["mlm_probability"], warm_steps, "warmup_constant", lr_warmup))
    phases.append(
        Phase(
            "main",
            "clm" if recipe == "clm_detour" else "mlm",  # the detour: the one line where the recipes differ
            ph["main"]["mlm_probability"],
            main_steps,
            "warmup_constant",
            0 if warm_steps else lr_warmup,
            **_freeze(cfg, "main", num_layers),
        )
    )
    d = ph["decay"]
    decay_steps = _steps(d, tps, default_tokens=round(d["fraction"] * main_steps * tps))
    if decay_steps:  # no warm-up: from the peak straight down to final_lr_ratio of it
        phases.append(
            Phase(
                "decay",
                "mlm",
                d["mlm_probability"],
                decay_steps,
                d["shape"],
                final_lr_ratio=d["final_lr_ratio"],
                **_freeze(cfg, "decay", num_layers),
            )
        )
    return phases


def locate(phases: list[Phase], global_step: int) -> tuple[int, int]:
    """(phase index, step within phase) of a 0-based global optimizer step."""
    s = global_step
    for i, p in enumerate(phases):
        if s < p.steps:
            return i, s
        s -= p.steps
    return len(phases) - 1, phases[-1].steps


def split_pair(cfg: dict) -> list[tuple[str | None, dict]]:
    """A pair config -> [(role, cfg)] named '<name>-detour' and '<name>-mlm'; anything else -> [(None, cfg)]."""
    if cfg["recipe"] != "pair":
        return [(None, cfg)]
    out = []
    for role, recipe in (("detour", "clm_detour"), ("mlm", "mlm")):
        c = copy.deepcopy(cfg)
        c["recipe"], c["name"] = recipe, f"{cfg['name']}-{role}"
        c["_meta"] = {**c.get("_meta", {}), "pair": cfg["name"], "role": role}
        out.append((role, c))
    return out


def drop_frozen_grads(params: list[nn.Parameter]) -> None:
    """After backward, before clipping and stepping: AdamW skips a parameter whose grad is None."""
    for p in params:
        p.grad = None


# --- the one optimizer ------------------------------------------------------------------------------------


def no_decay(name: str, param: nn.Parameter) -> bool:
    lname = name.lower()
    return param.ndim < 2 or lname.endswith(".bias") or "norm" in lname


def build_optimizer(hf_model: nn.Module, train_cfg: dict) -> torch.optim.AdamW:
    """AdamW, decoupled weight decay, none on biases and norms; built once, used by every phase.

    The paper used Composer's DecoupledAdamW, whose weight decay is *not* multiplied by the LR: each step
    shrinks weights by ``wd * lr / peak_lr``. torch's AdamW shrinks by ``lr * weight_decay``, so we pass
    ``weight_decay = wd / peak_lr``: the same decay, following the schedule.

    On CUDA the fused kernel updates every tensor in one launch (what the HF Trainer's ``adamw_torch_fused`` does);
    like the others it skips a parameter whose grad is None, so frozen parameters stay bit-identical. Not under
    FSDP (sharded DTensor parameters). On CPU, fused AdamW (half the time of foreach for the bundled model) rounds
    differently from the per-tensor loop, so it is taken only for bf16 runs; fp32 runs take the foreach path
    (torch's default picks it only for CUDA tensors): all tensors per operation instead of one loop of Python per
    tensor, with bit-identical weights to the loop (the same operations in the same order; tested).
    """
    decay, plain = [], []
    for name, p in hf_model.named_parameters():
        (plain if no_decay(name, p) else decay).append(p)
    peak = float(train_cfg["lr"])
    fused = not train_cfg.get("fsdp") and (torch.cuda.is_available() or train_cfg.get("precision") == "bf16")
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": float(train_cfg["weight_decay"]) / peak, "group": "decay"},
            {"params": plain, "weight_decay": 0.0, "group": "no_decay"},
        ],
        lr=peak,
        betas=tuple(train_cfg["betas"]),
        eps=float(train_cfg["eps"]),
        fused=True if fused else None,
        foreach=None if fused or torch.cuda.is_available() or train_cfg.get("fsdp") else True,
    )


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for g in optimizer.param_groups:
        g["lr"] = lr

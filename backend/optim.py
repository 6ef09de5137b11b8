"""AdamW with decoupled weight decay and no decay on biases and norms.

The paper used Composer's DecoupledAdamW, whose weight decay is *not* multiplied by the LR:
each step shrinks weights by ``wd * lr / peak_lr``. torch's AdamW shrinks by ``lr * weight_decay``,
so we pass ``weight_decay = wd / peak_lr`` — the same decay, following the schedule.
"""

from __future__ import annotations

import torch
from torch import nn


def no_decay(name: str, param: nn.Parameter) -> bool:
    lname = name.lower()
    return param.ndim < 2 or lname.endswith(".bias") or "norm" in lname


def build_optimizer(hf_model: nn.Module, train_cfg: dict) -> torch.optim.AdamW:
    decay, plain = [], []
    for name, p in hf_model.named_parameters():
        (plain if no_decay(name, p) else decay).append(p)
    peak = float(train_cfg["lr"])
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": float(train_cfg["weight_decay"]) / peak, "group": "decay"},
            {"params": plain, "weight_decay": 0.0, "group": "no_decay"},
        ],
        lr=peak,
        betas=tuple(train_cfg["betas"]),
        eps=float(train_cfg["eps"]),
    )


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for g in optimizer.param_groups:
        g["lr"] = lr

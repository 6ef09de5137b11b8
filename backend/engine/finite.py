"""Stop a run at the first NaN or infinity, before anything computed from it is saved.

NaN fails every comparison, so nothing downstream notices it: without these checks a diverged run trains to the end
and is marked ``done`` with NaN weights. The loop fetches the step's loss and gradient norm together in the one
device sync it makes anyway (``as_floats``) and checks them; it checks the held-out values of every evaluation,
and the weights before each checkpoint and before ``final/`` (one sync each), so every saved model is finite.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from backend.core.errors import NonFiniteError
from backend.engine.rundir import list_checkpoints


def as_floats(*values) -> list[float]:
    """Scalar tensors (or numbers) as Python floats, with one device-to-host copy for all of them."""
    tensors = [v.full_tensor() if hasattr(v, "full_tensor") else v for v in values]  # a DTensor norm (FSDP2)
    device = next((t.device for t in tensors if torch.is_tensor(t)), torch.device("cpu"))
    return torch.stack([torch.as_tensor(t, device=device).detach().float().reshape(()) for t in tensors]).tolist()


def check(run_dir: Path, step: int, what: str, **values: float) -> dict:
    """Raise NonFiniteError when any value is NaN or infinite; returns ``values`` (to check inline)."""
    bad = {k: v for k, v in values.items() if v is not None and not math.isfinite(v)}
    if bad:
        found = ", ".join(f"{k} = {v}" for k, v in bad.items())
        raise NonFiniteError(f"non-finite {what} at step {step}: {found}; {_stopped(run_dir)}")
    return values


def check_weights(accelerator, model: torch.nn.Module, run_dir: Path, step: int) -> None:
    """Raise NonFiniteError naming the parameters that hold NaN or infinity (every process takes part: under
    FSDP each checks its own shards and the counts are summed)."""
    named = list(model.named_parameters())
    if not named:
        return
    local = [p.to_local() if hasattr(p, "to_local") else p for _, p in named]
    flags = torch.stack([(~torch.isfinite(p.detach())).any() for p in local]).float()
    if accelerator.num_processes > 1:
        flags = accelerator.reduce(flags, reduction="sum")
    bad = [name for (name, _), flag in zip(named, flags.tolist()) if flag > 0]
    if bad:
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise NonFiniteError(
            f"non-finite weights at step {step}: NaN or infinity in {', '.join(bad[:3])}{more}; {_stopped(run_dir)}"
        )


def _stopped(run_dir: Path) -> str:
    """What was kept and how to go on: the newest checkpoint (each one was checked finite before it was saved)."""
    kept = "stopped without saving anything from this step (no final/)"
    cks = list_checkpoints(run_dir)
    if not cks:
        return f"{kept}; no checkpoint was saved before it: lower train.lr (or check the model) and start a new run"
    ck = cks[-1]
    return (
        f"{kept}; last good checkpoint: {ck.name} (step {int(ck.name.split('-')[-1])}); to go on from it, lower "
        f"train.lr in {Path(run_dir) / 'config.yaml'} (or it may diverge again), then "
        f"python -m backend train --run-dir {run_dir} --resume"
    )

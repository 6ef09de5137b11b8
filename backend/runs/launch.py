"""How many processes train a run, said in train.log, and the launches that would silently train fewer refused.

Accelerate 1.15 on a machine without CUDA (tried here, 2 processes, the bundled demo):

* ``accelerate launch --cpu --num_processes 2 -m backend train ...`` starts ONE process: ``--cpu`` picks its simple
  launcher, which ignores ``--num_processes`` (no mpirun hostfile). Refused here, naming the command that works.
* ``accelerate launch --multi_gpu --num_processes 2 -m backend train ...`` starts two processes through torchrun,
  but Accelerate makes them a distributed (gloo) group only when told it is on the CPU (``ACCELERATE_USE_CPU``);
  otherwise each trained alone, on the same run folder. ``cpu_processes`` tells it, so this command (and
  ``torchrun --nproc_per_node 2 -m backend train ...``) is real DDP on CPU.
"""

from __future__ import annotations

import os
from pathlib import Path

from backend.core.errors import ConfigError


def world_size() -> int:
    """Processes the launcher started (torchrun / accelerate set WORLD_SIZE; 1 without a launcher)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def _launcher_asked(ppid: int | None = None) -> int | None:
    """``--num_processes N`` of an ``accelerate launch`` that is this process's parent, else None."""
    try:
        argv = Path(f"/proc/{ppid or os.getppid()}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    if not any(a.endswith("accelerate") for a in argv[:2]) or "launch" not in argv:
        return None
    for i, a in enumerate(argv):
        for flag in ("--num_processes", "--num-processes"):
            if a == flag and i + 1 < len(argv) and argv[i + 1].isdigit():
                return int(argv[i + 1])
            if a.startswith(flag + "="):
                return int(a.split("=", 1)[1]) if a.split("=", 1)[1].isdigit() else None
    return None


def cpu_processes() -> int:
    """Before the Accelerator exists: make a launcher's N CPU processes one DDP group, and refuse a launch whose
    ``--num_processes`` would be ignored. Returns the world size."""
    import torch

    world = world_size()
    if world > 1 and not torch.cuda.is_available():
        os.environ["ACCELERATE_USE_CPU"] = "true"  # else each process trains alone (DistributedType.NO)
    asked = _launcher_asked()
    if world == 1 and asked and asked > 1:
        raise ConfigError(
            "--num_processes",
            asked,
            "this accelerate launch started 1 process (its --cpu launcher ignores --num_processes); for "
            f"{asked} processes run: accelerate launch --multi_gpu --num_processes {asked} -m backend train ... "
            "(gloo on CPU, nccl on GPUs)",
        )
    return world


def describe(cfg: dict, world: int) -> str:
    """The train.log line: how many processes, and the tokens one optimizer step takes from each and in all."""
    t = cfg["train"]
    per = t["batch_size"] * t["grad_accum"] * t["seq_len"]
    how = "DDP, gloo" if world > 1 and not _cuda() else ("DDP, nccl" if world > 1 else "one process")
    return (
        f"processes: world size {world} ({how}); tokens/step {per * world:,} = {world} x {per:,} per process "
        f"({t['batch_size']} sequences x {t['seq_len']} tokens x grad_accum {t['grad_accum']})"
    )


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()

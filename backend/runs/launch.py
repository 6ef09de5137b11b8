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
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from backend.core import faults
from backend.core.errors import ConfigError, DetourError

T = TypeVar("T")


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
    machines, local = machines_and_local(world)
    where = f"{machines} machines x {local} process{'es' if local > 1 else ''} each, " if machines > 1 else ""
    return (
        f"processes: world size {world} ({where}{how}); tokens/step {per * world:,} = {world} x {per:,} per process "
        f"({t['batch_size']} sequences x {t['seq_len']} tokens x grad_accum {t['grad_accum']})"
    )


def machines_and_local(world: int) -> tuple[int, int]:
    """(machines, processes per machine) of this launch: torchrun (under ``accelerate launch``) sets
    ``LOCAL_WORLD_SIZE``, the processes it started on this machine."""
    try:
        local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    except ValueError:
        local = world
    return max(1, world // local), local


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def main_decides(fn: Callable[[], T]) -> T:
    """``fn()`` on the global main process only (rank 0, on the first machine); every process of the launch gets its
    result, or raises its refusal as one line. Without a launcher it is just ``fn()``.

    Why: the CLI's ``train CONFIG.yaml`` makes the run folder; under ``accelerate launch`` (or torchrun) every process
    ran it, the second was refused ("a run named 'X' already exists") and exited, and the others were killed (one
    machine) or waited for it forever (several machines). The process group starts here, before anything can be
    refused, so a refusal reaches every process through it instead of leaving one waiting for a peer that left.
    """
    if world_size() == 1:
        return fn()
    cpu_processes()
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list

    state = PartialState(cpu=os.environ.get("ACCELERATE_USE_CPU") == "true")  # the Accelerator reuses this group
    box: list = [None]
    crash: BaseException | None = None
    if state.is_main_process:
        try:
            box[0] = ("ok", fn())
        except DetourError as exc:
            box[0] = ("refused", str(exc))
            crash = exc
        except BaseException as exc:  # a machine fault or a bug: the others still learn why before it surfaces
            box[0] = ("failed", faults.user_message(exc) or f"{type(exc).__name__}: {exc}")
            crash = exc
    broadcast_object_list(box, from_process=0)
    if crash is not None:
        raise crash
    outcome, value = box[0]
    if outcome == "ok":
        return value
    raise LaunchPeerError(f"the main process (rank 0) stopped before training: {value}")


class LaunchPeerError(DetourError):
    """Another process of the same launch refused or failed: this one stops with its reason."""


PEER_FAILED = "detour/peer-failed"


def _store():
    """The launch's key-value store (the one the process group rendezvoused through), or None without one."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return None
    try:
        return dist.distributed_c10d._get_default_store()
    except (RuntimeError, ValueError):
        return None


def tell_peers(reason: str) -> None:
    """A failing process leaves its one line where the others look when their next collective breaks: gloo only
    says "Connection closed by peer", which named neither the process nor why. Best effort: the first reason stays."""
    store = _store()
    if store is None:
        return
    machines, _ = machines_and_local(world_size())
    where = f"process rank {os.environ.get('RANK', '?')}" + (
        f" (machine {os.environ.get('GROUP_RANK', '?')})" if machines > 1 else ""
    )
    try:
        store.compare_set(PEER_FAILED, "", f"{where}: {reason}")
    except RuntimeError:
        pass


def peer_failure() -> str | None:
    """The reason another process of this launch left, if it said one."""
    store = _store()
    if store is None:
        return None
    try:
        return store.get(PEER_FAILED).decode() if store.check([PEER_FAILED]) else None
    except RuntimeError:
        return None

"""Precision that fits the machine, and the one place an ``Accelerator`` is made.

``train.precision: auto`` resolves to bf16 on a CUDA GPU with bf16 support, to bf16 on a CPU only where a
bf16 matmul is really faster than fp32 there (CPUs with AVX512-BF16 or AMX: ~4x; CPUs without: ~30x
*slower*, which would turn a one-hour run into a day), else fp32. The CPU answer comes from a short matmul
probe (fp32 and bf16 in alternation, the median ratio of 5 rounds: a few seconds on a CPU without native bf16),
cached per CPU model, bf16 flags, thread count and torch version under ``~/.cache/detour-lab/``
(``DETOUR_CACHE_DIR`` overrides).
"""

from __future__ import annotations

import hashlib
import json
import time

import torch

from backend.core import atomic
from backend.core.machine import cpu_flags, cpu_name
from backend.core.paths import cache_dir

MIXED = {"fp32": "no", "no": "no", "bf16": "bf16", "fp16": "fp16"}  # config value -> Accelerate's name
CPU_BF16_MIN_SPEEDUP = 1.25  # bf16 autocast also adds casts: take it only where matmuls gain clearly
PROBE_N = 512


def from_mixed(mixed: str) -> str:
    """Accelerate's mixed_precision (no|bf16|fp16) in ``train.precision``'s words (fp32|bf16|fp16): ``MIXED`` back."""
    return {"no": "fp32"}.get(str(mixed), str(mixed))


def _time_matmul(dtype: torch.dtype, n: int = PROBE_N, reps: int = 3) -> float:
    a = torch.randn(n, n, dtype=torch.float32).to(dtype)
    b = torch.randn(n, n, dtype=torch.float32).to(dtype)
    a @ b  # warm-up (first call picks kernels)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return best


BF16_FLAGS = ("avx512_bf16", "amx_bf16", "amx_tile")  # native bf16 on x86; part of the cache key
PROBE_ROUNDS = 5


def cpu_bf16_probe(refresh: bool = False) -> dict:
    """{'cpu', 'torch', 'threads', 'fp32_gflops', 'bf16_gflops', 'bf16_speedup', ...}: measured once per machine kind.

    The two precisions are timed in alternation over ``PROBE_ROUNDS`` rounds and the speed-up is the median of the
    rounds' ratios: a busy machine slows both sides of a round alike, where one best-of-3 per precision once read
    0.51x on a CPU whose bf16 runs 2x fp32. The cache key holds the CPU's name, its bf16 flags, the thread count and
    the torch version, since hosts named alike ("AMD EPYC") may or may not have native bf16."""
    flags = sorted(f for f in BF16_FLAGS if f in cpu_flags())
    threads = torch.get_num_threads()
    key = hashlib.sha1(f"{cpu_name()}|{','.join(flags)}|{threads}|{torch.__version__}".encode()).hexdigest()[:12]
    path = cache_dir() / f"cpu-bf16-{key}.json"
    if path.exists() and not refresh:
        try:
            return json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            pass
    flops = 2 * PROBE_N**3
    rounds = [(_time_matmul(torch.float32, reps=2), _time_matmul(torch.bfloat16, reps=2)) for _ in range(PROBE_ROUNDS)]
    ratios = sorted(t32 / t16 for t32, t16 in rounds)
    t32, t16 = min(r[0] for r in rounds), min(r[1] for r in rounds)
    out = {
        "cpu": cpu_name(),
        "bf16_flags": flags,
        "torch": torch.__version__,
        "threads": threads,
        "matmul": f"{PROBE_N}x{PROBE_N}",
        "fp32_gflops": round(flops / t32 / 1e9, 1),
        "bf16_gflops": round(flops / t16 / 1e9, 1),
        "bf16_speedup": round(ratios[len(ratios) // 2], 3),
        "speedup_range": [round(ratios[0], 3), round(ratios[-1], 3)],
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_json(path, out)
    except OSError:
        pass  # a read-only home: measure again next time
    return out


def resolve_precision(requested: str, device: str | None = None) -> tuple[str, str]:
    """``requested`` (auto|fp32|bf16|fp16) -> (precision to use, why). Explicit values are kept as they are."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if requested != "auto":
        return requested, "set in the config"
    if device == "cuda":
        if torch.cuda.is_bf16_supported():
            return "bf16", f"auto: {torch.cuda.get_device_name()} supports bf16"
        return "fp32", f"auto: {torch.cuda.get_device_name()} has no bf16"
    probe = cpu_bf16_probe()
    speed = probe["bf16_speedup"]
    if speed >= CPU_BF16_MIN_SPEEDUP:
        return "bf16", f"auto: bf16 matmul {speed:.2f}x fp32 on {probe['cpu']}"
    return "fp32", f"auto: bf16 matmul only {speed:.2f}x fp32 on {probe['cpu']} (no native bf16)"


FP16_NEEDS_GPU = "fp16 needs a CUDA GPU (Accelerate runs fp16 on a CPU as fp32 without a word); use auto, fp32 or bf16"


def check_runs_here(precision: str, key: str, device: str | None = None) -> None:
    """Refuse a precision this machine would silently not run: fp16 on a CPU is plain fp32 under Accelerate, so the
    run would record fp16 (and take its MFU against an fp16 peak) while computing in fp32. One rule for training
    (``train.precision``) and evaluation (``--precision``)."""
    from backend.core.errors import ConfigError

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if precision == "fp16" and device != "cuda":
        raise ConfigError(key, precision, FP16_NEEDS_GPU)


def bf16_warning(precision: str, device: str | None = None) -> str | None:
    """A warning when bf16 is asked for explicitly on a CPU where it is slow, with the measured factor."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if precision != "bf16" or device != "cpu":
        return None
    probe = cpu_bf16_probe()
    if probe["bf16_speedup"] >= 1.0:
        return None
    return (
        f"train.precision bf16 on {probe['cpu']}: a bf16 matmul runs {1 / probe['bf16_speedup']:.0f}x slower than "
        f"fp32 on this CPU ({probe['bf16_gflops']} vs {probe['fp32_gflops']} GFLOP/s); precision: auto picks fp32"
    )


FSDP_NEEDS_GPU = (
    "FSDP needs GPUs here ({found}): accelerate {version} turns its FSDP plugin on only for multi-process GPU "
    "runs and otherwise drops it without a word (on CPU it trains with DDP over gloo), so nothing would be "
    "sharded; set train.fsdp false (the run is then the DDP or one-process training it would have been)"
)


def make_accelerator(precision: str | None = None, fsdp: bool = False, log_with=None, logging_dir=None):
    """An ``Accelerator`` for ``precision`` (fp32|bf16|fp16|auto; None keeps the process's current one).

    ``log_with``/``logging_dir``: experiment trackers and where local ones write (``trackers.accelerator_args``).

    Accelerate keeps one state per process and refuses a second precision; training in a fresh process never
    meets that, tests and the app's evaluations do, so only the precision part of the state is reset.

    ``fsdp``: FSDP2 (per-parameter sharding, so a frozen parameter whose grad is None stays bit-identical, as
    under DDP). Tried on CPU (torch 2.13, accelerate 1.15, 2 processes, gloo): accelerate reports MULTI_CPU and
    wraps the model in DDP, i.e. it silently does not shard; so anything but a real FSDP state is refused here.
    """
    import accelerate
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    if precision == "auto":
        precision = resolve_precision("auto")[0]
    mixed = MIXED[precision] if precision else None
    if AcceleratorState._shared_state:
        current = str(AcceleratorState().mixed_precision)
        if mixed is None:
            mixed = current
        elif mixed != current:
            AcceleratorState._reset_state()
    if mixed is None:
        mixed = "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"
    kwargs = {}
    if fsdp:
        from accelerate import FullyShardedDataParallelPlugin

        kwargs["fsdp_plugin"] = FullyShardedDataParallelPlugin(fsdp_version=2)
    if log_with:
        from accelerate.utils import ProjectConfiguration

        kwargs["log_with"] = list(log_with)
        kwargs["project_config"] = ProjectConfiguration(project_dir=str(logging_dir), logging_dir=str(logging_dir))
    accelerator = Accelerator(mixed_precision=mixed, **kwargs)
    if fsdp and accelerator.distributed_type != "FSDP":
        from backend.core.errors import ConfigError

        found = f"accelerate chose {accelerator.distributed_type.value}"
        raise ConfigError("train.fsdp", True, FSDP_NEEDS_GPU.format(found=found, version=accelerate.__version__))
    return accelerator


def full_state_dict(accelerator, lm) -> dict | None:
    """The unwrapped HF model's full state dict under FSDP (a collective call: every rank), else None.

    Sharded parameters cannot be written by ``save_pretrained`` on one rank; this gathers them first."""
    if accelerator.distributed_type != "FSDP":
        return None
    sd = accelerator.get_state_dict(lm)
    return {k.removeprefix("hf_model."): v for k, v in sd.items()} if accelerator.is_main_process else {}

"""GPU training throughput of a ModernBERT-base-shaped encoder, CLM and MLM at seq 1024 and 8192: this project's
trainer step as a user gets it, beside the HF Trainer and ModernBERT's own pipeline, plus causality checks of the CLM
detour's attention ON THE GPU for every attention implementation there is.

On a GPU box, one command (writes ``bench/results/gpu.json`` + ``gpu.md``; not yet timed on a GPU: expect several
minutes, as every compiled config compiles in its warm-up steps):

    pip install -r requirements-gpu.txt      # liger-kernel (the fused loss); flash-attn too where it installs
    python bench/bench_gpu.py

Where one command may run only 10 minutes, split it (each part writes its own file; the JSON is rewritten after
every row, so a part cut short keeps what it measured):

    python bench/bench_gpu.py --seq-lens 1024 --out bench/results/gpu-1024.json
    python bench/bench_gpu.py --seq-lens 8192 --skip-check --out bench/results/gpu-8192.json

    python bench/bench_gpu.py [--seq-lens 1024 8192] [--objectives clm mlm] [--setups auto:auto:auto sdpa:chunked:off]
                              [--no-hf] [--steps 20] [--warmup 5] [--tokens-per-step 65536] [--grad-accum 1]
                              [--out bench/results/gpu.json] [--check-only | --skip-check]
    python bench/bench_gpu.py --seq-lens 1024 --steps 100   # + the 100-step loss curves of the defaults vs before
    python bench/bench_gpu.py --cpu-smoke                   # tiny 2-layer model, fp32, CPU: every code path here

Rows, per (seq_len, objective), on the same batches (64 x 1024 or 8 x 8192 tokens, bf16 autocast, fp32 weights):

  ours  ``--setups ATTN:LOSS:COMPILE``: the trainer's step (``EncoderLM.forward``: causal masks from
        ``causal_attention``, vocabulary loss only at labelled positions; ``recipe.build_optimizer``; grad-norm clip).
        ATTN auto|sdpa|eager|flex_attention|flash_attention_2 (auto = ``resolve_attn_implementation``, what a run
        resolves); LOSS auto|fused|chunked (auto = liger-kernel's fused linear cross-entropy when it is installed and
        the device is CUDA, as ``EncoderLM`` decides; chunked = the plain/chunked logits path); COMPILE auto|on|off
        (auto = ``engine.compiling.resolve_compile``, the trainer's policy: on with CUDA, compiled in place).
        ``auto:auto:auto`` is what a user gets; ``sdpa:chunked:off`` is the trainer before issue 17 ("before").
        A setup that cannot run here (flex_attention on a CPU: no backward; flash without flash-attn) is a
        "skipped" row with the reason.
  hf    the HF Trainer (transformers' defaults: sdpa, fused AdamW, no compile) with DataCollatorForLanguageModeling
        and ModernBERT's ``sparse_prediction`` (MLM: 30% masked, logits only there). It has no causal switch: its
        "CLM" row (collator mlm=False) is next-token-sized arithmetic (every position projected to the vocabulary)
        under bidirectional attention, as in bench/bench_train.py.
  ref   ModernBERT's own pipeline: 1.7T tokens in 194 h on 8 x H100 = ~304,000 tokens/s per GPU (a constant).

Each row: tokens/s, step time, peak memory, MFU, its speed-up over the HF Trainer row of the same shape, and for ours
the largest |loss difference| from "before" over every step (same weights, same batches: bf16 noise expected, a
wrong mask or loss would show). Batches are a random walk over the vocabulary (next id = previous + 1..7), so the
loss has something to learn. On OOM a config is retried with twice the accumulation (unless --no-oom-retry) and
recorded as "oom" if even micro-batch 1 does not fit. The JSON is rewritten after every row: a run cut short keeps
what it measured.

Model: built from a ``ModernBertConfig`` (no hub download, no tokenizer files), ModernBERT-base's shape: 22 layers,
hidden 768, intermediate 1152 (GLU), 12 heads, vocab 50368, a global layer every 3 layers, local window 128 (keys with
|q - k| <= 64). Special ids pad 0, cls/bos 1, sep/eos 2, mask 3.

Model FLOPs per token (fwd + bwd; what MFU counts, independent of what a kernel really computes):

    6 * N_body  +  6 * f * (N_head + d * V)  +  sum over layers of 12 * d * ctx_l

    N_body = parameters of the encoder layers + final norm (no embeddings); N_head = prediction head (dense + norm);
    d * V  = the tied decoder projection; f = labelled fraction (1 for CLM, ~0.30 for MLM: only those positions are
    projected to the vocabulary); ctx_l = keys per query: global layers T (MLM) or T / 2 (CLM, the causal half);
    local layers min(T, w + 1) (MLM) or min(T / 2, w / 2 + 1) (CLM), w = local_attention = 128.

MFU = achieved model FLOP/s / GPU dense bf16 peak, against two peaks: the datasheet value for the device name
(``GPU_BF16_DENSE_TFLOPS``) and a measured large bf16 matmul (the probe).

Causality check (per attention implementation available: sdpa, eager, flex_attention, flash_attention_2), on the real
base-shaped model at --check-seq-len (default 1024 = 8 local windows), masks from ``causal_attention`` exactly as the
trainer gets them (no padding mask). Precisions: eager fp32; sdpa and flex_attention fp32 AND bf16 autocast (training
runs them under bf16, which selects other kernels; flex on a CPU: fp32); flash_attention_2 bf16 autocast. Same
weights for every impl. Differences are max |delta| compared against tol = max(rtol * max|output|, 4 x the
run-to-run noise of an identical forward); rtol 1e-6 (fp32) / 1e-4 (bf16): unaffected positions are expected to be
bit-identical. Checks (gating = a failure makes the script exit 1):

  future_invariance  (gating) change input tokens at positions >= t (t block-aligned and not): every layer's output
                     at positions < t is unchanged; the outputs at >= t do change (the check has power); and the same
                     pair under bidirectional attention DOES change positions < t by more than 10 x tol (a leak
                     would be visible).
  local_window       (gating) hook the INPUT of a local layer (first and last local layer) and perturb positions
                     [p0, p1) (p1 - p0 = w/2); for that layer's output, causal: positions < p0 unchanged, positions
                     >= p1 + w/2 unchanged (outside the window), attention output at p1 - 1 + w/2 (the farthest key
                     inside the window) changed. Bidirectional: positions < p0 - w/2 and >= p1 + w/2 unchanged.
  global_reach       (gating) same perturbation on a global layer's input: its outputs at >= p1 + w/2 DO change
                     (global layers were not windowed by mistake), positions < p0 unchanged under causal.
  reference          (gating for fp32, reported for bf16) causal last hidden state vs eager in fp32 with explicit
                     additive masks built here by hand (causal for global layers, causal & |q - k| <= w/2 for local
                     ones): relative max error; for bf16 it is compared with sdpa under the same bf16 autocast.

Results: JSON (machine, peaks, every row, checks) at --out, a Markdown table beside it (.md).
Exit codes: 0 ok; 1 a gating causality check failed; 2 a benchmark config raised something other than OOM;
3 no CUDA device (and no --cpu-smoke): nothing was run.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_levers  # noqa: E402
from common import machine as cpu_machine  # noqa: E402

# --- project imports: the only names this script takes from backend/ (repoint here when the package moves) ---
from backend.core.errors import ConfigError  # noqa: E402
from backend.detour import encoder_lm  # noqa: E402  (FUSED_LOSS_DEVICES: a "chunked" setup turns the fused loss off)
from backend.detour.attention import causal_attention  # noqa: E402
from backend.detour.encoder_lm import IGNORE, EncoderLM, fused_vocab_loss  # noqa: E402
from backend.detour.recipe import build_optimizer  # noqa: E402
from backend.engine.compiling import compile_encoder as compile_in_place  # noqa: E402
from backend.engine.compiling import kernel_cache_dir, resolve_compile  # noqa: E402
from backend.engine.models import flash_attn_status, resolve_attn_implementation  # noqa: E402
from backend.engine.schema import BY_KEY  # noqa: E402
from backend.objectives import clm_labels, mlm_mask  # noqa: E402


def compile_encoder(device: torch.device) -> bool:
    """Whether the trainer torch.compiles the encoder on ``device`` by default: ``train.compile: auto`` resolved by
    the trainer's own policy (``engine.compiling.resolve_compile``)."""
    return resolve_compile("auto", device=device.type)[0]


# --------------------------------------------------------------------------------------------------------------

RESULTS = Path(__file__).resolve().parent / "results"
IMPLS = ["sdpa", "eager", "flex_attention", "flash_attention_2"]
DEFAULTS = "auto:auto:auto"  # what a user gets
BEFORE = "sdpa:chunked:off"  # the trainer before issue 17: sdpa, chunked logits, no compile
SMOKE_SETUPS = [DEFAULTS, BEFORE, "eager:chunked:off", "flex_attention:auto:off", "sdpa:chunked:on"]
SPECIALS = {"pad_token_id": 0, "cls_token_id": 1, "bos_token_id": 1, "sep_token_id": 2, "eos_token_id": 2}
MASK_ID = 3
FIRST_ORDINARY_ID = 4
# ModernBERT's own pretraining (its paper): 1.7T tokens in 194 hours on 8 H100s, i.e. per GPU:
MODERNBERT_REF = {"tokens": 1.7e12, "hours": 194, "gpus": 8, "gpu": "H100"}
MODERNBERT_TOKENS_PER_S = MODERNBERT_REF["tokens"] / (MODERNBERT_REF["hours"] * 3600 * MODERNBERT_REF["gpus"])
# The trainer's optimizer settings: the config defaults (lr, betas, eps, weight decay)
TRAIN_DEFAULTS = {k: BY_KEY[f"train.{k}"].default for k in ("lr", "betas", "eps", "weight_decay")}

BASE_ARCH = dict(
    vocab_size=50368,
    hidden_size=768,
    intermediate_size=1152,
    num_hidden_layers=22,
    num_attention_heads=12,
    global_attn_every_n_layers=3,
    local_attention=128,
    max_position_embeddings=8192,
)
TINY_ARCH = dict(  # --cpu-smoke: layer 0 global, layer 1 local
    vocab_size=512,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    global_attn_every_n_layers=2,
    local_attention=16,
    max_position_embeddings=512,
)

# Dense (no sparsity) bf16 tensor-core peak, TFLOP/s, from NVIDIA datasheets; first substring match of the upper-cased
# torch.cuda.get_device_name() wins, so the more specific names come first. Unknown devices: MFU vs the probe only.
GPU_BF16_DENSE_TFLOPS = [
    ("GH200", 989.0),
    ("H200 NVL", 835.0),
    ("H200", 989.0),
    ("H100 PCIE", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),  # SXM5, reported as "NVIDIA H100 80GB HBM3"
    ("H800 PCIE", 756.0),
    ("H800", 989.0),
    ("B200", 2250.0),
    ("A100", 312.0),
    ("A800", 312.0),
    ("L40S", 362.0),
    ("L40", 181.0),
    ("L4", 121.0),
]

# "Unchanged" tolerances. Positions that cannot see the changed tokens are expected to be BIT-identical (same
# shapes -> same kernels; masked scores contribute exp(-inf) = 0), so these only absorb measured run-to-run noise and
# a tiny relative slack; any real leak is orders larger (compare with bidirectional_past_diff in the JSON).
RTOL = {"fp32": 1e-6, "bf16": 1e-4}
REF_RTOL_FP32 = 1e-3  # 22 fp32 layers, different kernels: reductions in another order


# ----------------------------------------------------------------------------------------------------- helpers


def log(msg: str) -> None:
    print(msg, flush=True)


def peak_tflops_for(name: str | None) -> float | None:
    if not name:
        return None
    up = name.upper()
    for key, tflops in GPU_BF16_DENSE_TFLOPS:
        if key in up:
            return tflops
    return None


def machine_info(device: torch.device) -> dict:
    import transformers

    info = {**cpu_machine(), "transformers": transformers.__version__, "device": str(device)}
    try:
        import accelerate

        info["accelerate"] = accelerate.__version__
    except ImportError:
        info["accelerate"] = None
    ok, fa = flash_attn_status()
    info["flash_attn"] = fa if ok else None
    info["flash_attn_status"] = fa
    try:
        import importlib.metadata

        info["liger_kernel"] = importlib.metadata.version("liger-kernel")
    except importlib.metadata.PackageNotFoundError:
        info["liger_kernel"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(
            gpu=torch.cuda.get_device_name(device),
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            compute_capability=f"{props.major}.{props.minor}",
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
        )
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version,name,clocks.max.sm,power.limit", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            info["nvidia_smi"] = out.stdout.strip() or out.stderr.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            info["nvidia_smi"] = f"unavailable ({type(exc).__name__})"
    return info


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def autocast_ctx(device: torch.device, precision: str):
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def matmul_probe_tflops(device: torch.device, dtype: torch.dtype, n: int, repeats: int) -> float:
    """Best-of-3 TFLOP/s of an n x n x n matmul: the roofline actually reachable on this device."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    best = 0.0
    for _ in range(3):
        sync(device)
        t = time.perf_counter()
        for _ in range(repeats):
            a @ b
        sync(device)
        best = max(best, 2 * n**3 * repeats / (time.perf_counter() - t) / 1e12)
    return best


def build_model(arch: dict, impl: str, device: torch.device):
    from transformers import AutoModelForMaskedLM, ModernBertConfig

    config = ModernBertConfig(**arch, **SPECIALS)
    with torch.device(device):
        model = AutoModelForMaskedLM.from_config(config, attn_implementation=impl)
    got = getattr(model.config, "_attn_implementation", None)
    if got != impl:  # e.g. a silent fallback to a hub kernel: the numbers would not be what the row says
        raise RuntimeError(f"asked for attn_implementation={impl!r}, model has {got!r}")
    return model


def param_counts(model) -> dict:
    enc, head = model.model, model.head
    body = sum(p.numel() for n, p in enc.named_parameters() if not n.startswith("embeddings."))
    return {
        "body": body,
        "head": sum(p.numel() for p in head.parameters()),
        "embedding": enc.embeddings.tok_embeddings.weight.numel(),
        "total": sum(p.numel() for p in model.parameters()),
    }


def model_flops_per_token(config, counts: dict, seq_len: int, causal: bool, labelled_fraction: float) -> float:
    """The formula of the module docstring."""
    d, vocab = config.hidden_size, config.vocab_size
    half = config.local_attention // 2
    attn = 0.0
    for kind in config.layer_types:
        if kind == "full_attention":
            ctx = seq_len / 2 if causal else seq_len
        else:
            ctx = min(seq_len / 2, half + 1) if causal else min(seq_len, 2 * half + 1)
        attn += 12 * d * ctx
    return 6 * counts["body"] + 6 * labelled_fraction * (counts["head"] + d * vocab) + attn


FLOPS_FORMULA = (
    "6*N_body + 6*f*(N_head + d*V) + sum_l 12*d*ctx_l; f = labelled fraction (CLM 1, MLM ~0.3); "
    "ctx_l: global T (MLM) / T/2 (CLM), local min(T, w+1) (MLM) / min(T/2, w/2+1) (CLM), w = local_attention"
)


def random_ids(n: int, seq_len: int, vocab: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randint(FIRST_ORDINARY_ID, vocab, (n, seq_len), generator=gen)


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------------- benchmark


def walk_ids(n: int, seq_len: int, vocab: int, gen: torch.Generator) -> torch.Tensor:
    """Token ids that can be learned: each is the previous one plus 1..7 (wrapping over the ordinary ids)."""
    span = vocab - FIRST_ORDINARY_ID
    start = torch.randint(span, (n, 1), generator=gen)
    steps = torch.randint(1, 8, (n, seq_len - 1), generator=gen)
    return FIRST_ORDINARY_ID + torch.cat([start, start + steps.cumsum(1)], 1) % span


def make_batches(objective: str, n_batches: int, batch: int, seq_len: int, vocab: int, mlm_p: float, seed: int):
    """(inputs, labels) per step, on the CPU, the same for every setup of a shape: data stays out of the timing."""
    gen = torch.Generator().manual_seed(seed)
    replace_vocab = torch.arange(FIRST_ORDINARY_ID, vocab)
    out = []
    for _ in range(n_batches):
        ids = walk_ids(batch, seq_len, vocab, gen)
        if objective == "clm":
            out.append((ids, clm_labels(ids, torch.zeros_like(ids, dtype=torch.bool))))
        else:
            out.append(mlm_mask(ids, mlm_p, list(range(FIRST_ORDINARY_ID)), MASK_ID, replace_vocab, gen))
    return out


@dataclass(frozen=True)
class Setup:
    """One way to run the trainer's step: ``ATTN:LOSS:COMPILE[+LEVER...]`` (see the module docstring and
    ``gpu_levers``)."""

    attn: str
    loss: str
    compile: str
    levers: tuple[str, ...] = ()

    @classmethod
    def parse(cls, spec: str) -> Setup:
        base, *levers = spec.split("+")
        parts = base.split(":")
        ok = (
            len(parts) == 3
            and parts[0] in ("auto", *IMPLS)
            and parts[1] in ("auto", "fused", "chunked")
            and parts[2] in ("auto", "on", "off")
            and all(lv in gpu_levers.LEVERS for lv in levers)
        )
        if not ok:
            raise ValueError(
                f"setup {spec!r}: want ATTN:LOSS:COMPILE[+LEVER...] with ATTN auto|{'|'.join(IMPLS)}, "
                f"LOSS auto|fused|chunked, COMPILE auto|on|off, LEVER {'|'.join(gpu_levers.LEVERS)}"
            )
        return cls(*parts, tuple(levers))

    @property
    def name(self) -> str:
        return "+".join([f"{self.attn}:{self.loss}:{self.compile}", *self.levers])

    def resolve(self, config, device: torch.device) -> dict:
        """-> {'attn', 'fused', 'compiled', 'why'}; raises ConfigError where this machine cannot train that way."""
        attn, why = resolve_attn_implementation(self.attn, config, device.type)
        fused_here = fused_vocab_loss(device) is not None
        if self.loss == "fused" and not fused_here:
            raise ConfigError(
                "loss", "fused", "liger-kernel's fused loss runs only on CUDA with liger-kernel installed"
            )
        missing = gpu_levers.unavailable(self.levers, device)
        if missing:
            raise ConfigError("setup", self.name, missing)
        fused = fused_here and self.loss != "chunked"
        compiled = compile_encoder(device) if self.compile == "auto" else self.compile == "on"
        if gpu_levers.compile_mode(self.levers) and not compiled:
            raise ConfigError("setup", self.name, "a compile-mode lever needs COMPILE auto (on a GPU) or on")
        return {"attn": attn, "fused": fused, "compiled": compiled, "why": why}


@contextlib.contextmanager
def vocab_loss(fused: bool, device: torch.device):
    """EncoderLM takes the fused loss on the devices listed in ``FUSED_LOSS_DEVICES``: empty it for a chunked row."""
    old = encoder_lm.FUSED_LOSS_DEVICES
    encoder_lm.FUSED_LOSS_DEVICES = (device.type,) if fused else ()
    try:
        yield
    finally:
        encoder_lm.FUSED_LOSS_DEVICES = old


def timed_row(times: list[float], tokens: int, losses: list[float], fpt: float, peaks: dict, device) -> dict:
    mean_t = statistics.fmean(times)
    tps = tokens / mean_t
    tflops = fpt * tps / 1e12
    return {
        "status": "ok",
        "step_time_s_mean": mean_t,
        "step_time_s_median": statistics.median(times),
        "step_time_s_min": min(times),
        "tokens_per_s": tps,
        "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
        "model_flops_per_token": fpt,
        "achieved_tflops": tflops,
        "mfu_vs_datasheet": tflops / peaks["datasheet_tflops"] if peaks.get("datasheet_tflops") else None,
        "mfu_vs_probe": tflops / peaks["probe_tflops"] if peaks.get("probe_tflops") else None,
        "vs_modernbert_pipeline": tps / MODERNBERT_TOKENS_PER_S,
        "loss_last": losses[-1] if losses else None,
    }


def train_ours(setup: Setup, arch, seq_len, objective, batches, accum, a, device, peaks) -> dict:
    """The trainer's step for one setup: warm-up then timed optimizer steps. Raises on OOM (the caller records it)."""
    from transformers import AutoModelForMaskedLM, ModernBertConfig

    config = ModernBertConfig(**arch, **SPECIALS)
    how = setup.resolve(config, device)
    torch._dynamo.reset()  # compile as a fresh training process would: one static shape, no earlier variants
    torch.manual_seed(a.seed)  # the same initial weights for every setup
    with torch.device(device):
        model = AutoModelForMaskedLM.from_config(config, attn_implementation=how["attn"])
    counts = param_counts(model)
    levers = gpu_levers.apply(model, setup.levers)
    lm = EncoderLM(model).train()
    mode = gpu_levers.compile_mode(setup.levers)
    if how["compiled"] and mode:
        kernel_cache_dir()
        lm.encoder().compile(dynamic=False, mode=mode)
    elif how["compiled"]:
        compile_in_place(lm)  # as the trainer does: in place, static shapes, kernels cached in <cache>/inductor
    opt = build_optimizer(model, TRAIN_DEFAULTS)
    causal = objective == "clm"
    batch = batches[0][0].shape[0]
    micro = batch // accum
    on_device = [(i.to(device), lbl.to(device)) for i, lbl in batches]
    labelled = sum(int((lbl != IGNORE).sum()) for _, lbl in batches) / sum(lbl.numel() for _, lbl in batches)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times, losses = [], []
    with vocab_loss(how["fused"], device):
        for step, (ids, labels) in enumerate(on_device):
            sync(device)
            t0 = time.perf_counter()
            step_loss = 0.0
            for m in range(accum):
                sl = slice(m * micro, (m + 1) * micro)
                with autocast_ctx(device, a.precision):
                    loss, _, _ = lm(ids[sl], labels[sl], causal=causal)
                (loss / accum).backward()
                step_loss += loss.detach() / accum
            torch.nn.utils.clip_grad_norm_(lm.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(float(step_loss))  # a sync, as the trainer's logging
            sync(device)
            if step >= a.warmup:
                times.append(time.perf_counter() - t0)
        if getattr(a, "profile", None) and device.type == "cuda":
            profile_step(lm, opt, on_device[-1], causal, accum, a, device, f"{setup.name} T={seq_len} {objective}")
    if not all(math.isfinite(x) for x in losses):
        raise FloatingPointError(f"non-finite loss {losses}")
    fpt = model_flops_per_token(model.config, counts, seq_len, causal, labelled)
    row = timed_row(times, batch * seq_len, losses, fpt, peaks, device)
    row.update(
        attn=how["attn"],
        attn_why=how["why"],
        loss_kind="fused (liger-kernel)" if how["fused"] else "chunked",
        compiled=how["compiled"],
        levers=levers,
        compile_mode=mode or "default",
        labelled_fraction=labelled,
        losses=losses,
        params=counts,
    )
    del lm, model, opt, on_device
    return row


def profile_step(lm, opt, batch, causal: bool, accum: int, a, device, title: str) -> None:
    """One more optimizer step under torch.profiler: the kernels that took the GPU's time, appended to
    ``--profile`` (where the step's time goes is what says which lever could help)."""
    from torch.profiler import ProfilerActivity, profile

    ids, labels = batch
    micro = ids.shape[0] // accum
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for m in range(accum):
            sl = slice(m * micro, (m + 1) * micro)
            with autocast_ctx(device, a.precision):
                loss, _, _ = lm(ids[sl], labels[sl], causal=causal)
            (loss / accum).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(device)
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=70)
    with open(a.profile, "a") as f:
        f.write(f"\n=== {title} ===\n{table}\n")


def collator_tokenizer(vocab: int):
    """A word-level tokenizer over the bench's ids (specials 0-3): what DataCollatorForLanguageModeling needs."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    names = ["[PAD]", "[CLS]", "[SEP]", "[MASK]"] + [f"t{i}" for i in range(FIRST_ORDINARY_ID, vocab)]
    core = Tokenizer(WordLevel({n: i for i, n in enumerate(names)}, unk_token="[PAD]"))
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]"
    )


def train_hf(arch, seq_len, objective, batches, accum, a, device, peaks) -> dict:
    """transformers' Trainer with its defaults at the same shape and batches: step time between optimizer steps
    (its data collation included, as in any Trainer run)."""
    from transformers import (
        AutoModelForMaskedLM,
        DataCollatorForLanguageModeling,
        ModernBertConfig,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    config = ModernBertConfig(**arch, **SPECIALS, sparse_prediction=True)
    torch.manual_seed(a.seed)
    with torch.device(device):
        model = AutoModelForMaskedLM.from_config(config)  # transformers' default attention: sdpa
    counts = param_counts(model)
    batch = batches[0][0].shape[0]
    dataset = [{"input_ids": row} for ids, _ in batches for row in ids]
    collator = DataCollatorForLanguageModeling(
        collator_tokenizer(arch["vocab_size"]), mlm=objective == "mlm", mlm_probability=a.mlm_probability, seed=a.seed
    )
    probe = collator(dataset[:batch])["labels"]
    labelled = float((probe != IGNORE).float().mean())
    ends: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            sync(device)
            ends.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=batch // accum,
            gradient_accumulation_steps=accum,
            max_steps=len(batches),
            learning_rate=TRAIN_DEFAULTS["lr"],
            weight_decay=TRAIN_DEFAULTS["weight_decay"] / TRAIN_DEFAULTS["lr"],
            adam_beta1=TRAIN_DEFAULTS["betas"][0],
            adam_beta2=TRAIN_DEFAULTS["betas"][1],
            adam_epsilon=TRAIN_DEFAULTS["eps"],
            lr_scheduler_type="constant",
            max_grad_norm=1.0,
            bf16=a.precision == "bf16",
            use_cpu=device.type == "cpu",
            logging_strategy="no",
            save_strategy="no",
            report_to=[],
            disable_tqdm=True,
            seed=a.seed,
        )
        trainer = Trainer(model=model, args=args, train_dataset=dataset, data_collator=collator, callbacks=[Clock()])
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        loss = trainer.train().training_loss
    times = [t1 - t0 for t0, t1 in zip(ends, ends[1:])][max(0, a.warmup - 1) :]
    fpt = model_flops_per_token(model.config, counts, seq_len, False, labelled)
    row = timed_row(times, batch * seq_len, [loss], fpt, peaks, device)
    row.update(
        attn=model.config._attn_implementation,
        loss_kind="full logits at labelled positions (sparse_prediction)",
        compiled=False,
        labelled_fraction=labelled,
        optimizer=str(args.optim),
        params=counts,
    )
    del trainer, model
    return row


def with_oom_retry(run, key: dict, batch: int, a, device) -> tuple[dict, bool]:
    """``run(accum)`` -> a row; on OOM again with twice the accumulation; (row, whether it raised another error)."""
    accum = min(a.grad_accum, batch)
    while batch % accum:
        accum += 1
    while True:
        log(f"[bench] {key['setup']} T={key['seq_len']} {key['objective']}: batch {batch} x accum {accum} ...")
        try:
            row = {**key, "batch": batch, "grad_accum": accum, "micro_batch": batch // accum, **run(accum=accum)}
            free_memory(device)
            return row, False
        except Exception as exc:  # one config must not end the whole run
            row = {**key, "batch": batch, "grad_accum": accum, "error": _first(exc)}
            free_memory(device)
            if not is_oom(exc):
                return {**row, "status": "error"}, True
            if not (a.oom_retry and accum < batch):
                return {**row, "status": "oom"}, False
        accum = min(2 * accum, batch)
        while batch % accum:
            accum += 1
        log(f"[bench]   OOM; retrying with grad accumulation {accum}")


def compare(rows: list[dict]) -> None:
    """Speed-ups over the HF Trainer row, and |loss - before's loss| per step, within each (seq_len, objective)."""
    for r in rows:
        same = [o for o in rows if (o["seq_len"], o["objective"]) == (r["seq_len"], r["objective"])]
        hf = next((o for o in same if o["setup"] == "hf" and o["status"] == "ok"), None)
        before = next((o for o in same if o["setup"] == BEFORE and o["status"] == "ok"), None)
        if r["status"] != "ok":
            continue
        r["speedup_vs_hf"] = r["tokens_per_s"] / hf["tokens_per_s"] if hf else None
        base = r["setup"].split("+")[0]
        plain = next((o for o in same if o["setup"] == base and o["status"] == "ok"), None)
        if plain and r["setup"] != base and len(r["losses"]) == len(plain["losses"]):
            r["speedup_vs_base"] = r["tokens_per_s"] / plain["tokens_per_s"]
            r["loss_max_abs_diff_vs_base"] = max(abs(x - y) for x, y in zip(r["losses"], plain["losses"]))
        if before and r["setup"] not in ("hf", BEFORE) and len(r["losses"]) == len(before["losses"]):
            diffs = [abs(x - y) for x, y in zip(r["losses"], before["losses"])]
            r["loss_max_abs_diff_vs_before"] = max(diffs)
            r["loss_rel_diff_vs_before"] = max(d / abs(y) for d, y in zip(diffs, before["losses"]))


def run_benchmarks(arch: dict, a, device: torch.device, peaks: dict, on_row=None) -> tuple[list[dict], bool]:
    """Every (seq_len, objective): each setup of ours, then the HF Trainer, on the same batches."""
    rows, errored = [], False
    for seq_len in a.seq_lens:
        for objective in a.objectives:
            batch = max(1, a.tokens_per_step // seq_len)
            batches = make_batches(
                objective, a.warmup + a.steps, batch, seq_len, arch["vocab_size"], a.mlm_probability, a.seed
            )
            shape = dict(
                arch=arch, seq_len=seq_len, objective=objective, batches=batches, a=a, device=device, peaks=peaks
            )
            runs = [(s.name, functools.partial(train_ours, s, **shape)) for s in a.setups]
            if a.hf:
                runs.append(("hf", functools.partial(train_hf, **shape)))
            for name, run in runs:
                key = {"setup": name, "seq_len": seq_len, "objective": objective}
                try:
                    if name != "hf":
                        Setup.parse(name).resolve(_config(arch), device)  # skip early what cannot train here
                    row, err = with_oom_retry(run, key, batch, a, device)
                except ConfigError as exc:
                    row, err = {**key, "status": "skipped", "reason": exc.allowed}, False
                errored |= err
                rows.append(row)
                compare(rows)
                log(f"[bench]   -> {_summary(row)}")
                if on_row:
                    on_row(rows)
    return rows, errored


def _config(arch: dict):
    from transformers import ModernBertConfig

    return ModernBertConfig(**arch, **SPECIALS)


def _first(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _summary(row: dict) -> str:
    if row["status"] != "ok":
        return f"{row['status']} {row.get('error') or row.get('reason', '')}"
    ms = 1000 * row["step_time_s_mean"]
    vs = f", {row['speedup_vs_hf']:.2f}x HF" if row.get("speedup_vs_hf") else ""
    return f"{row['tokens_per_s']:,.0f} tok/s, {ms:.1f} ms/step, {row['achieved_tflops']:.3g} TFLOP/s{vs}"


# -------------------------------------------------------------------------------------------- causality check


class Taps:
    """Forward hooks on every layer (output) and its attention (output[0]); optional input perturbation of one layer."""

    def __init__(self, model):
        self.layers = list(model.model.layers)
        self.out: dict[int, torch.Tensor] = {}
        self.attn: dict[int, torch.Tensor] = {}
        self.perturb: tuple[int, slice, torch.Tensor] | None = None
        self.handles = []
        for i, layer in enumerate(self.layers):
            self.handles.append(layer.register_forward_pre_hook(self._pre(i)))
            self.handles.append(layer.register_forward_hook(self._post(i, self.out)))
            self.handles.append(layer.attn.register_forward_hook(self._post(i, self.attn)))

    def _pre(self, i):
        def hook(module, args):
            if self.perturb is None or self.perturb[0] != i:
                return None
            _, sl, delta = self.perturb
            x = args[0].clone()
            x[:, sl] = x[:, sl] + delta.to(x.dtype)
            return (x, *args[1:])

        return hook

    @staticmethod
    def _post(i, store):
        def hook(module, args, output):
            t = output[0] if isinstance(output, tuple) else output
            store[i] = t.detach().float().clone()

        return hook

    def remove(self):
        for h in self.handles:
            h.remove()


def encode(model, taps: Taps, ids, causal: bool, precision: str, device) -> dict:
    """The trainer's encoder call (EncoderLM.encoder + causal_attention, no padding mask); returns tapped outputs."""
    encoder = EncoderLM(model).encoder()
    taps.out.clear()  # the hooks hold these very dicts
    taps.attn.clear()
    with torch.no_grad(), autocast_ctx(device, precision), causal_attention(model, ids, None, causal) as attn:
        last = encoder(input_ids=ids, attention_mask=attn).last_hidden_state.float()
    return {"last": last, "out": dict(taps.out), "attn": dict(taps.attn)}


def maxdiff(x: torch.Tensor, y: torch.Tensor, positions) -> float:
    a, b = x[:, positions], y[:, positions]
    return float((a - b).abs().max()) if a.numel() else 0.0


def explicit_masks(seq_len: int, half: int, batch: int, device) -> dict:
    q = torch.arange(seq_len, device=device)[:, None]
    k = torch.arange(seq_len, device=device)[None, :]
    causal = k <= q
    banded = causal & (q - k <= half)

    def additive(allowed):
        m = torch.zeros(allowed.shape, dtype=torch.float32, device=device)
        return m.masked_fill(~allowed, torch.finfo(torch.float32).min)[None, None].expand(batch, 1, seq_len, seq_len)

    return {"full_attention": additive(causal), "sliding_attention": additive(banded)}


def check_precisions(impl: str, device: torch.device) -> list[str]:
    """flash: bf16 only; sdpa and flex: fp32 and bf16 (training runs them under bf16 autocast: other kernels; flex on
    a CPU: fp32 only, each precision is another compile there); eager: fp32."""
    both = ["fp32", "bf16"]
    return {
        "flash_attention_2": ["bf16"],
        "sdpa": both,
        "flex_attention": both if device.type == "cuda" else ["fp32"],
    }.get(impl, ["fp32"])


def cut_points(T: int) -> list[int]:
    """Where the future starts: a multiple of 128 (kernel tile edge) and a point inside a tile."""
    aligned = (T // 2) // 128 * 128 or T // 2
    return sorted({aligned, min(T - 1, T // 2 + min(37, T // 4))})


def check_impl(arch, impl, precision, state, a, device, reference, bf16_baseline) -> dict:
    model = build_model(arch, impl, device)
    model.load_state_dict(state)
    model.eval()
    taps = Taps(model)
    cfg = model.config
    T, half = a.check_seq_len, cfg.local_attention // 2
    kinds = cfg.layer_types
    local = [i for i, k in enumerate(kinds) if k == "sliding_attention"]
    glob = [i for i, k in enumerate(kinds) if k == "full_attention"]
    gen = torch.Generator().manual_seed(a.seed + 1)
    ids = random_ids(2, T, cfg.vocab_size, gen).to(device)
    rtol = RTOL[precision]
    res: dict = {"impl": impl, "precision": precision, "seq_len": T, "window_half": half, "checks": {}}

    try:
        clean = encode(model, taps, ids, True, precision, device)
        again = encode(model, taps, ids, True, precision, device)
        noise = max(maxdiff(clean["out"][i], again["out"][i], slice(None)) for i in clean["out"])
        res["run_to_run_noise"] = noise

        def tol(x: torch.Tensor) -> float:
            return max(rtol * float(x.abs().max()), 4 * noise)

        # 1. future invariance, every layer's output, two cut points (block-aligned and not)
        fut = {"pass": True, "cuts": []}
        bidi_a = encode(model, taps, ids, False, precision, device)["last"]
        for t in cut_points(T):
            other = ids.clone()
            other[:, t:] = random_ids(2, T - t, cfg.vocab_size, gen).to(device)
            changed = encode(model, taps, other, True, precision, device)
            past = {i: maxdiff(clean["out"][i], changed["out"][i], slice(0, t)) for i in clean["out"]}
            tols = {i: tol(clean["out"][i]) for i in clean["out"]}
            future = maxdiff(clean["last"], changed["last"], slice(t, T))
            bidi_b = encode(model, taps, other, False, precision, device)["last"]
            leak_visible = maxdiff(bidi_a, bidi_b, slice(0, t))
            last_tol = tol(clean["last"])
            worst = max(past, key=lambda i: past[i] / tols[i] if tols[i] else past[i])
            ok_past = all(past[i] <= tols[i] for i in past)
            ok_power = future > 10 * last_tol and leak_visible > 10 * last_tol
            fut["cuts"].append(
                {
                    "t": t,
                    "max_past_diff": max(past.values()),
                    "worst_layer": worst,
                    "worst_layer_diff_over_tol": past[worst] / tols[worst] if tols[worst] else None,
                    "future_diff": future,
                    "bidirectional_past_diff": leak_visible,
                    "past_diff_over_bidirectional": max(past.values()) / leak_visible if leak_visible else None,
                    "tol_last": last_tol,
                    "past_unchanged": ok_past,
                    "has_power": ok_power,
                }
            )
            fut["pass"] &= ok_past and ok_power
        res["checks"]["future_invariance"] = fut

        # 2/3. window on local layers, reach of a global layer: perturb ONE layer's input at [p0, p1)
        p0 = max(half + 1, T // 4)
        p1 = p0 + half
        beyond = p1 + half  # first query whose causal window [q - half, q] misses every perturbed key
        if beyond >= T:
            raise ValueError(f"--check-seq-len {T} too short for window {2 * half}: need > {beyond}")
        win = {"pass": True, "p0": p0, "p1": p1, "layers": []}
        reach = {"pass": True, "layers": []}
        targets = sorted({local[0], local[-1]}) if local else []
        for i in targets + glob[:1]:
            x_scale = float(clean["out"][i - 1].std()) if i > 0 else 1.0
            delta = torch.randn(2, p1 - p0, cfg.hidden_size, generator=gen).to(device) * x_scale
            entry = {"layer": i, "kind": kinds[i]}
            for causal in (True, False):
                base = clean if causal else encode(model, taps, ids, False, precision, device)
                taps.perturb = (i, slice(p0, p1), delta)
                try:
                    pert = encode(model, taps, ids, causal, precision, device)
                finally:
                    taps.perturb = None
                o0, o1 = base["out"][i], pert["out"][i]
                a0, a1 = base["attn"][i], pert["attn"][i]
                t_out, t_attn = tol(o0), tol(a0)
                mode = "causal" if causal else "bidirectional"
                before = slice(0, p0) if causal else slice(0, max(0, p0 - half))
                d_before = maxdiff(o0, o1, before)
                d_beyond = maxdiff(o0, o1, slice(beyond, T))
                d_edge = maxdiff(a0, a1, [p1 - 1 + half])  # farthest query still seeing key p1 - 1
                e = {
                    "before_diff": d_before,
                    "beyond_window_diff": d_beyond,
                    "window_edge_attn_diff": d_edge,
                    "tol_out": t_out,
                    "tol_attn": t_attn,
                }
                if kinds[i] == "sliding_attention":
                    e["pass"] = d_before <= t_out and d_beyond <= t_out and (not causal or d_edge > t_attn)
                    win["pass"] &= e["pass"]
                else:
                    e["pass"] = d_beyond > t_out and (not causal or d_before <= t_out)
                    reach["pass"] &= e["pass"]
                entry[mode] = e
            (win if kinds[i] == "sliding_attention" else reach)["layers"].append(entry)
        if not targets:
            win = {"pass": True, "note": "no local layer"}
        res["checks"]["local_window"] = win
        res["checks"]["global_reach"] = reach

        # 4. agreement with the hand-built-mask fp32 eager reference
        err = float((clean["last"] - reference).abs().max() / reference.abs().max())
        ref = {"rel_max_error": err}
        if precision == "fp32":
            ref.update(tol=REF_RTOL_FP32, gating=True, **{"pass": err <= REF_RTOL_FP32})
        else:
            ref.update(gating=False, sdpa_bf16_rel_max_error=bf16_baseline, **{"pass": True})
            if bf16_baseline is not None and impl != "sdpa":
                ref["ratio_to_sdpa_bf16"] = err / bf16_baseline if bf16_baseline else None
                ref["suspicious"] = bf16_baseline > 0 and err > 4 * bf16_baseline
        res["checks"]["reference"] = ref
    except Exception as exc:  # recorded as a failed check, the other impls still run
        res["error"] = _first(exc)
        res["checks"].setdefault("error", {"pass": False})
    finally:
        taps.remove()
    res["pass"] = all(c.get("pass", False) for c in res["checks"].values())
    del model
    return res


def run_checks(arch: dict, a, device: torch.device) -> list[dict]:
    torch.manual_seed(a.seed)
    tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32: no TF32 in the reference or the fp32 checks
    torch.backends.cudnn.allow_tf32 = False
    try:
        return _run_checks(arch, a, device)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32


def _run_checks(arch: dict, a, device: torch.device) -> list[dict]:
    src = build_model(arch, "eager", device)
    state = {k: v.detach().clone() for k, v in src.state_dict().items()}
    src.eval()
    T = a.check_seq_len
    ids = random_ids(2, T, arch["vocab_size"], torch.Generator().manual_seed(a.seed + 1)).to(device)
    with torch.no_grad():
        masks = explicit_masks(T, src.config.local_attention // 2, 2, device)
        reference = src.model(input_ids=ids, attention_mask=masks).last_hidden_state.float()
    del src, masks
    bf16_baseline = None  # sdpa-under-bf16 error vs the reference: what flash's error is compared with
    flash_ok, flash_why = flash_attn_status()
    results = []
    order = sorted(a.check_impls, key=lambda i: i == "flash_attention_2")  # sdpa bf16 before flash
    for impl in order:
        if impl == "flash_attention_2" and not flash_ok:
            results.append({"impl": impl, "status": "skipped", "reason": flash_why, "pass": None})
            log(f"[check] {impl}: skipped ({flash_why})")
            continue
        for precision in check_precisions(impl, device):
            log(f"[check] {impl} {precision} ...")
            r = check_impl(arch, impl, precision, state, a, device, reference, bf16_baseline)
            r["status"] = "ran"
            if impl == "sdpa" and precision == "bf16":
                bf16_baseline = r["checks"].get("reference", {}).get("rel_max_error")
            results.append(r)
            log(f"[check] {impl} {precision}: {'PASS' if r['pass'] else 'FAIL'} {r.get('error', '')}")
            free_memory(device)
    return results


# ---------------------------------------------------------------------------------------------------- output


def markdown(payload: dict) -> str:
    m, p = payload["machine"], payload["peaks"]
    dev = m.get("gpu") or m.get("cpu")
    sheet = f"{p['datasheet_tflops']:.0f}" if p.get("datasheet_tflops") else "n/a"
    probe = f"{p['probe_tflops']:.3g}" if p.get("probe_tflops") else "n/a"
    lines = [
        f"GPU training bench, {payload['model']}, {payload['precision']}, {dev}; peak bf16 datasheet {sheet} / "
        f"measured matmul {probe} TFLOP/s (probe {p['probe_dtype']}); flash_attn: {m.get('flash_attn_status')}; "
        f"liger-kernel: {m.get('liger_kernel') or 'not installed'}",
        "",
        f"ours = ATTN:LOSS:COMPILE ({DEFAULTS} = a user's defaults, {BEFORE} = the trainer before issue 17); "
        "hf = transformers' Trainer + DataCollatorForLanguageModeling (sparse prediction); "
        f"ref = ModernBERT's pipeline, {MODERNBERT_TOKENS_PER_S:,.0f} tok/s per GPU (1.7T tokens, 194 h, 8 x H100)",
        "",
        "| setup | seq | objective | attention | loss | compiled | batch x accum | ms/step | tokens/s | vs HF | "
        "peak GiB | TFLOP/s | MFU sheet | MFU probe | max abs loss diff vs before |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def pct(x):
        return f"{100 * x:.1f}%" if x is not None else "n/a"

    for r in payload["results"]:
        head = f"| {r['setup']} | {r['seq_len']} | {r['objective']} |"
        if r["status"] != "ok":
            what = r.get("reason") or r.get("error") or ""
            lines.append(
                f"{head} {r['status']}: {what} |||| {r.get('batch', '-')} x {r.get('grad_accum', '-')} ||||||||"
            )
            continue
        mem = f"{r['peak_memory_gib']:.1f}" if r["peak_memory_gib"] is not None else "n/a"
        vs = f"{r['speedup_vs_hf']:.2f}x" if r.get("speedup_vs_hf") else "-"
        dl = f"{r['loss_max_abs_diff_vs_before']:.2g}" if r.get("loss_max_abs_diff_vs_before") is not None else "-"
        if r.get("speedup_vs_base") is not None:  # a lever row: against the same setup without its levers
            vs += f" ({r['speedup_vs_base']:.2f}x base)"
            dl = f"{r['loss_max_abs_diff_vs_base']:.2g} vs base"
        lines.append(
            f"{head} {r['attn']} | {r['loss_kind'].split(' ')[0]} | {'yes' if r['compiled'] else 'no'} | "
            f"{r['micro_batch']} x {r['grad_accum']} | {1000 * r['step_time_s_mean']:.1f} | {r['tokens_per_s']:,.0f} | "
            f"{vs} | {mem} | {r['achieved_tflops']:.3g} | {pct(r['mfu_vs_datasheet'])} | {pct(r['mfu_vs_probe'])} | "
            f"{dl} |"
        )
    lines.append(f"| ref | 1024/8192 | mlm | (ModernBERT's own) | | | | | {MODERNBERT_TOKENS_PER_S:,.0f} | | | | | | |")
    if payload["causality"]:
        lines += [
            "",
            f"Causality checks (T = {payload['check_seq_len']}): future invariance / local window / global reach / "
            "reference (rel. max error vs fp32 eager with hand-built masks)",
            "",
            "| impl | precision | future | window | global | reference | overall |",
            "|---|---|---|---|---|---|---|",
        ]
        for c in payload["causality"]:
            if c.get("status") == "skipped":
                lines.append(f"| {c['impl']} | - | skipped: {c['reason']} |||||")
                continue
            ch = c["checks"]

            def pf(name, ch=ch):
                return "-" if name not in ch else ("pass" if ch[name]["pass"] else "FAIL")

            ref = ch.get("reference", {})
            ref_s = f"{ref['rel_max_error']:.1e}" if "rel_max_error" in ref else "-"
            if ref and not ref.get("gating", True):
                ref_s += " (info)" + (" SUSPICIOUS" if ref.get("suspicious") else "")
            elif ref:
                ref_s += f" {pf('reference')}"
            overall = "PASS" if c["pass"] else f"FAIL {c.get('error', '')}".strip()
            lines.append(
                f"| {c['impl']} | {c['precision']} | {pf('future_invariance')} | {pf('local_window')} | "
                f"{pf('global_reach')} | {ref_s} | {overall} |"
            )
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------ main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seq-lens", type=int, nargs="+", default=None, help="default 1024 8192 (smoke: 64 128)")
    p.add_argument("--objectives", nargs="+", default=["clm", "mlm"], choices=["clm", "mlm"])
    p.add_argument(
        "--setups",
        nargs="+",
        default=None,
        help=f"ours as ATTN:LOSS:COMPILE (default {DEFAULTS} {BEFORE}; smoke: {' '.join(SMOKE_SETUPS)})",
    )
    p.add_argument("--no-hf", dest="hf", action="store_false", help="leave out the HF Trainer rows")
    p.add_argument("--steps", type=int, default=None, help="timed steps per config (default 20; smoke 3)")
    p.add_argument(
        "--warmup", type=int, default=None, help="untimed steps per config, compiles here (default 5; smoke 1)"
    )
    p.add_argument("--tokens-per-step", type=int, default=None, help="batch = this // seq_len (default 65536)")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per step (raised if it does not divide)")
    p.add_argument("--no-oom-retry", dest="oom_retry", action="store_false", help="record OOM, do not retry")
    p.add_argument("--mlm-probability", type=float, default=0.30)
    p.add_argument("--check-impls", nargs="+", default=list(IMPLS), choices=IMPLS, help="sdpa/flex: fp32 and bf16")
    p.add_argument("--check-seq-len", type=int, default=None, help="default 1024 (smoke 64)")
    p.add_argument("--check-only", action="store_true", help="causality checks only, no benchmark")
    p.add_argument("--skip-check", action="store_true", help="benchmark only")
    p.add_argument("--probe-size", type=int, default=8192, help="matmul probe n (n x n x n)")
    p.add_argument("--out", type=Path, default=None, help="JSON path (default bench/results/gpu.json); .md beside it")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", type=Path, default=None, help="append one profiled step per setup (CUDA) to this file")
    p.add_argument("--cpu-smoke", action="store_true", help="2-layer tiny model, fp32, on CPU: exercises the code")
    a = p.parse_args(argv)
    smoke = a.cpu_smoke
    a.seq_lens = a.seq_lens or ([64, 128] if smoke else [1024, 8192])
    try:
        a.setups = [Setup.parse(s) for s in (a.setups or (SMOKE_SETUPS if smoke else [DEFAULTS, BEFORE]))]
    except ValueError as exc:
        p.error(str(exc))
    a.steps = a.steps if a.steps is not None else (3 if smoke else 20)
    a.warmup = a.warmup if a.warmup is not None else (1 if smoke else 5)
    a.tokens_per_step = a.tokens_per_step or (512 if smoke else 65536)
    a.check_seq_len = a.check_seq_len or (64 if smoke else 1024)
    a.precision = "fp32" if smoke else "bf16"
    if a.out is None:
        a.out = Path(tempfile.gettempdir()) / "detour-gpu-cpu-smoke.json" if smoke else RESULTS / "gpu.json"
    if a.steps < 1 or a.warmup < 0 or a.grad_accum < 1:
        p.error("--steps >= 1, --warmup >= 0, --grad-accum >= 1")
    if a.check_only and a.skip_check:
        p.error("--check-only and --skip-check exclude each other")
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.cpu_smoke:
        device, arch = torch.device("cpu"), TINY_ARCH
    elif not torch.cuda.is_available():
        print(
            "bench_gpu: no CUDA device here (torch.cuda.is_available() is False; torch "
            f"{torch.__version__}, built for CUDA {torch.version.cuda}). Nothing was run.\n"
            "Run it on a GPU machine, or `python bench/bench_gpu.py --cpu-smoke` to exercise the code on CPU.",
            file=sys.stderr,
        )
        return 3
    else:
        device, arch = torch.device("cuda"), BASE_ARCH
    t_start = time.time()
    info = machine_info(device)
    log(f"[bench_gpu] device {info.get('gpu') or info.get('cpu')}; flash_attn: {info['flash_attn_status']}; "
        f"liger-kernel: {info['liger_kernel']}")  # fmt: skip

    peaks = {"datasheet_tflops": peak_tflops_for(info.get("gpu")), "probe_dtype": "bf16" if not a.cpu_smoke else "fp32"}
    if not a.check_only:
        probe_dtype = torch.float32 if a.cpu_smoke else torch.bfloat16
        n = 512 if a.cpu_smoke else a.probe_size
        peaks["probe_n"] = n
        peaks["probe_tflops"] = matmul_probe_tflops(device, probe_dtype, n, 5 if a.cpu_smoke else 20)
        log(f"[bench_gpu] peak: datasheet {peaks['datasheet_tflops']} / probe {peaks['probe_tflops']:.3g} TFLOP/s")
    else:
        peaks["probe_tflops"] = None

    payload = {
        "machine": info,
        "model": "ModernBERT-base shape (from config)" if not a.cpu_smoke else "tiny 2-layer ModernBERT (cpu smoke)",
        "arch": arch,
        "precision": a.precision,
        "flops_formula": FLOPS_FORMULA,
        "peaks": peaks,
        "modernbert_pipeline": {**MODERNBERT_REF, "tokens_per_s_per_gpu": MODERNBERT_TOKENS_PER_S},
        "settings": {
            "setups": [s.name for s in a.setups],
            "hf_trainer": a.hf,
            "steps": a.steps,
            "warmup": a.warmup,
            "tokens_per_step": a.tokens_per_step,
            "grad_accum": a.grad_accum,
            "oom_retry": a.oom_retry,
            "mlm_probability": a.mlm_probability,
            "seed": a.seed,
            "argv": sys.argv[1:] if argv is None else list(argv),
        },
        "check_seq_len": a.check_seq_len,
        "causality": [],
        "causality_pass": True,
        "results": [],
    }

    def write(**update) -> None:  # after every step of the run: a run cut short keeps what it measured
        payload.update(update, wall_s=time.time() - t_start)
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(payload, indent=2, default=str) + "\n")
        a.out.with_suffix(".md").write_text(markdown(payload) + "\n")

    if not a.skip_check:
        causality = run_checks(arch, a, device)
        write(causality=causality, causality_pass=all(c["pass"] is not False for c in causality))
    errored = False
    if not a.check_only:
        _, errored = run_benchmarks(arch, a, device, peaks, on_row=lambda rows: write(results=rows))
    write()
    print(markdown(payload))
    print(f"\n-> {a.out}")
    if not payload["causality_pass"]:
        print("bench_gpu: a causality check FAILED (see 'causality' in the JSON)", file=sys.stderr)
        return 1
    if errored:
        print("bench_gpu: a benchmark config raised an error (see 'results' in the JSON)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

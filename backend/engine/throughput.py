"""Where a training step's time goes, what it is worth in FLOPs, and the rates this machine last measured.

``StepSplit`` is the loop's stopwatch: ``time.perf_counter`` around data, forward+backward, optimizer, evaluation
and checkpoint (on CUDA a ``synchronize`` closes each part, since kernels run ahead of the Python that launched
them: one sync per part and step, no profiler). ``flops_per_token`` is the model FLOPs count behind model FLOPs
utilisation (MFU); ``peak_flops`` the yardstick for the precision in use: on CPU the matmul rates the precision
probe measured here, on CUDA the device's published dense peak (or a measured matmul where the name is unknown).
The rates kept to time a run before it is launched are ``engine/rates.py``'s.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator

import torch

from backend.core import atomic
from backend.core.paths import cache_dir

PARTS = ("data", "forward_backward", "optimizer", "eval", "checkpoint")
PART_LABELS = {"data": "data", "forward_backward": "fwd+bwd", "optimizer": "optimizer", "eval": "eval",
               "checkpoint": "checkpoint", "other": "other"}  # fmt: skip


class StepSplit:
    """Seconds per part since the last ``take``; what is not in a part (logging, checks) is ``other``."""

    def __init__(self, device: torch.device | str = "cpu"):
        self.cuda = torch.device(device).type == "cuda"
        self.acc = dict.fromkeys(PARTS, 0.0)
        self.counts = dict.fromkeys(PARTS, 0)
        self.start = time.perf_counter()

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if self.cuda:
                torch.cuda.synchronize()  # the part's kernels have ended, not only been queued
            self.acc[name] += time.perf_counter() - t0
            self.counts[name] += 1

    def take(self) -> dict:
        """{part: seconds, ..., 'other': rest, 'wall': seconds since the last take, 'n_eval', 'n_checkpoint': how
        many evaluations and checkpoint saves the interval held}; starts a new interval."""
        now = time.perf_counter()
        wall = now - self.start
        out = {k: round(v, 4) for k, v in self.acc.items()}
        out["other"] = round(max(wall - sum(self.acc.values()), 0.0), 4)
        out["wall"] = round(wall, 4)
        out |= {"n_eval": self.counts["eval"], "n_checkpoint": self.counts["checkpoint"]}
        self.acc, self.counts, self.start = dict.fromkeys(PARTS, 0.0), dict.fromkeys(PARTS, 0), now
        return out


def shares(split: dict) -> dict:
    """Fractions of wall time per part (``wall`` and the counts left out)."""
    parts = {k: v for k, v in split.items() if k in PART_LABELS}
    wall = split.get("wall") or sum(parts.values()) or 1e-9
    return {k: v / wall for k, v in parts.items()}


def format_split(split: dict) -> str:
    """'data 3% · fwd+bwd 81% · optimizer 9% · other 7%' (parts under 0.5% are left out)."""
    parts = [f"{PART_LABELS.get(k, k)} {100 * v:.0f}%" for k, v in shares(split).items() if v >= 0.005]
    return " · ".join(parts)


def flops_per_token(config, seq_len: int, labelled_fraction: float) -> float:
    """Training FLOPs per token: forward + backward = 3 x forward, a matmul of m x k by k x n = 2mkn.

    6 x (matmul parameters of the encoder layers), the prediction head's dense layer and the vocabulary projection
    only at labelled positions (``labelled_fraction``: the MLM rate, or 1 for CLM, which labels every token), plus
    attention scores and values: 2 matmuls x 2 x hidden x context, times 3, per layer, where the context is the
    sequence on global layers and the window on ModernBERT's local ones (the causal triangle is not halved: the
    count is the model's, as in the usual MFU, not what a kernel skips). Embeddings and norms are not counted.
    """
    h = config.hidden_size
    inter = config.intermediate_size
    layers = config.num_hidden_layers
    glu = 2 if getattr(config, "model_type", "") == "modernbert" else 1  # ModernBERT's Wi projects to 2 x inter
    per_layer = h * 3 * h + h * h + h * glu * inter + inter * h  # QKV, attention out, MLP in, MLP out
    flops = 6 * (layers * per_layer + h * h * labelled_fraction)
    kinds = getattr(config, "layer_types", None) or ["full_attention"] * layers
    window = getattr(config, "local_attention", None)
    for kind in kinds:
        ctx = seq_len if kind == "full_attention" or not window else min(seq_len, window + 1)
        flops += 3 * 2 * 2 * h * ctx
    flops += 6 * h * config.vocab_size * labelled_fraction
    return float(flops)


# Published dense peaks (TFLOP/s, no sparsity) of common training GPUs, by a substring of torch's device name.
# fp32 is the plain (non-TF32) rate: torch does not use TF32 for matmuls unless told to.
CUDA_PEAK_TFLOPS = {
    "H200": {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0},
    "H100 PCIe": {"bf16": 756.0, "fp16": 756.0, "fp32": 51.0},
    "H100": {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0},
    "A100": {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5},
    "L40S": {"bf16": 362.0, "fp16": 362.0, "fp32": 91.6},
    "L4": {"bf16": 121.0, "fp16": 121.0, "fp32": 30.3},
    "A10": {"bf16": 125.0, "fp16": 125.0, "fp32": 31.2},
    "T4": {"fp16": 65.0, "fp32": 8.1},
}


def _measured_matmul(dtype: torch.dtype, device: str, n: int = 4096, reps: int = 10) -> float:
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    return 2 * n**3 * reps / (time.perf_counter() - t0)


def peak_flops(precision: str, device: torch.device | str = "cpu") -> tuple[float, str]:
    """(FLOP/s, where the number comes from) for one process of ``precision`` on ``device``."""
    dev = torch.device(device)
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev)
        for key, table in CUDA_PEAK_TFLOPS.items():
            if key in name and precision in table:
                return table[precision] * 1e12, f"published dense {precision} peak of {name}"
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
        return _measured_matmul(dtype, str(dev)), f"measured {precision} 4096^2 matmul on {name}"
    return cpu_peak(precision)


# The CPU peak is the best of these probes (each the best of 3 matmuls), cached per machine and precision and raised
# whenever a run achieves more: one probe of one second under a busy machine's load once read a tenth of the truth
# and train.log printed MFU 985%. A peak that is a maximum over every measurement ever made here bounds MFU by 1.
PEAK_PROBES = 5
PEAK_N = 512


def _peak_path():
    return cache_dir() / "matmul-peaks.json"


def _machine_key() -> str:
    from backend.core.machine import cpu_name, cpu_speed_flags

    return f"{cpu_name()}|{','.join(cpu_speed_flags())}|{torch.get_num_threads()} threads|torch {torch.__version__}"


def _read_peaks() -> dict:
    try:
        return json.loads(_peak_path().read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def _write_peak(precision: str, gflops: float, source: str) -> None:
    peaks = _read_peaks()
    peaks.setdefault(_machine_key(), {})[precision] = {
        "gflops": round(gflops, 2),
        "source": source,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    try:
        _peak_path().parent.mkdir(parents=True, exist_ok=True)
        atomic.write_json(_peak_path(), peaks)
    except OSError:
        pass  # a read-only cache: the peak is measured again next time, MFU is still bounded within the run


def probe_cpu_peak(precision: str, probes: int = PEAK_PROBES) -> float:
    """FLOP/s of the best of ``probes`` probes of a ``PEAK_N``^2 matmul at ``precision`` (a few ms each in fp32)."""
    from backend.engine.precision import _time_matmul

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    with torch.random.fork_rng(devices=[]):  # random operands without moving the run's seeded generator
        best = min(_time_matmul(dtype, n=PEAK_N, reps=3) for _ in range(probes))
    return 2 * PEAK_N**3 / best


def cpu_peak(precision: str) -> tuple[float, str]:
    """(FLOP/s, where from) of this CPU at ``precision``: the larger of the cached peak and a fresh probe (the cache
    keeps the larger). bf16 also takes the precision probe's bf16 rate (already measured where auto ran)."""
    cached = _read_peaks().get(_machine_key(), {}).get(precision)
    rate = probe_cpu_peak(precision)
    source = f"best of {PEAK_PROBES} probes of a {PEAK_N}^2 {precision} matmul"
    if precision == "bf16":
        from backend.engine.precision import cpu_bf16_probe

        probed = cpu_bf16_probe()["bf16_gflops"] * 1e9
        if probed > rate:
            rate, source = probed, f"the precision probe's {PEAK_N}^2 bf16 matmul"
    if cached and cached["gflops"] * 1e9 >= rate:
        return cached["gflops"] * 1e9, f"{cached['source']}, {cached['measured_at'].replace('T', ' ')[:16]} (cached)"
    _write_peak(precision, rate / 1e9, source)
    return rate, f"{source}, {time.strftime('%Y-%m-%d %H:%M')}"


def bounded_mfu(achieved: float, peak: tuple[float, str], precision: str, device, who: str) -> tuple[float, tuple]:
    """(MFU, the peak it is taken against): where ``achieved`` (FLOP/s of one process) beats the peak, the peak
    becomes it (and, on CPU, the machine's cached peak too, credited to ``who``), so MFU never exceeds 1."""
    if achieved <= peak[0]:
        return achieved / peak[0], peak
    source = f"achieved by {who}, above every matmul probe"
    if torch.device(device).type == "cpu":
        _write_peak(precision, achieved / 1e9, source)
    return 1.0, (achieved, f"{source}, {time.strftime('%Y-%m-%d %H:%M')}")


def format_mfu(mfu: float | None, peak_flops: float | None, source: str | None = None) -> str:
    """'MFU 45.2% of 150 GFLOP/s (best of 5 probes ...)': the figure never without its yardstick. A figure above
    100% (a run logged before peaks were bounded) is called what it is: a peak measured too low."""
    if mfu is None:
        return "MFU unknown"
    of = f" of {peak_flops / 1e9:,.0f} GFLOP/s" if peak_flops else ""
    where = f" ({source})" if source else ""
    if mfu > 1:
        return f"MFU unreliable (above 100%{of}: that run's peak was measured too low, under load){where}"
    return f"MFU {100 * mfu:.1f}%{of}{where}"


# --- the one training rate of a run (the Runs table, the doctor and its panel) -----------------------------------


def step_rate(train_rows: list[dict]) -> float | None:
    """A run's (or one phase's) training rate in tokens/s: the median of its logged intervals, the first interval of
    each phase left out where the phase has others (it holds the warm-up: compiling, the step-0 evaluation, a
    resume's loading). The Runs table and the doctor both show this number, so one run has one rate."""
    import statistics

    kept, phase = [], object()
    for r in train_rows:
        rate = r.get("tokens_per_s")
        if not isinstance(rate, int | float) or isinstance(rate, bool):  # not logged (or a hand-edited row)
            continue
        group = r.get("phase")
        if group != phase:
            phase = group
            kept.append([])
        kept[-1].append(rate)
    rates = [x for g in kept for x in (g[1:] or g)]
    return statistics.median(rates) if rates else None

"""What the field uses to push an encoder's GPU step closer to the hardware, one lever each, for ``bench_gpu.py``
(a setup ``ATTN:LOSS:COMPILE+lever+lever``). Each lever is measured against the same setup without it, on the same
weights and batches, so its gain and its effect on the loss are both in the row; none is a trainer default until
such a row shows it wins.

``liger-norm``   every LayerNorm through liger-kernel's Triton LayerNorm (exact: same function, one fused kernel);
``liger-geglu``  the GeGLU MLP's activation through liger-kernel's fused GELU*gate. Liger computes GELU with the tanh
                 approximation and ModernBERT's checkpoints use the exact (erf) GELU, so this lever changes the model's
                 function slightly (|gelu - gelu_tanh| < 5e-4): the row's loss difference says by how much;
``autotune``     ``torch.compile(mode="max-autotune-no-cudagraphs")``: inductor times several GEMM and fusion
                 choices per shape instead of taking its heuristics (compiles for minutes);
``cudagraphs``   ``torch.compile(mode="max-autotune")``: the same plus CUDA graphs (launch overhead gone);
``fp8``          torchao's float8 training on every encoder Linear whose sizes are multiples of 16 (dynamic
                 tensorwise scaling; matmuls on the FP8 tensor cores, weights stay fp32).
"""

from __future__ import annotations

import torch
from torch import nn

LEVERS = ("liger-norm", "liger-geglu", "autotune", "cudagraphs", "fp8")
COMPILE_MODES = {"autotune": "max-autotune-no-cudagraphs", "cudagraphs": "max-autotune"}


def unavailable(levers: tuple[str, ...], device: torch.device) -> str | None:
    """Why these levers cannot run here, or None."""
    if not levers:
        return None
    if device.type != "cuda":
        return f"levers {'+'.join(levers)} need a CUDA device"
    try:
        if any(lv.startswith("liger") for lv in levers):
            import liger_kernel  # noqa: F401
        if "fp8" in levers:
            import torchao.float8  # noqa: F401

            if torch.cuda.get_device_capability() < (8, 9):
                return "fp8 needs compute capability >= 8.9 (Ada, Hopper)"
    except ImportError as exc:
        return f"not installed: {exc.name}"
    if sum(lv in COMPILE_MODES for lv in levers) > 1:
        return "autotune and cudagraphs are two compile modes: pick one"
    return None


def compile_mode(levers: tuple[str, ...]) -> str | None:
    """The torch.compile mode the levers ask for (None: inductor's default, as the trainer compiles)."""
    return next((COMPILE_MODES[lv] for lv in levers if lv in COMPILE_MODES), None)


class _LigerNorm(nn.Module):
    """A LayerNorm through liger's kernel, sharing the original's weight (and bias, or a fixed zero bias)."""

    def __init__(self, norm: nn.LayerNorm):
        super().__init__()
        self.weight, self.eps = norm.weight, norm.eps
        if norm.bias is not None:
            self.bias = norm.bias
        else:
            self.register_buffer("bias", torch.zeros_like(norm.weight), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from liger_kernel.transformers.functional import liger_layer_norm

        return liger_layer_norm(x, self.weight, self.bias, self.eps)


def _swap_norms(model: nn.Module) -> int:
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.LayerNorm) and child.weight is not None:
                setattr(parent, name, _LigerNorm(child))
                swapped += 1
    return swapped


def _liger_geglu_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    from liger_kernel.ops import LigerGELUMulFunction

    x, gate = self.Wi(hidden_states).chunk(2, dim=-1)
    return self.Wo(self.drop(LigerGELUMulFunction.apply(x.contiguous(), gate.contiguous())))


def _swap_geglu(model: nn.Module) -> int:
    import types

    swapped = 0
    for module in model.modules():
        if type(module).__name__ == "ModernBertMLP":
            module.forward = types.MethodType(_liger_geglu_forward, module)
            swapped += 1
    return swapped


def _to_fp8(model: nn.Module) -> int:
    from torchao.float8 import convert_to_float8_training

    def eligible(mod: nn.Module, fqn: str) -> bool:
        return isinstance(mod, nn.Linear) and mod.in_features % 16 == 0 and mod.out_features % 16 == 0

    before = sum(isinstance(m, nn.Linear) for m in model.modules())
    convert_to_float8_training(model, module_filter_fn=eligible)
    return before - sum(type(m) is nn.Linear for m in model.modules())


def apply(model: nn.Module, levers: tuple[str, ...]) -> dict:
    """Apply the model-changing levers to ``model`` (a ModernBertForMaskedLM) in place, before it is compiled;
    -> how many modules each one changed (a lever that changed nothing is an error, not a silent no-op)."""
    done = {}
    if "liger-norm" in levers:
        done["liger-norm"] = _swap_norms(model)
    if "liger-geglu" in levers:
        done["liger-geglu"] = _swap_geglu(model)
    if "fp8" in levers:
        done["fp8"] = _to_fp8(model.model)  # the encoder's Linears; the tied vocabulary projection stays bf16
    empty = [k for k, n in done.items() if n == 0]
    if empty:
        raise RuntimeError(f"lever(s) {empty} found nothing to change in {type(model).__name__}")
    return done

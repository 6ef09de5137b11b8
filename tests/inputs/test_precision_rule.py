"""fp16 on a CPU: one rule for training and evaluation. Accelerate runs it as fp32 without a word, so a run would
record fp16 (and take its MFU against an fp16 peak) while computing in fp32: refused before any run exists."""

from __future__ import annotations

import pytest
import torch

from backend.__main__ import main
from backend.engine.precision import FP16_NEEDS_GPU

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the rule is about machines without CUDA")


@pytest.mark.parametrize("command", ["validate", "train"])
def test_train_precision_fp16_is_refused_on_cpu(command, tiny_modernbert_dir, capsys, isolated_runs_dir):
    rc = main([command, "--set", f"model.name={tiny_modernbert_dir}", "--set", "train.precision=fp16",
               "--set", "recipe=mlm", "--set", "name=half"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "'train.precision': got 'fp16'" in err and FP16_NEEDS_GPU in err
    assert not (isolated_runs_dir / "half").exists()


def test_evaluate_refuses_with_the_same_words():
    from backend.core.errors import ConfigError
    from backend.evaluation.runner import resolve_eval_precision

    with pytest.raises(ConfigError, match="fp16 needs a CUDA GPU") as e:
        resolve_eval_precision("fp16")
    assert FP16_NEEDS_GPU in str(e.value)

"""Scores that parse but mean nothing are said so: an undefined F1, a model that gives one constant answer, and
fine-tuning defaults that do not fit the model's size.

- An NER split with no entities has no entity F1 (0/0): it was reported as 0.00 with status complete. The scores
  say ``undefined`` and the summary leaves that seed out.
- A fine-tuned model that predicts ``O`` for every token, or the same label set (often none) for every example, has
  learned nothing, whatever its score: flagged per seed in results.json/md and in the NER tab.
- The paper's lr 5e-5 is for 150M+ models; on the bundled 6-layer d=256 base the replication calibrated 1e-3 (5e-5
  gave macro-F1 0.00, every example predicted with no label). ``default_lr`` picks by parameter count and says why.
"""

from __future__ import annotations

from collections.abc import Sequence

SMALL_MODEL_PARAMS = 50_000_000  # below: the small-model lr; the paper's models start at 150M
SMALL_MODEL_LR = 1e-3  # calibrated by the replication on the bundled base (about 8M parameters)
PAPER_LR = 5e-5
NO_ENTITIES = "the split has no entities: entity F1 is undefined (0/0), not 0"


def constant_answer(pred: Sequence) -> str | None:
    """The one answer a model gave everywhere (a tag for NER, a label set for classification), or None. A single
    prediction is not called constant."""
    flat = [tuple(p) if isinstance(p, list) else p for p in pred]
    if len(flat) < 2 or len(set(flat)) != 1:
        return None
    one = flat[0]
    return ("{" + ", ".join(map(str, one)) + "}" if one else "no label") if isinstance(one, tuple) else str(one)


def run_flags(label: str, run: dict, split: str = "test") -> list[str]:
    """One-line warnings for a finished seed: an undefined score, a constant answer."""
    scores = run.get(split) or {}
    seed = run.get("seed")
    out = []
    if scores.get("undefined"):
        out.append(f"{label} seed {seed}: {split} {scores['undefined']}")
    if scores.get("constant") is not None:
        out.append(
            f"{label} seed {seed}: predicts {scores['constant']} for every {split} "
            f"{'token' if 'token_accuracy' in scores else 'example'}: a constant answer, the fine-tuning learned "
            "nothing (try a larger --lr or more epochs)"
        )
    return out


def parameter_count(config) -> int:
    """Parameters of an encoder from its config (embeddings + blocks), without loading weights."""
    d = int(getattr(config, "hidden_size", 0) or 0)
    layers = int(getattr(config, "num_hidden_layers", 0) or 0)
    inter = int(getattr(config, "intermediate_size", 4 * d) or 4 * d)
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    return vocab * d + layers * (4 * d * d + 2 * d * inter)


def default_lr(configs: Sequence) -> tuple[float, str]:
    """The fine-tuning lr when none is given, and why: one lr for every model (the comparison is paired), chosen by
    the largest model's size."""
    n = max((parameter_count(c) for c in configs), default=0)
    if 0 < n < SMALL_MODEL_PARAMS:
        return SMALL_MODEL_LR, (
            f"default for models under {SMALL_MODEL_PARAMS // 1_000_000}M parameters (largest here ~{n / 1e6:.0f}M): "
            "calibrated on the bundled base; the paper's 5e-5 (150M+) leaves small models predicting nothing"
        )
    return PAPER_LR, f"the paper's lr for 150M+ models (largest here ~{n / 1e6:.0f}M parameters)"

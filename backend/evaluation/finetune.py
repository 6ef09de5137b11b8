"""One (model, seed) fine-tune: a new task head on the encoder, AdamW + linear schedule with warmup, dev scored
every epoch, the best epoch (by the dev metric, ties broken by dev loss) restored and scored on test, and the
fine-tuned model saved with its tokenizer, ``label_map.json``, its model card ``README.md`` and ``metrics.json``
(written last, atomically, so a folder with ``metrics.json`` is complete).

Plain PyTorch loop through Accelerate, in the precision the runner resolved (``backend.engine.precision``).
A step whose loss or gradient norm is not finite is skipped (no optimizer or LR update, gradients dropped) and
counted, like the steps fp16's GradScaler skips; the counts go to the progress events and ``metrics.json``, and a
seed fails once more than ``MAX_SKIPPED_FRACTION`` of its steps (at least ``MIN_SKIP_BUDGET``) were skipped:
a handful of fp16 overflows while the scaler calibrates is normal, a run that keeps producing NaN is not.
"""

from __future__ import annotations

import gc
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from backend.core import atomic
from backend.core.errors import ConfigError, DetourError
from backend.engine.models import quiet_transformers
from backend.engine.precision import from_mixed, make_accelerator

# The paper's English protocol: AdamW lr 5e-5, wd 0.01, batch 16, 10 epochs (20 for NER), best by dev F1.
DEFAULT_HPARAMS = {
    "ner": {
        "epochs": 20,
        "lr": 5e-5,
        "weight_decay": 0.01,
        "batch_size": 16,
        "max_len": 256,
        "warmup_ratio": 0.1,
        "grad_clip": 1.0,
        "eval_batch_size": 64,
        "max_train_examples": None,
        "max_eval_examples": None,
        "metric": "f1",
    },
    "classification": {
        "epochs": 10,
        "lr": 5e-5,
        "weight_decay": 0.01,
        "batch_size": 16,
        "max_len": 512,
        "warmup_ratio": 0.1,
        "grad_clip": 1.0,
        "eval_batch_size": 64,
        "max_train_examples": None,
        "max_eval_examples": None,
        "metric": "macro_f1",
    },
}
METRICS = {"ner": ("f1", "macro_f1", "token_accuracy"), "classification": ("macro_f1", "micro_f1", "accuracy")}
MAX_SKIPPED_FRACTION = 0.05  # of a seed's optimizer steps
MIN_SKIP_BUDGET = 10  # fp16's GradScaler may skip a few steps while it finds its scale
SKIP_EXAMPLES = 10  # skipped steps described in metrics.json


def resolve_hparams(task: str, **overrides) -> dict:
    """Task defaults with ``overrides`` applied (None means default); unknown keys and bad values raise."""
    if task not in DEFAULT_HPARAMS:
        raise ConfigError("task", task, f"use one of: {', '.join(DEFAULT_HPARAMS)}")
    hp = dict(DEFAULT_HPARAMS[task])
    for k, v in overrides.items():
        if k not in hp:
            raise ConfigError(k, v, f"unknown fine-tuning setting; known: {', '.join(hp)}")
        if v is not None:
            hp[k] = v
    ints = ("epochs", "batch_size", "max_len", "eval_batch_size")
    for k in ints:
        if not isinstance(hp[k], int) or isinstance(hp[k], bool) or hp[k] < 1:
            raise ConfigError(k, hp[k], "use an integer >= 1")
    if hp["max_len"] < 8:
        raise ConfigError("max_len", hp["max_len"], "use at least 8 tokens")
    for k in ("max_train_examples", "max_eval_examples"):
        if hp[k] is not None and (not isinstance(hp[k], int) or hp[k] < 1):
            raise ConfigError(k, hp[k], "use an integer >= 1, or leave unset for all examples")
    for k, lo, hi in (("lr", 0.0, 1.0), ("weight_decay", 0.0, 10.0), ("warmup_ratio", 0.0, 1.0), ("grad_clip", 0, 1e9)):
        try:
            hp[k] = float(hp[k])
        except (TypeError, ValueError):
            raise ConfigError(k, hp[k], "use a number") from None
        if not (lo <= hp[k] <= hi) or (k == "lr" and hp[k] == 0):
            raise ConfigError(k, hp[k], f"use a number in ({lo}, {hi}]" if k == "lr" else f"use [{lo}, {hi}]")
    if hp["metric"] not in METRICS[task]:
        raise ConfigError("metric", hp["metric"], f"for {task} use one of: {', '.join(METRICS[task])}")
    return hp


def effective_max_len(requested: int, tokenizer, config) -> int:
    """``max_len`` clamped to the model's position table and the tokenizer's model_max_length."""
    limits = [requested]
    mpe = getattr(config, "max_position_embeddings", None)
    if isinstance(mpe, int) and mpe > 0:
        # RoBERTa-style position ids start at padding_idx + 1
        off = 2 if getattr(config, "model_type", "") in ("roberta", "camembert", "xlm-roberta") else 0
        limits.append(mpe - off)
    tml = getattr(tokenizer, "model_max_length", None)
    if isinstance(tml, int) and 0 < tml < 10**7:
        limits.append(tml)
    return max(8, min(limits))


def accelerator_precision(accelerator) -> dict:
    """The precision record for an accelerator that came without one (a caller's own)."""
    return {"requested": None, "resolved": from_mixed(accelerator.mixed_precision), "why": "given"}


def _param_groups(model, weight_decay: float):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or name.endswith(".bias") else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _better(cur: dict, best: dict | None, metric: str) -> bool:
    if best is None:
        return True
    a, b = (-math.inf if x is None else x for x in (cur[metric], best[metric]))  # None: undefined (no entities)
    if a != b:
        return a > b
    la, lb = cur.get("loss", math.inf), best.get("loss", math.inf)
    return (la if la == la else math.inf) < (lb if lb == lb else math.inf)


class NonFiniteTraining(DetourError):
    """Too many steps of one fine-tune had a non-finite loss or gradient."""


@dataclass
class SkippedSteps:
    """The steps a fine-tune did not apply, by reason, and the first few of them (where, what, batch length)."""

    budget: int
    nonfinite_loss: int = 0
    nonfinite_grad: int = 0
    fp16_overflow: int = 0  # GradScaler found inf/NaN gradients: it skipped the step and lowered its scale
    first: list[dict] = field(default_factory=list)

    @classmethod
    def for_run(cls, total_steps: int) -> SkippedSteps:
        return cls(budget=max(MIN_SKIP_BUDGET, math.ceil(MAX_SKIPPED_FRACTION * total_steps)))

    @property
    def total(self) -> int:
        return self.nonfinite_loss + self.nonfinite_grad + self.fp16_overflow

    def record(self, reason: str, value: float, epoch: int, step: int, seq_len: int, total_steps: int) -> None:
        """Count one skipped step; raise NonFiniteTraining once more than ``budget`` were skipped."""
        setattr(self, reason, getattr(self, reason) + 1)
        if len(self.first) < SKIP_EXAMPLES:
            shown = value if math.isfinite(value) else str(value)  # JSON has no NaN/inf
            self.first.append({"epoch": epoch, "step": step, "reason": reason, "value": shown, "seq_len": seq_len})
        if self.total > self.budget:
            f = self.first[0]
            raise NonFiniteTraining(
                f"{self.total} steps skipped for non-finite values (loss {self.nonfinite_loss}, gradients "
                f"{self.nonfinite_grad}, fp16 overflows {self.fp16_overflow}), more than the {self.budget} allowed "
                f"({MAX_SKIPPED_FRACTION:.0%} of {total_steps} steps, at least {MIN_SKIP_BUDGET}); the first at epoch "
                f"{f['epoch']} step {f['step']} ({f['reason']} {f['value']}, batch length {f['seq_len']}). "
                "Try --precision fp32 or a lower --lr"
            )

    def as_dict(self) -> dict:
        return {
            "total": self.total,
            "nonfinite_loss": self.nonfinite_loss,
            "nonfinite_grad": self.nonfinite_grad,
            "fp16_overflow": self.fp16_overflow,
            "budget": self.budget,
            "first": self.first,
        }


def _write_card(folder: Path, metrics: dict, label_map: dict) -> None:
    """The fine-tuned model's README.md, in the folder before it is renamed into place. A card that cannot be
    written does not cost the fine-tune: the evaluation writes every kept model's card again when it finishes, and
    says which one it could not."""
    from backend.cards.finetuned_card import write_finetuned_card

    try:
        write_finetuned_card(folder, metrics, label_map, metrics.get("evaluation") or "evaluation")
    except Exception:  # noqa: BLE001 - whatever went wrong, the fine-tuned model and its scores are kept
        pass


def train_step(accelerator, model, optimizer, scheduler, batch, grad_clip: float) -> tuple[float, str | None, float]:
    """One optimizer step -> (loss, the reason it was skipped or None, the value that made it skip).

    A non-finite loss is not backpropagated; a non-finite gradient norm (bf16/fp32) is not applied: the gradients
    are dropped, so AdamW's moments and the LR schedule only see real updates. Under fp16 the GradScaler decides
    (it must see the overflow to lower its scale) and ``step_was_skipped`` says what it did.
    """
    optimizer.zero_grad(set_to_none=True)
    loss = model(**batch).loss
    value = float(loss.detach().item())
    if not math.isfinite(value):
        return value, "nonfinite_loss", value
    accelerator.backward(loss)
    # max_norm inf when clipping is off: the norm is still measured, the gradients are multiplied by 1.0 (exact)
    norm = float(accelerator.clip_grad_norm_(model.parameters(), grad_clip if grad_clip > 0 else math.inf))
    if not math.isfinite(norm) and accelerator.scaler is None:
        optimizer.zero_grad(set_to_none=True)
        return value, "nonfinite_grad", norm
    optimizer.step()
    scheduler.step()  # Accelerate's scheduler wrapper does not step after a step the GradScaler skipped
    skipped = accelerator.scaler is not None and optimizer.step_was_skipped
    optimizer.zero_grad(set_to_none=True)
    return value, ("fp16_overflow" if skipped else None), norm


def finetune(
    task,
    source,
    seed: int,
    out_dir: str | Path,
    hp: dict,
    *,
    model_label: str,
    meta: dict | None = None,
    progress: Callable[[dict], None] | None = None,
    accelerator=None,
    precision: dict | None = None,
    trust_remote_code: bool = False,
    keep_model: bool = True,
) -> dict:
    """Fine-tune ``source`` on ``task`` (a NerTask / ClsTask built with this model's tokenizer) with ``seed``.

    Writes ``out_dir`` (model, tokenizer, label_map.json, metrics.json) and returns the metrics dict.
    ``progress`` gets ``{"event": "step"|"epoch", ..., "skipped": steps skipped so far}`` dicts.
    ``precision``: ``{requested, resolved, why}`` as the runner resolved it (recorded in metrics.json).
    """
    from accelerate.utils import set_seed
    from torch.utils.data import DataLoader
    from transformers import get_linear_schedule_with_warmup

    from backend.evaluation.ner import pad_batch

    out_dir = Path(out_dir)
    accelerator = accelerator or make_accelerator()
    metric = hp["metric"]
    emit = progress or (lambda ev: None)
    t0 = time.time()

    set_seed(seed)
    with quiet_transformers():  # "newly initialized head" reports are expected here
        model = task.load_model(source, trust_remote_code=trust_remote_code)

    feats = [f for f in task.train_features if not isinstance(f["labels"], list) or any(x != -100 for x in f["labels"])]
    gen = torch.Generator().manual_seed(seed)
    loader = DataLoader(
        feats,
        batch_size=hp["batch_size"],
        shuffle=True,
        generator=gen,
        collate_fn=lambda items: pad_batch(items, task.pad_id),
    )
    optimizer = torch.optim.AdamW(_param_groups(model, hp["weight_decay"]), lr=hp["lr"])
    steps_per_epoch = len(loader)
    total_steps = steps_per_epoch * hp["epochs"]
    scheduler = get_linear_schedule_with_warmup(optimizer, int(hp["warmup_ratio"] * total_steps), total_steps)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    device = accelerator.device

    history, best, best_state, best_epoch = [], None, None, 0
    skips = SkippedSteps.for_run(total_steps)
    last_emit = 0.0
    try:
        for epoch in range(1, hp["epochs"] + 1):
            te = time.time()
            model.train()
            loss_sum, n_batches, skipped_before = 0.0, 0, skips.total
            for step, batch in enumerate(loader, start=1):
                loss, reason, value = train_step(accelerator, model, optimizer, scheduler, batch, hp["grad_clip"])
                if reason is not None:
                    skips.record(reason, value, epoch, step, int(batch["input_ids"].shape[1]), total_steps)
                if math.isfinite(loss):
                    loss_sum += loss
                    n_batches += 1
                now = time.time()
                if now - last_emit > 2.0 or reason is not None:  # a skipped step is reported at once
                    last_emit = now
                    emit(
                        {
                            "event": "step",
                            "epoch": epoch,
                            "epochs": hp["epochs"],
                            "step": step,
                            "steps_per_epoch": steps_per_epoch,
                            "skipped": skips.total,
                        }
                    )
            unwrapped = accelerator.unwrap_model(model)
            dev = task.evaluate(unwrapped, "dev", hp["eval_batch_size"], device, accelerator.autocast)
            row = {
                "epoch": epoch,
                "train_loss": loss_sum / max(1, n_batches),
                "dev_loss": dev.get("loss"),
                f"dev_{metric}": dev[metric],
                "skipped_steps": skips.total - skipped_before,
                "time_s": round(time.time() - te, 3),
            }
            history.append(row)
            if _better(dev, best, metric):
                best, best_epoch = dev, epoch
                best_state = {k: v.detach().to("cpu", copy=True) for k, v in unwrapped.state_dict().items()}
            emit(
                {
                    "event": "epoch",
                    "epoch": epoch,
                    "epochs": hp["epochs"],
                    "dev_metric": dev[metric],
                    "metric": metric,
                    "best_epoch": best_epoch,
                    "train_loss": row["train_loss"],
                    "epoch_s": row["time_s"],
                    "skipped": skips.total,
                }
            )

        unwrapped = accelerator.unwrap_model(model)
        unwrapped.load_state_dict(best_state)
        test = task.evaluate(unwrapped, "test", hp["eval_batch_size"], device, accelerator.autocast)
        sizes = task.sizes()
        metrics = {
            "status": "ok",
            **(meta or {}),
            "task": task.task,
            "model": model_label,
            "seed": seed,
            "primary_metric": metric,
            "hparams": hp,
            "labels": task.labels,
            "best_epoch": best_epoch,
            "epochs_run": len(history),
            "dev": best,
            "test": test,
            "history": history,
            "n_train": sizes["train"],
            "n_dev": sizes["dev"],
            "n_test": sizes["test"],
            "train_time_s": round(time.time() - t0, 2),
            "device": str(device),
            "precision": precision or accelerator_precision(accelerator),
            "optimizer_steps": total_steps - skips.total,
            "skipped_steps": skips.as_dict(),
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "model_dir": str(out_dir),
            "saved_model": keep_model,
        }
        tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        try:
            if keep_model:
                with quiet_transformers():
                    unwrapped.save_pretrained(tmp)
                    task.tokenizer.save_pretrained(tmp)
            atomic.write_json(tmp / "label_map.json", task.label_map())
            if keep_model:
                _write_card(tmp, metrics, task.label_map())
            atomic.write_json(tmp / "metrics.json", metrics)
            atomic.replace_dir(tmp, out_dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return metrics
    finally:
        accelerator.free_memory()
        del model, optimizer, scheduler, best_state
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

"""The training loop: one screen, every phase of every recipe.

``run_training`` is called by ``backend.train.train_run`` with a resolved config and a run dir.
It runs unchanged on one CPU, under ``accelerate launch`` (DDP over gloo/nccl) and with FSDP when
the config asks. Data order, masks and LR are pure functions of the global step, so a resumed
run reproduces the uninterrupted one.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import shutil
import time
from pathlib import Path

import torch

from . import atomic, checkpoint
from .data import PackedData, batch_indices, load_corpus
from .freeze import drop_frozen_grads, frozen_names
from .objectives import EncoderLM, clm_labels, mlm_mask, replacement_vocab, special_ids
from .optim import build_optimizer, set_lr
from .recipes import build_phases, freeze_dict, tokens_per_step
from .rundir import read_metrics, write_status
from .schedule import locate, lr_factor

EVAL_MASK_SEED = 4321  # the held-out MLM curve uses the same masks in every run


def quiet_libraries() -> None:
    """Keep train.log readable: no per-save progress bars, no benign shared-tensor notices."""
    import logging

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    logging.getLogger("accelerate.utils.other").setLevel(logging.ERROR)
    logging.getLogger("accelerate.checkpointing").setLevel(logging.WARNING)


def make_accelerator(cfg: dict):
    from accelerate import Accelerator

    mp = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}[cfg["train"]["precision"]]
    kwargs = {}
    if cfg["train"]["fsdp"]:
        from accelerate import FullyShardedDataParallelPlugin

        kwargs["fsdp_plugin"] = FullyShardedDataParallelPlugin(use_orig_params=True)
    return Accelerator(mixed_precision=mp, **kwargs)


def _mask_generator(seed: int, micro_index: int, rank: int) -> torch.Generator:
    return torch.Generator().manual_seed((seed * 1_000_003 + micro_index) * 1009 + rank)


def make_batch(data: PackedData, idx: torch.Tensor, objective: str, mlm_p: float, tok: dict, gen):
    ids, starts = data.input_ids[idx], data.doc_start[idx]
    if objective == "clm":
        return ids, clm_labels(ids, starts)
    return mlm_mask(ids, mlm_p, tok["special"], tok["mask_id"], tok["vocab"], gen)


@torch.no_grad()
def evaluate(lm, held: PackedData, cfg: dict, tok: dict, accelerator) -> dict:
    """Held-out MLM loss at 15% with fixed masks (comparable across recipes) and CLM loss."""
    model = accelerator.unwrap_model(lm)
    model.eval()
    bs = cfg["train"]["batch_size"]
    n = min(cfg["logging"]["eval_batches"] * bs, len(held))
    sums = {"mlm": 0.0, "mlm_n": 0, "mlm_correct": 0, "clm": 0.0, "clm_n": 0}
    dev = accelerator.device
    for i in range(0, n, bs):
        idx = torch.arange(i, min(i + bs, n))
        g = torch.Generator().manual_seed(EVAL_MASK_SEED + i)
        for objective in ("mlm", "clm"):
            ids, labels = make_batch(held, idx, objective, 0.15, tok, g)
            with accelerator.autocast():
                loss, correct, count = model(ids.to(dev), labels.to(dev), causal=objective == "clm")
            sums[objective] += loss.item() * count
            sums[f"{objective}_n"] += count
            if objective == "mlm":
                sums["mlm_correct"] += int(correct)
    model.train()
    return {
        "eval_mlm_loss": sums["mlm"] / max(sums["mlm_n"], 1),
        "eval_mlm_accuracy": sums["mlm_correct"] / max(sums["mlm_n"], 1),
        "eval_clm_loss": sums["clm"] / max(sums["clm_n"], 1),
    }


def run_training(cfg: dict, run_dir: Path, hf_model, tokenizer, resume: bool, should_stop, log=print) -> str:
    """Train ``hf_model`` through the recipe's phases. Returns 'done' or 'cancelled'."""
    run_dir = Path(run_dir)
    quiet_libraries()
    accelerator = make_accelerator(cfg)
    main = accelerator.is_main_process
    world, rank = accelerator.num_processes, accelerator.process_index
    t_cfg, l_cfg = cfg["train"], cfg["logging"]
    torch.manual_seed(t_cfg["seed"])

    train, held, info = load_corpus(cfg["data"], tokenizer, t_cfg["seq_len"])
    phases = build_phases(cfg, world)
    tps = tokens_per_step(cfg, world)
    total_steps = sum(p.steps for p in phases)
    bs, accum, seed = t_cfg["batch_size"], t_cfg["grad_accum"], t_cfg["seed"]
    data_seed = seed if t_cfg["data_seed"] is None else t_cfg["data_seed"]
    if len(train) < bs * world:
        from .errors import DataError

        raise DataError(
            f"data.corpus: {len(train)} training sequences of {t_cfg['seq_len']} tokens, fewer than one batch "
            f"({bs * world}); use more text, a smaller train.batch_size or a shorter train.seq_len"
        )
    tok = {
        "special": special_ids(tokenizer),
        "mask_id": tokenizer.mask_token_id,
        "vocab": replacement_vocab(tokenizer),
    }
    if main:
        atomic.write_json(run_dir / "data_info.json", info)
        log(f"data: {info}")
        log("phases: " + ", ".join(f"{p.name}={p.objective}x{p.steps} steps" for p in phases) + f"; {tps} tokens/step")

    lm = EncoderLM(hf_model)
    if t_cfg["compile"]:  # in place (nn.Module.compile): parameter names, checkpoints and exports are unchanged
        lm.encoder().compile()
        if main:
            log("train.compile: encoder compiled with torch.compile (first steps of each attention mode compile)")
    optimizer = build_optimizer(hf_model, t_cfg)
    lm, optimizer = accelerator.prepare(lm, optimizer)
    hf = accelerator.unwrap_model(lm).hf_model
    named = dict(hf.named_parameters())

    start_step, log_acc = 0, {"loss": 0.0, "n": 0}
    if resume:
        found = checkpoint.latest_good(run_dir, log=log)
        if found is None:
            log("resume: no usable checkpoint, starting from the beginning")
        else:
            ck, state = found
            accelerator.load_state(str(ck / "state"))
            start_step, log_acc = state["step"], state.get("log_acc", log_acc)
            log(f"resume: from {ck.name} (step {start_step}, {state['tokens_seen']} tokens)")
            if main:  # drop rows logged after the checkpoint so curves do not double back
                rows = [r for r in read_metrics(run_dir) if r.get("step", 0) <= start_step]
                atomic.write_text(run_dir / "metrics.jsonl", "".join(atomic.json_line(r) for r in rows))
    elif main:
        atomic.write_text(run_dir / "metrics.jsonl", "")

    def emit(row: dict) -> None:
        if main:
            atomic.append_jsonl(run_dir / "metrics.jsonl", {**row, "time": time.time()})

    def save(step: int, tag: str | None = None) -> None:
        state = {
            "step": step,
            "tokens_seen": step * tps,
            "phase": phases[locate(phases, max(step - 1, 0))[0]].name,
            "tag": tag,
            "log_acc": log_acc,
            "total_steps": total_steps,
        }
        checkpoint.save(accelerator, lm, tokenizer, run_dir, step, state, l_cfg["keep_checkpoints"])

    frozen: list[torch.nn.Parameter] = []
    current_phase = -1
    t_last, tokens_last = time.time(), start_step * tps
    if start_step == 0:  # where every recipe starts from: the same number for a pair
        emit(
            {
                "type": "eval",
                "step": 0,
                "phase": phases[0].name,
                "tokens_seen": 0,
                **evaluate(lm, held, cfg, tok, accelerator),
            }
        )
    lm.train()
    data_hash = hashlib.sha1()  # of the token ids seen since the last log row: pairs must match
    for step in range(start_step, total_steps):
        pi, ps = locate(phases, step)
        phase = phases[pi]
        if pi != current_phase:  # phase start (or resume inside it): freeze set, boundary marker
            current_phase = pi
            names = frozen_names(hf, freeze_dict(phase), f"phases.{phase.name}.freeze")
            frozen = [named[n] for n in sorted(names)]
            if ps == 0:
                emit(
                    {
                        "type": "phase",
                        "step": step,
                        "phase": phase.name,
                        "objective": phase.objective,
                        "mlm_probability": phase.mlm_probability if phase.objective == "mlm" else None,
                        "tokens_seen": step * tps,
                        "frozen_parameters": len(frozen),
                    }
                )
            log(f"phase {phase.name}: {phase.objective}, {phase.steps} steps, {len(frozen)} frozen tensors")
        lr = t_cfg["lr"] * lr_factor(phase, ps)
        set_lr(optimizer, lr)

        step_loss = 0.0
        for micro in range(accum):
            micro_index = step * accum + micro
            idx = batch_indices(len(train), data_seed, micro_index, bs * world)[rank * bs : (rank + 1) * bs]
            gen = _mask_generator(seed, micro_index, rank)
            data_hash.update(train.input_ids[idx].numpy().tobytes())  # raw tokens, before any masking
            inputs, labels = make_batch(train, idx, phase.objective, phase.mlm_probability, tok, gen)
            sync = accelerator.no_sync(lm) if micro < accum - 1 else contextlib.nullcontext()
            with sync, accelerator.autocast():
                loss, _, _ = lm(inputs.to(accelerator.device), labels.to(accelerator.device), causal=phase.causal)
                accelerator.backward(loss / accum)
            step_loss += loss.detach().float() / accum
        drop_frozen_grads(frozen)
        trainable = [p for p in lm.parameters() if p.grad is not None]
        grad_norm = accelerator.clip_grad_norm_(trainable, t_cfg["max_grad_norm"] or math.inf)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        done = step + 1
        step_loss = accelerator.reduce(step_loss, reduction="mean").item()
        log_acc = {"loss": log_acc["loss"] + step_loss, "n": log_acc["n"] + 1}
        if done % l_cfg["log_every"] == 0 or done == total_steps:
            now = time.time()
            rate = (done * tps - tokens_last) / max(now - t_last, 1e-9)
            t_last, tokens_last = now, done * tps
            emit(
                {
                    "type": "train",
                    "step": done,
                    "phase": phase.name,
                    "objective": phase.objective,
                    "loss": log_acc["loss"] / log_acc["n"],
                    "lr": lr,
                    "tokens_seen": done * tps,
                    "tokens_per_s": rate,
                    "grad_norm": float(grad_norm),
                    "data_hash": data_hash.hexdigest()[:16],
                }
            )
            log_acc = {"loss": 0.0, "n": 0}
            data_hash = hashlib.sha1()
            if main:
                write_status(
                    run_dir,
                    step=done,
                    total_steps=total_steps,
                    tokens_seen=done * tps,
                    total_tokens=total_steps * tps,
                    phase=phase.name,
                    eta_s=(total_steps - done) * tps / max(rate, 1e-9),
                )
        phase_end = ps + 1 == phase.steps
        if done % l_cfg["eval_every"] == 0 or phase_end:
            emit(
                {
                    "type": "eval",
                    "step": done,
                    "phase": phase.name,
                    "tokens_seen": done * tps,
                    **evaluate(lm, held, cfg, tok, accelerator),
                }
            )
        stop = should_stop()
        if world > 1:
            flag = torch.tensor(float(stop), device=accelerator.device)
            stop = accelerator.reduce(flag, reduction="sum").item() > 0
        if phase_end:
            save(done, tag=f"end-{phase.name}")
        elif done % l_cfg["checkpoint_every"] == 0 or stop:
            save(done)
        if stop and done < total_steps:
            log(f"stopping at step {done}: checkpoint saved, resume with --resume")
            return "cancelled"

    if main:
        tmp = run_dir / ".final.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        hf.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        atomic.replace_dir(tmp, run_dir / "final")
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return "done"

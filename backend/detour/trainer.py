"""The training loop: one screen, every phase of every recipe (``recipe.py`` says what the phases are).

``run_training`` runs unchanged on one CPU and under ``accelerate launch`` (DDP over gloo/nccl; FSDP2 on GPUs
when ``train.fsdp`` asks, refused where accelerate would not shard). Data order, masks and LR are pure functions
of the global step, so a resumed run reproduces the uninterrupted one step for step. Checkpoints are written in the
background (``checkpoint.Checkpointer``); a compiled encoder keeps one graph per attention kind and mode (compiling).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from backend import objectives
from backend.core import atomic
from backend.core.errors import DataError
from backend.core.machine import cpu_name
from backend.detour.encoder_lm import IGNORE, EncoderLM
from backend.detour.recipe import (
    Phase,
    build_optimizer,
    build_phases,
    drop_frozen_grads,
    locate,
    set_lr,
    tokens_per_step,
)
from backend.engine import checkpoint, compiling, divergence, finite, rates, resume_guard, throughput, trackers
from backend.engine.data import batch_indices
from backend.engine.models import transformer_blocks
from backend.engine.precision import from_mixed, full_state_dict, make_accelerator
from backend.engine.run_home import RunHome
from backend.engine.rundir import read_metrics, write_status
from backend.engine.tokenstore import open_corpus

EVAL_MASK_SEED = 4321  # the held-out MLM curve uses the same masks in every run


def run_training(cfg: dict, home: RunHome, hf_model, tokenizer, resume: bool, should_stop, log=print) -> str:
    """Train ``hf_model`` through the recipe's phases in the folder ``home`` (followed if moved): 'done'/'cancelled'."""
    s = _setup(cfg, home.path, hf_model, tokenizer, log, resume, home)
    with s.checkpoints:  # the run reports its state only once its last checkpoint write has ended (or failed)
        return _train(s, resume, should_stop)


def _train(s: _State, resume: bool, should_stop) -> str:
    s.should_stop = should_stop  # evaluate() looks at it between held-out batches
    step0 = _start_step(s, resume)
    watch = divergence.Watch(s.hf.config.vocab_size, read_metrics(s.run_dir) if step0 else [], step0)
    trackers.start_run(s.accelerator, s.cfg, s.run_dir, resume=step0 > 0, log=s.log)  # logging.report_to, if any
    if step0 == 0 or s.eval_owed:  # where every recipe starts from (the same number for both runs of a pair), or
        ev = evaluate(s)  # the evaluation a cancel interrupted before the checkpoint this resume starts from
        if ev is None:
            s.log("stopping during the held-out evaluation: resume with --resume")
            trackers.finish(s.accelerator)
            return "cancelled"
        ev = finite.check(s.run_dir, step0, "held-out evaluation", **ev)
        watch.see(step0, ev)
        phase0 = s.phases[locate(s.phases, max(step0 - 1, 0))[0]].name
        s.emit({"type": "eval", "step": step0, "phase": phase0, "tokens_seen": step0 * s.tps, **ev})
        s.eval_owed = False
    _emit_machine(s)
    s.lm.train()
    s.split.take()  # the split's intervals start with the first step
    current, frozen = -1, []
    for step in range(step0, s.total_steps):
        pi, ps = locate(s.phases, step)
        phase = s.phases[pi]
        if pi != current:  # a phase starts (or a resume lands inside it): attention, objective, frozen set
            current, frozen = pi, _enter_phase(s, phase, step, first_step=ps == 0)
        lr = s.peak_lr * phase.lr_factor(ps)  # the schedule restarts with each phase; the optimizer state does not
        set_lr(s.optimizer, lr)
        with s.clock.time(f"{phase.objective} training step", step + 1):  # what compiling cost, when compiled
            loss = _train_step(s, phase, step, frozen, should_stop)
        if loss is None:  # stopped between micro-batches: this step is dropped, the last whole one is kept
            if step > step0 and ps != 0 and step % s.log_cfg["checkpoint_every"] != 0:  # not saved yet
                _save(s, step)
            s.log(f"stopping during step {step + 1}: resume with --resume (from step {step})")
            trackers.finish(s.accelerator)
            return "cancelled"
        done = step + 1
        finite.check(s.run_dir, done, "training values", loss=loss, grad_norm=s.grad_norm)
        s.log_acc = {"loss": s.log_acc["loss"] + loss, "n": s.log_acc["n"] + 1}
        if done % s.log_cfg["log_every"] == 0 or done == s.total_steps:
            _log_train(s, phase, done, lr)
        phase_end = ps + 1 == phase.steps
        if done % s.log_cfg["eval_every"] == 0 or phase_end:
            with s.split.part("eval"):
                ev = evaluate(s)
            s.eval_owed = ev is None  # a cancel during it: the checkpoint below owes it to the resume
            if ev is not None:
                ev = finite.check(s.run_dir, done, "held-out evaluation", **ev)
                watch.see(done, ev)
                s.emit({"type": "eval", "step": done, "phase": phase.name, "tokens_seen": done * s.tps, **ev})
        stop = _agree(s, should_stop())
        if phase_end:  # a phase ends with its checkpoint on disk
            with s.split.part("checkpoint"):
                _save(s, done, tag=f"end-{phase.name}")
                s.checkpoints.wait()
            if s.main:  # this machine's rate for a model of this size, when the phase had enough steps
                s.meter.record(phase.objective)
        elif done % s.log_cfg["checkpoint_every"] == 0 or stop:
            with s.split.part("checkpoint"):
                _save(s, done)  # copied to memory now, written while training goes on
        if stop and (done < s.total_steps or s.eval_owed):
            s.log(f"stopping at step {done}: checkpoint saved, resume with --resume")
            trackers.finish(s.accelerator)
            return "cancelled"
    s.checkpoints.wait()
    watch.check(s.run_dir)  # a diverged run fails here: no final/, never done without a word
    _save_final(s)
    return "done"


def _train_step(s: _State, phase: Phase, step: int, frozen: list[torch.nn.Parameter], should_stop=None) -> float | None:
    """One optimizer step over ``grad_accum`` micro-batches; frozen parameters get no update at all. None when a
    stop was asked between micro-batches (the gradients so far are dropped): a cancel takes seconds, not a step."""
    loss_sum = 0.0
    for micro in range(s.accum):
        if micro and should_stop is not None and _agree(s, should_stop()):
            s.optimizer.zero_grad(set_to_none=True)
            return None
        micro_index = step * s.accum + micro
        with s.split.part("data"):  # reading the batch, labels and masks: what a loader worker would do
            idx = batch_indices(len(s.train), s.data_seed, micro_index, s.bs * s.world)
            ids, starts = s.train.rows(idx[s.rank * s.bs : (s.rank + 1) * s.bs])  # a pure function of (seed, step)
            s.data_hash.update(ids.numpy().tobytes())  # raw tokens, before any masking: a pair must match
            gen = torch.Generator().manual_seed((s.seed * 1_000_003 + micro_index) * 1009 + s.rank)
            b = phase.spec.batch(ids, starts, phase.settings, s.tok, gen)  # the objective's inputs and labels
        sync = s.accelerator.no_sync(s.lm) if micro < s.accum - 1 else contextlib.nullcontext()
        with s.split.part("forward_backward"), sync, s.accelerator.autocast():
            loss, _, _ = s.lm(b.inputs.to(s.device), b.labels.to(s.device), causal=_on(b.attention, s.device))
            s.accelerator.backward(loss / s.accum)
        loss_sum += loss.detach().float() / s.accum
    with s.split.part("optimizer"):
        drop_frozen_grads(frozen)
        trainable = [p for p in s.lm.parameters() if p.grad is not None]
        s.grad_norm = s.accelerator.clip_grad_norm_(trainable, s.train_cfg["max_grad_norm"] or math.inf)
        s.optimizer.step()
        s.optimizer.zero_grad(set_to_none=True)
    loss, s.grad_norm = finite.as_floats(s.accelerator.reduce(loss_sum, reduction="mean"), s.grad_norm)  # one sync
    return loss


# --- setup and bookkeeping ---------------------------------------------------------------------------------


@dataclass
class _State:
    cfg: dict
    run_dir: Path
    accelerator: object
    lm: torch.nn.Module
    hf: torch.nn.Module
    optimizer: torch.optim.Optimizer
    tokenizer: object
    train: object
    held: object
    phases: list[Phase]
    tok: objectives.Masking  # what masking objectives need from the tokenizer
    log: object
    checkpoints: checkpoint.Checkpointer
    clock: compiling.CompileClock
    log_acc: dict = field(default_factory=lambda: {"loss": 0.0, "n": 0})
    data_hash: object = field(default_factory=hashlib.sha1)
    grad_norm: object = 0.0
    t_last: float = 0.0
    tokens_last: int = 0
    should_stop: object = None  # the stop flag (a cancel), also looked at between held-out batches
    eval_owed: bool = False  # a cancel interrupted the held-out evaluation of the step the next checkpoint holds
    home: RunHome | None = None  # the run folder held open: followed when renamed (``here``)

    def __post_init__(self):
        t = self.cfg["train"]
        self.train_cfg, self.log_cfg = t, self.cfg["logging"]
        self.main = self.accelerator.is_main_process
        self.world, self.rank = self.accelerator.num_processes, self.accelerator.process_index
        self.device = self.accelerator.device
        self.seed, self.accum, self.peak_lr, self.bs = t["seed"], t["grad_accum"], t["lr"], t["batch_size"]
        self.data_seed = self.seed if t["data_seed"] is None else t["data_seed"]
        self.tps = tokens_per_step(self.cfg, self.world)
        self.total_steps = sum(p.steps for p in self.phases)
        self.split = throughput.StepSplit(self.device)
        self.precision = from_mixed(self.accelerator.mixed_precision)
        self.peak = throughput.peak_flops(self.precision, self.device)  # (FLOP/s of one process, where from)
        config, seq = self.hf.config, t["seq_len"]
        self.flops = {
            p.name: throughput.flops_per_token(config, seq, p.spec.predicted_share(p.settings)) for p in self.phases
        }  # per phase: mask rates differ
        self.meter = rates.PhaseRates(sum(p.numel() for p in self.hf.parameters()), self.precision, self.device.type,
                                      seq, self.bs, self.world, torch.get_num_threads())  # fmt: skip
        self.evaluated = [o for o in objectives.all_objectives()
                          if o.always_evaluated or o.name in {p.objective for p in self.phases}]  # fmt: skip

    def here(self) -> Path:  # the run folder where it is now, asked before each write (run_home.py)
        self.run_dir = self.home.here()
        return self.run_dir

    def emit(self, row: dict) -> None:
        if self.main:
            atomic.append_jsonl(self.here() / "metrics.jsonl", {**row, "time": time.time()}, make_parents=False)
            trackers.log_row(self.accelerator, row)  # the same row to TensorBoard, trackio, ... (report_to)


def _setup(cfg: dict, run_dir: Path, hf_model, tokenizer, log, resume: bool, home: RunHome) -> _State:
    t = cfg["train"]
    accelerator = make_accelerator(
        t["precision"], fsdp=t["fsdp"], **trackers.accelerator_args(cfg["logging"]["report_to"], run_dir)
    )
    world = accelerator.num_processes
    torch.manual_seed(t["seed"])
    with accelerator.main_process_first():  # one process builds the token store; the others open it
        train, held, info = open_corpus(
            cfg["data"], tokenizer, t["seq_len"], log=log if accelerator.is_main_process else lambda _: None
        )
    if len(train) < t["batch_size"] * world:
        raise DataError(
            f"data.corpus: {len(train)} training sequences of {t['seq_len']} tokens, fewer than one batch "
            f"({t['batch_size'] * world}); use more text, a smaller train.batch_size or a shorter train.seq_len"
        )
    phases = build_phases(cfg, world, num_layers=len(transformer_blocks(hf_model)))
    tok = objectives.masking_of(tokenizer)
    lm = EncoderLM(hf_model)
    compiled = compiling.resolve_compile(t["compile"], fsdp=t["fsdp"])[0]  # train_run has resolved auto already
    kernels = compiling.compile_encoder(lm) if compiled else None  # in place: parameter names stay HF's
    optimizer = build_optimizer(hf_model, t)  # the one optimizer of every phase
    lm, optimizer = accelerator.prepare(lm, optimizer)
    writer = checkpoint.Checkpointer(accelerator, lm, optimizer, tokenizer, home.anchor(),
                                     cfg["logging"]["keep_checkpoints"], log=log, describe=home.real)  # fmt: skip
    clock = compiling.CompileClock(compiled, log, home.anchor() if accelerator.is_main_process else None)  # moves too
    s = _State(cfg, run_dir, accelerator, lm, accelerator.unwrap_model(lm).hf_model, optimizer, tokenizer, train,
               held, phases, tok, log, writer, clock, home=home)  # fmt: skip
    if s.main:
        info = resume_guard.data_info(s.here(), info, resume)  # a resume keeps what trained (or refuses)
        atomic.write_json(s.here() / "data_info.json", info, make_parents=False)
        log(f"data: {info}")
        if info.get("skipped_cells"):  # the user asked (data.skip_non_text): say what was left out, every start
            n = sum(info["skipped_cells"].values())
            kinds = ", ".join(f"{v} {k}" for k, v in info["skipped_cells"].items())
            log(f"data: skipped {n} corpus cells that are not text ({kinds}), as data.skip_non_text asks")
        log("phases: " + ", ".join(f"{p.name}={p.objective}x{p.steps} steps" for p in phases)
            + f"; {s.tps} tokens/step" + (f"; encoder compiled (torch.compile, kernels cached in {kernels})"
                                           if compiled else ""))  # fmt: skip
    return s


def _start_step(s: _State, resume: bool) -> int:
    """0, or the step of the newest good checkpoint (whose metrics rows after it are dropped)."""
    step = 0
    found = checkpoint.latest_good(s.run_dir, log=s.log) if resume else None
    if resume and found is None:  # (every checkpoint damaged: latest_good refuses)
        s.log("resume: no checkpoint yet, starting from the beginning")
    if found is not None:
        ck, state = found
        s.accelerator.load_state(str(ck / "state"))
        step, s.log_acc = state["step"], state.get("log_acc", s.log_acc)
        s.eval_owed = bool(state.get("eval_owed"))
        s.log(f"resume: from {ck.name} (step {step}, {state['tokens_seen']} tokens)")
    if s.main:  # a fresh run starts an empty log; a resumed one drops rows logged after its checkpoint
        rows = [r for r in read_metrics(s.run_dir) if r.get("step", 0) <= step] if step else []
        atomic.write_text(s.here() / "metrics.jsonl", "".join(atomic.json_line(r) for r in rows), make_parents=False)
    s.t_last, s.tokens_last = time.time(), step * s.tps
    if s.main:  # where the run stands from its first moment (a resume: its checkpoint's step, not the last logged)
        write_status(s.here(), step=step, total_steps=s.total_steps, tokens_seen=step * s.tps,
                     total_tokens=s.total_steps * s.tps, eta_s=None)  # fmt: skip
    return step


def _enter_phase(s: _State, phase: Phase, step: int, first_step: bool) -> list[torch.nn.Parameter]:
    named = dict(s.hf.named_parameters())
    frozen = [named[n] for n in sorted(phase.frozen_names(s.hf))]
    if first_step:
        s.emit({"type": "phase", "step": step, "phase": phase.name, "objective": phase.objective,
                "attention": phase.attention, **{k: phase.settings.get(k) for k in objectives.setting_names()},
                "tokens_seen": step * s.tps, "frozen_parameters": len(frozen)})  # fmt: skip
    s.log(f"phase {phase.name}: {phase.objective}, {phase.steps} steps, {len(frozen)} frozen tensors")
    return frozen


def _log_train(s: _State, phase: Phase, done: int, lr: float) -> None:
    acc = s.log_acc
    now = time.time()
    tokens = done * s.tps - s.tokens_last
    rate = tokens / max(now - s.t_last, 1e-9)
    s.meter.add(phase.objective, tokens, now - s.t_last, tokens // s.tps)
    s.t_last, s.tokens_last = now, done * s.tps
    split = s.split.take()
    mfu, s.peak = throughput.bounded_mfu(
        rate * s.flops[phase.name] / s.world, s.peak, s.precision, s.device, f"run {s.run_dir.name} at step {done}"
    )  # a beaten peak is raised: MFU <= 1
    s.emit({"type": "train", "step": done, "phase": phase.name, "objective": phase.objective,
            "loss": acc["loss"] / acc["n"], "lr": lr, "tokens_seen": done * s.tps, "tokens_per_s": rate,
            "grad_norm": float(s.grad_norm), "data_hash": s.data_hash.hexdigest()[:16], "mfu": mfu,
            "peak_flops": s.peak[0], "peak_source": s.peak[1], "time_split": split})  # fmt: skip
    s.log(f"step {done}/{s.total_steps} {phase.name} ({phase.objective}): loss {acc['loss'] / acc['n']:.4f}, "
          f"{rate:,.0f} tok/s, {throughput.format_mfu(mfu, *s.peak)}; {throughput.format_split(split)}")  # fmt: skip
    s.log_acc, s.data_hash = {"loss": 0.0, "n": 0}, hashlib.sha1()
    if s.main:
        write_status(s.here(), step=done, total_steps=s.total_steps, tokens_seen=done * s.tps,
                     total_tokens=s.total_steps * s.tps, phase=phase.name,
                     eta_s=(s.total_steps - done) * s.tps / max(rate, 1e-9))  # fmt: skip


def _emit_machine(s: _State) -> None:
    """What the doctor needs to judge the rates: device, precision, the peak and FLOPs per token per objective; and
    which CPU (and GPU) it ran on, for the model card."""
    gpu = torch.cuda.get_device_name(s.device) if s.device.type == "cuda" else None
    s.emit({"type": "machine", "step": s.tokens_last // s.tps, "device": str(s.device), "world": s.world,
            "precision": s.precision, "peak_flops": s.peak[0], "peak_source": s.peak[1], "flops_per_token": s.flops,
            "parameters": sum(p.numel() for p in s.hf.parameters()), "threads": torch.get_num_threads(),
            "bf16_supported": s.device.type == "cuda" and torch.cuda.is_bf16_supported(), "cpu": cpu_name(),
            "gpu": gpu})  # fmt: skip


def _agree(s: _State, stop: bool) -> bool:
    """Every process stops at the same step if any was asked to."""
    if s.world == 1:
        return stop
    flag = torch.tensor(float(stop), device=s.device)
    return s.accelerator.reduce(flag, reduction="sum").item() > 0


def _save(s: _State, step: int, tag: str | None = None) -> None:
    finite.check_weights(s.accelerator, s.hf, s.run_dir, step)  # every checkpoint is one a resume can go on from
    state = {"step": step, "tokens_seen": step * s.tps, "phase": s.phases[locate(s.phases, max(step - 1, 0))[0]].name,
             "tag": tag, "log_acc": s.log_acc, "total_steps": s.total_steps, "eval_owed": s.eval_owed}  # fmt: skip
    s.checkpoints.save(step, state)


def _save_final(s: _State) -> None:
    s.checkpoints.wait()
    finite.check_weights(s.accelerator, s.hf, s.run_dir, s.total_steps)
    full = full_state_dict(s.accelerator, s.lm)  # FSDP: gathered on every rank first
    if s.main:  # through the folder held open: a move meanwhile is followed
        checkpoint.write_final(s.home.anchor(), s.hf, s.tokenizer, full)
    s.accelerator.wait_for_everyone()
    trackers.finish(s.accelerator)
    s.accelerator.end_training()


@torch.no_grad()
def evaluate(s: _State) -> dict | None:
    """Held-out loss of each objective measured in every run (MLM at 15% with fixed masks, comparable across
    recipes; next-token) and of each other objective the run trains: ``eval_<name>_loss`` (and accuracy where the
    objective asks), at the objective's fixed held-out settings and masks; None when a stop was asked between
    held-out batches (a cancel takes seconds, not the whole evaluation).

    Batches have the training batch's shape, so a compiled encoder meets no new shape: a last partial batch is
    filled up with copies of its first row whose labels are all ignored (the numbers are those of the rows alone)."""
    model = s.accelerator.unwrap_model(s.lm)
    model.eval()
    bs = s.train_cfg["batch_size"]
    n = min(s.log_cfg["eval_batches"] * bs, len(s.held))
    sums = {o.name: [0.0, 0, 0] for o in s.evaluated}  # loss x count, count, right
    with s.clock.time("held-out evaluation"):
        for i in range(0, n, bs):
            if s.should_stop is not None and _agree(s, s.should_stop()):
                model.train()
                return None
            ids, starts = s.held.rows(torch.arange(i, min(i + bs, n)))
            for o in s.evaluated:
                g = torch.Generator().manual_seed(EVAL_MASK_SEED + i)  # the same masks in every run
                inputs, labels, attention = _full_batch(o.batch(ids, starts, o.held_out, s.tok, g), bs)
                attention = _on(attention, s.device)  # per-row prefix lengths go where the masks are built
                with s.accelerator.autocast():
                    loss, correct, count = model(inputs.to(s.device), labels.to(s.device), causal=attention)
                sums[o.name][0] += loss.item() * count
                sums[o.name][1] += count
                sums[o.name][2] += int(correct) if o.accuracy else 0
    model.train()
    out = {}
    for o in s.evaluated:
        loss, count, right = sums[o.name]
        out[f"eval_{o.name}_loss"] = loss / max(count, 1)
        if o.accuracy:
            out[f"eval_{o.name}_accuracy"] = right / max(count, 1)
    return out


def _on(attention, device):
    """The attention of a batch on the model's device (per-row prefix lengths are a tensor)."""
    return attention.to(device) if isinstance(attention, torch.Tensor) else attention


def _full_batch(b: objectives.Batch, bs: int) -> tuple[torch.Tensor, torch.Tensor, object]:
    """``bs`` rows: a short batch gets copies of its first row, labelled nowhere (they add nothing to the loss)."""
    inputs, labels, attention = b.inputs, b.labels, b.attention
    short = bs - len(inputs)
    if short <= 0:
        return inputs, labels, attention
    if isinstance(attention, torch.Tensor):
        attention = torch.cat([attention, attention[:1].expand(short)])
    return torch.cat([inputs, inputs[:1].expand(short, -1)]), torch.cat([labels, torch.full_like(labels[:1], IGNORE)
                                                                          .expand(short, -1)]), attention  # fmt: skip

"""Checkpoints: written to a temp dir, sealed with a manifest, then renamed into place.

A crash while writing leaves only a ``.tmp-*`` folder (ignored, cleaned next time); the previous
checkpoint stays loadable. On resume every file is checked against the manifest (size + sha256)
so a truncated or corrupted file is named precisely, and we fall back to the previous checkpoint.

``Checkpointer`` takes the writing off the training's critical path: at the step boundary it copies what a
checkpoint holds to CPU memory (weights, optimizer state; each rank's RNG states are written there and then, a few
KB), and a background thread writes, seals and renames the folder while training goes on. The files and their names
are those ``accelerator.save_state`` and ``save_pretrained`` write, so old and new checkpoints load the same way.
"""

from __future__ import annotations

import copy
import errno
import hashlib
import json
import os
import shutil
import threading
from pathlib import Path

import torch

from backend.core import atomic
from backend.core.errors import CheckpointError
from backend.engine.precision import full_state_dict
from backend.engine.rundir import list_checkpoints

MANIFEST = "manifest.json"
COMPLETE = "COMPLETE"  # written after the manifest: a folder without it is ignored
CARD = "README.md"  # a run's model card lies beside the seal, never in it: evaluations add results to it later
BACKGROUND = True  # False: every checkpoint is written before training goes on (bench/bench_checkpoint.py compares)


def file_sha256(path: Path) -> str:
    """A file's SHA-256, read in 1 MiB blocks (the seal's, the export's read-back and the evaluations' identity)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(ckpt: Path) -> None:
    files = {
        str(p.relative_to(ckpt)): {"size": p.stat().st_size, "sha256": file_sha256(p)}
        for p in sorted(ckpt.rglob("*"))
        if p.is_file() and str(p.relative_to(ckpt)) not in (MANIFEST, COMPLETE, CARD)
    }
    atomic.write_json(ckpt / MANIFEST, files)


def verify(ckpt: Path, what: str | None = None) -> None:
    """Raise CheckpointError naming the first missing, truncated or altered file (``what`` starts the message;
    a run's sealed ``final/`` is checked here too)."""
    what = what or f"checkpoint {ckpt}"
    mpath = ckpt / MANIFEST
    if not (ckpt / COMPLETE).exists():
        raise CheckpointError(f"{what}: incomplete (no COMPLETE marker)")
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{what}: unreadable {mpath.name} ({exc})") from exc
    if problem := manifest_problem(manifest, ckpt):  # '{}' verified nothing and let altered weights load
        raise CheckpointError(f"{what}: {mpath} is not what the seal writes ({problem}); treated as damaged")
    for rel, meta in manifest.items():
        f = ckpt / rel
        if not f.exists():
            raise CheckpointError(f"{what}: missing file {f}")
        if f.stat().st_size != meta["size"]:
            size = f.stat().st_size
            raise CheckpointError(f"{what}: file {f} is truncated or altered ({size} bytes, expected {meta['size']})")
        if file_sha256(f) != meta["sha256"]:
            raise CheckpointError(f"{what}: file {f} is corrupt (sha256 mismatch)")


WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".pkl")  # what a loader would read: never unverified


def manifest_problem(manifest: object, folder: Path) -> str | None:
    """What makes ``manifest`` other than what ``write_manifest`` writes, or None: a non-empty mapping of relative
    paths inside ``folder`` to ``{"size": int, "sha256": 64 hex}`` that lists every weight file in the folder."""
    if not isinstance(manifest, dict):
        return f"a {type(manifest).__name__}, not a mapping of files"
    if not manifest:
        return "it lists no file"
    for rel, meta in manifest.items():
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            return f"entry {rel!r} points outside the folder"
        ok = isinstance(meta, dict) and type(meta.get("size")) is int and isinstance(meta.get("sha256"), str)
        if not ok or len(meta["sha256"]) != 64:
            return f"entry {rel!r} has no size and sha256"
    unlisted = [
        str(p.relative_to(folder)) for p in sorted(folder.rglob("*"))
        if p.suffix in WEIGHTS and p.is_file() and str(p.relative_to(folder)) not in manifest
    ]  # fmt: skip
    return f"weights {unlisted[0]} are not listed" if unlisted else None


def seal(folder: Path, note: str) -> None:
    """The manifest (size and sha256 of every file), then the marker: what ``verify`` checks. A checkpoint and a
    run's ``final/`` are sealed alike, before they are renamed into place."""
    write_manifest(folder)
    atomic.write_text(folder / COMPLETE, note)


def _paths(run_dir: Path, step: int) -> tuple[Path, Path]:
    ck_root = Path(run_dir) / "checkpoints"
    return ck_root / f"step-{step:08d}", ck_root / f".tmp-step-{step:08d}"


def _seal(tmp: Path, final: Path, step: int, state: dict, keep: int) -> None:
    """Trainer state, manifest, COMPLETE, rename into place; then (only then) prune older checkpoints."""
    atomic.write_json(tmp / "trainer_state.json", state)
    seal(tmp, f"step {step}\n")
    if final.exists():
        atomic.replace_dir(tmp, final)
    else:
        tmp.rename(final)
    _prune(final.parent, keep)


def _make_tmp(tmp: Path) -> None:
    """A fresh ``.tmp-step-N`` in the run's ``checkpoints/``; the run folder itself is never made here (one moved
    away meanwhile is not recreated: ``run_home.py``)."""
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(exist_ok=True)
    (tmp / "state").mkdir(parents=True)


def save(accelerator, lm, tokenizer, run_dir: Path, step: int, state: dict, keep: int) -> Path:
    """Save model (HF format), Accelerate state and trainer state for ``step``, synchronously. Collective call."""
    final, tmp = _paths(run_dir, step)
    if accelerator.is_main_process:
        _make_tmp(tmp)
    accelerator.wait_for_everyone()
    try:
        accelerator.save_state(str(tmp / "state"), safe_serialization=True)
        full = full_state_dict(accelerator, lm)  # FSDP: gathered on every rank first
        if accelerator.is_main_process:
            hf = accelerator.unwrap_model(lm).hf_model
            hf.save_pretrained(tmp / "model", safe_serialization=True, state_dict=full)
            tokenizer.save_pretrained(tmp / "model")
            _seal(tmp, final, step, state, keep)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)  # a half-written checkpoint would keep a full disk full
        if full_disk := no_space(f"checkpoint {final}", final, _bytes(lm.state_dict()) * CHECKPOINT_COPIES, exc):
            raise full_disk from exc
        raise
    accelerator.wait_for_everyone()
    return final


CHECKPOINT_COPIES = 4  # a checkpoint holds the weights about four times: model/, state/, the optimizer's two moments


def _bytes(obj) -> int:
    """Bytes of the tensors in ``obj`` (nested dicts and lists), what writing them takes on disk, about."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_bytes(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(_bytes(v) for v in obj)
    return 0


def no_space(what: str, where: Path, needed: int, exc: BaseException) -> CheckpointError | None:
    """A write that failed for want of space (however the library wrapped it), as one line naming what was being
    written, where, the bytes it needed and what the disk had; None for any other failure."""
    from backend.core import faults

    if faults.machine_fault(exc) not in faults.NO_SPACE:
        return None
    try:
        free = f"{shutil.disk_usage(where.parent if where.parent.exists() else where.anchor).free:,} bytes free"
    except OSError:
        free = "free space unknown"
    return CheckpointError(
        f"writing {what} failed: {os.strerror(errno.ENOSPC)} (it needs about {needed:,} bytes; {free} there); its "
        "partial files were removed"
    )


def write_final(run_dir: Path, hf, tokenizer, state_dict: dict) -> None:
    """The run's ``final/``: written into ``.final.tmp``, sealed as a checkpoint is, renamed into place; a failed
    write removes its temporary folder (on a full disk it would keep the disk full) and says what it needed."""
    tmp = run_dir / ".final.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        hf.save_pretrained(tmp, safe_serialization=True, state_dict=state_dict)
        tokenizer.save_pretrained(tmp)
        seal(tmp, "sealed\n")  # loaders verify final/ against its manifest
        atomic.replace_dir(tmp, run_dir / "final")
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if full_disk := no_space(f"the final model {run_dir / 'final'}", run_dir, _bytes(state_dict), exc):
            raise full_disk from exc
        raise


def _cpu_copy(obj, memo: dict):
    """``obj`` (nested dicts/lists of tensors) with every tensor copied to CPU memory. Tensors that share storage
    (tied weights, the same weight under two names) share their copy, so writers that drop aliases still do."""
    if isinstance(obj, torch.Tensor):
        key = (obj.untyped_storage().data_ptr(), obj.storage_offset(), obj.shape, obj.stride(), obj.dtype)
        if key not in memo:
            memo[key] = obj.detach().to("cpu", copy=True)
        return memo[key]
    if isinstance(obj, dict):
        return type(obj)((k, _cpu_copy(v, memo)) for k, v in obj.items())
    if isinstance(obj, list | tuple):
        return type(obj)(_cpu_copy(v, memo) for v in obj)
    return copy.deepcopy(obj)


class Checkpointer:
    """Checkpoints written in a background thread, one at a time, each still sealed and renamed atomically.

    ``save`` (a collective call) returns once the state is copied; the next ``save``, ``wait`` and leaving the
    ``with`` block wait for the write in flight and raise its error, if any. Under FSDP (sharded weights and
    optimizer state, which accelerate writes in its own formats) ``save`` writes synchronously as before.
    """

    def __init__(self, accelerator, lm, optimizer, tokenizer, run_dir: Path, keep: int, log=print, background=None,
                 describe=str):  # fmt: skip
        """``describe``: a path in a message as the user knows it (``RunHome.real``: ``run_dir`` may be the folder
        held open, ``/proc/self/fd/N``)."""
        self.accelerator, self.lm, self.optimizer, self.tokenizer = accelerator, lm, optimizer, tokenizer
        self.run_dir, self.keep, self.log, self.describe = Path(run_dir), keep, log, describe
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for stale in (self.run_dir / "checkpoints").glob(".tmp-step-*"):  # a process that died mid-write left it
            shutil.rmtree(stale, ignore_errors=True)  # never loadable, and on a full disk it kept the disk full
        self._writing: tuple[Path, int] | None = None  # the checkpoint in flight and the bytes it holds
        self.background = BACKGROUND and accelerator.distributed_type != "FSDP" if background is None else background
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def save(self, step: int, state: dict) -> Path:
        self.wait()  # one write in flight at a time
        if not self.background:
            return save(self.accelerator, self.lm, self.tokenizer, self.run_dir, step, state, self.keep)
        from accelerate.checkpointing import save_accelerator_state

        acc = self.accelerator
        final, tmp = _paths(self.run_dir, step)
        if acc.is_main_process:
            _make_tmp(tmp)
        acc.wait_for_everyone()
        # this rank's RNG states (and fp16 loss scale) as they are now, by accelerate's own writer: a few KB
        save_accelerator_state(str(tmp / "state"), [], [], [], [], acc.process_index, acc.step, acc.scaler)
        if acc.is_main_process:
            memo: dict = {}  # weights copied once: accelerate's names, HF's names and tied weights share them
            model = acc.unwrap_model(self.lm)  # what save_state writes (and load_state loads into) under DDP too
            snapshot = {
                "state": _cpu_copy(model.state_dict(), memo),
                "optimizer": _cpu_copy(self.optimizer.state_dict(), memo),
                "hf": _cpu_copy(model.hf_model.state_dict(), memo),
            }
            self._thread = threading.Thread(
                target=self._write, args=(tmp, final, step, copy.deepcopy(state), snapshot), name=f"checkpoint-{step}"
            )
            self._writing = (final, _bytes(snapshot))
        acc.wait_for_everyone()  # every rank's RNG file is in the folder before it is sealed
        if self._thread is not None:
            self._thread.start()
        return final

    def _write(self, tmp: Path, final: Path, step: int, state: dict, snapshot: dict) -> None:
        from accelerate.utils import OPTIMIZER_NAME, SAFE_WEIGHTS_NAME
        from accelerate.utils import save as accelerate_save

        try:
            accelerate_save(snapshot["state"], tmp / "state" / SAFE_WEIGHTS_NAME, safe_serialization=True)
            accelerate_save(snapshot["optimizer"], tmp / "state" / f"{OPTIMIZER_NAME}.bin")
            hf = self.accelerator.unwrap_model(self.lm).hf_model
            hf.save_pretrained(tmp / "model", state_dict=snapshot["hf"])
            self.tokenizer.save_pretrained(tmp / "model")
            _seal(tmp, final, step, state, self.keep)
        except BaseException as exc:  # raised in the training thread by the next save / wait
            shutil.rmtree(tmp, ignore_errors=True)  # a half-written checkpoint would keep a full disk full
            self._error = exc

    def wait(self) -> None:
        """Block until the write in flight (if any) is on disk; raise CheckpointError if it failed."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            exc, self._error = self._error, None
            final, needed = self._writing or (self.run_dir / "checkpoints", 0)
            if full_disk := no_space(f"checkpoint {final}", final, needed, exc):
                raise CheckpointError(self.describe(str(full_disk))) from exc
            raise CheckpointError(self.describe(f"writing a checkpoint failed: {type(exc).__name__}: {exc}")) from exc

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """A run ends (done, cancelled or failing) only once its last checkpoint is written or has failed."""
        try:
            self.wait()
        except CheckpointError as err:
            if exc_type is None:
                raise
            self.log(f"warning: {err}")  # the run is failing already: its own error is the one to report


def _prune(ck_root: Path, keep: int) -> None:
    """Keep the newest ``keep`` periodic checkpoints; phase-end checkpoints are kept for trajectories."""
    periodic = []
    for ck in list_checkpoints(ck_root.parent):
        try:
            tag = json.loads((ck / "trainer_state.json").read_text()).get("tag")
        except (OSError, json.JSONDecodeError):
            tag = None
        if not tag:
            periodic.append(ck)
    for ck in periodic[:-keep] if keep else []:
        shutil.rmtree(ck, ignore_errors=True)
    for stale in ck_root.glob(".tmp-step-*"):
        shutil.rmtree(stale, ignore_errors=True)


def latest_good(run_dir: Path, log=print) -> tuple[Path, dict] | None:
    """Newest checkpoint that passes verification; each bad one is reported and skipped. None when there is no
    checkpoint; CheckpointError when every one is damaged (starting over would rewrite the metrics of the steps they
    hold, and new checkpoints would prune them)."""
    ck_root = Path(run_dir) / "checkpoints"
    candidates = sorted(ck_root.glob("step-*"), reverse=True) if ck_root.exists() else []
    for ck in candidates:
        try:
            verify(ck)
            return ck, _trainer_state(ck)
        except CheckpointError as exc:
            log(f"warning: {exc}; falling back to the previous checkpoint")
    if candidates:
        raise CheckpointError(
            f"resume: no usable checkpoint in {ck_root} ({', '.join(c.name for c in reversed(candidates))} failed "
            "their check: see the warnings above); nothing was changed. To train this run from the beginning, move "
            "its checkpoints folder away and resume again"
        )
    return None


def _trainer_state(ck: Path) -> dict:
    """The checkpoint's trainer state, or CheckpointError when it is not the mapping ``_seal`` writes."""
    try:
        state = json.loads((ck / "trainer_state.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"checkpoint {ck}: unreadable trainer_state.json ({type(exc).__name__})") from exc
    if not isinstance(state, dict) or type(state.get("step")) is not int:
        raise CheckpointError(f"checkpoint {ck}: trainer_state.json is not what the seal writes (no step)")
    return state

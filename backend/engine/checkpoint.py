"""Checkpoints: written to a temp dir, sealed with a manifest, then renamed into place.

A crash while writing leaves only a ``.tmp-*`` folder (ignored, cleaned next time); the previous
checkpoint stays loadable. On resume every file is checked against the manifest (size + sha256)
so a truncated or corrupted file is named precisely, and we fall back to the previous checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from backend.core import atomic
from backend.core.errors import CheckpointError
from backend.engine.precision import full_state_dict
from backend.engine.rundir import list_checkpoints

MANIFEST = "manifest.json"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(ckpt: Path) -> None:
    files = {
        str(p.relative_to(ckpt)): {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(ckpt.rglob("*"))
        if p.is_file() and p.name not in (MANIFEST, "COMPLETE")
    }
    atomic.write_json(ckpt / MANIFEST, files)


def verify(ckpt: Path, what: str | None = None) -> None:
    """Raise CheckpointError naming the first missing, truncated or altered file (``what`` starts the message;
    a run's sealed ``final/`` is checked here too)."""
    what = what or f"checkpoint {ckpt}"
    mpath = ckpt / MANIFEST
    if not (ckpt / "COMPLETE").exists():
        raise CheckpointError(f"{what}: incomplete (no COMPLETE marker)")
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{what}: unreadable {mpath.name} ({exc})") from exc
    for rel, meta in manifest.items():
        f = ckpt / rel
        if not f.exists():
            raise CheckpointError(f"{what}: missing file {f}")
        if f.stat().st_size != meta["size"]:
            size = f.stat().st_size
            raise CheckpointError(f"{what}: file {f} is truncated or altered ({size} bytes, expected {meta['size']})")
        if _sha256(f) != meta["sha256"]:
            raise CheckpointError(f"{what}: file {f} is corrupt (sha256 mismatch)")


def save(accelerator, lm, tokenizer, run_dir: Path, step: int, state: dict, keep: int) -> Path:
    """Save model (HF format), Accelerate state and trainer state for ``step``. Collective call."""
    ck_root = Path(run_dir) / "checkpoints"
    final = ck_root / f"step-{step:08d}"
    tmp = ck_root / f".tmp-step-{step:08d}"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp / "state"), safe_serialization=True)
    full = full_state_dict(accelerator, lm)  # FSDP: gathered on every rank first
    if accelerator.is_main_process:
        hf = accelerator.unwrap_model(lm).hf_model
        hf.save_pretrained(tmp / "model", safe_serialization=True, state_dict=full)
        tokenizer.save_pretrained(tmp / "model")
        atomic.write_json(tmp / "trainer_state.json", state)
        write_manifest(tmp)
        atomic.write_text(tmp / "COMPLETE", f"step {step}\n")
        if final.exists():
            atomic.replace_dir(tmp, final)
        else:
            tmp.rename(final)
        _prune(ck_root, keep)
    accelerator.wait_for_everyone()
    return final


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
    """Newest checkpoint that passes verification; each bad one is reported and skipped."""
    ck_root = Path(run_dir) / "checkpoints"
    candidates = sorted(ck_root.glob("step-*"), reverse=True) if ck_root.exists() else []
    for ck in candidates:
        try:
            verify(ck)
            return ck, json.loads((ck / "trainer_state.json").read_text())
        except CheckpointError as exc:
            log(f"warning: {exc}; falling back to the previous checkpoint")
    return None

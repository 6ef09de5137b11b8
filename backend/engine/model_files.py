"""Is a model folder whole? Checked before its weights are loaded and before a run that starts from it is created.

Weights are read only from safetensors (one file, or an index and its shards). A truncated or foreign file is
found from its header alone, which is cheap enough for every load and for the Launch form's checks as you type.
A folder this project wrote -- a run's ``final/`` or a checkpoint -- is sealed with ``manifest.json`` (size and
sha256 of every file: the checkpoints' format and code, ``checkpoint.seal`` / ``verify``), so a change
that keeps the size is found too. A ``final/`` written before it was sealed still loads, with a note saying so.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from backend.core.errors import CheckpointError, ModelSpecError
from backend.engine import checkpoint

log = logging.getLogger(__name__)


def weight_files(model_dir: Path, label: str) -> list[Path]:
    """The safetensors files a model folder's weights are in (the shards an index names, or every file)."""
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ModelSpecError(f"model '{label}': unreadable {index} ({type(exc).__name__}: {exc})") from exc
        return [model_dir / s for s in shards]
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        others = sorted(p.name for p in model_dir.glob("*.bin")) + sorted(p.name for p in model_dir.glob("*.pt"))
        found = f" (found {', '.join(others)}: convert it to safetensors)" if others else ""
        raise ModelSpecError(
            f"model '{label}': no .safetensors weights in {model_dir}{found}; only safetensors weights are loaded"
        )
    return files


def check_weights(model_dir: Path, label: str) -> None:
    """Every weight file exists and its size matches its header (a truncated file fails here, cheaply)."""
    from safetensors import SafetensorError, safe_open

    for f in weight_files(model_dir, label):
        if not f.is_file():
            raise ModelSpecError(f"model '{label}': weight file {f} is missing (named by the safetensors index)")
        try:
            with safe_open(str(f), framework="pt"):
                pass
        except (SafetensorError, OSError) as exc:
            raise ModelSpecError(f"model '{label}': weight file {f} is truncated or not safetensors ({exc})") from exc


def sealed_folder(model_dir: Path) -> Path | None:
    """The folder whose manifest covers ``model_dir``: itself (a run's ``final/``), or the checkpoint it is the
    ``model/`` of; None when neither has one."""
    if (model_dir / checkpoint.MANIFEST).exists():
        return model_dir
    if model_dir.name == "model" and (model_dir.parent / checkpoint.MANIFEST).exists():
        return model_dir.parent
    return None


def _written_by_a_run(model_dir: Path) -> bool:
    run = model_dir.parent
    return model_dir.name == "final" and ((run / "config.yaml").exists() or (run / "status.json").exists())


def verify_seal(model_dir: Path, label: str, checksums: bool = True) -> str | None:
    """A sealed folder compared with its manifest (reads every file once; ``checksums`` False skips it); a run's
    ``final/`` written before it was sealed loads with a note, returned. The weights' headers were checked when the
    name was resolved (``model_ref.resolve_model``)."""
    folder = sealed_folder(model_dir)
    if folder is None:
        if not _written_by_a_run(model_dir):
            return None  # a bundled or downloaded model: no manifest is expected
        note = (
            f"model '{label}': {model_dir} has no {checkpoint.MANIFEST} (written before final/ was sealed): "
            "loaded without a checksum"
        )
        log.warning(note)
        return note
    if checksums:
        try:
            checkpoint.verify(folder, what=f"model '{label}'")
        except CheckpointError as exc:
            raise ModelSpecError(
                f"{exc}; it no longer matches the manifest written with it, so it is not loaded"
            ) from exc
    return None


def check(model_dir: str | Path, label: str, checksums: bool = True) -> str | None:
    """Raise ModelSpecError naming the file when a local model folder is not whole. ``checksums``: also compare
    a sealed folder with its manifest (reads every file once). Returns a note for an unsealed run model."""
    model_dir = Path(model_dir)
    check_weights(model_dir, label)
    return verify_seal(model_dir, label, checksums)


def parameter_count(model_dir: Path) -> int | None:
    """How many parameters the folder's weights hold, from the safetensors headers alone (no tensor is read; a
    tied matrix is stored, and counted, once). None when the headers cannot be read."""
    from safetensors import SafetensorError, safe_open

    total = 0
    try:
        for f in weight_files(model_dir, str(model_dir)):
            with safe_open(str(f), framework="pt") as st:
                for k in st.keys():  # noqa: SIM118 (a safe_open handle is no mapping)
                    n = 1
                    for d in st.get_slice(k).get_shape():
                        n *= d
                    total += n
    except (ModelSpecError, SafetensorError, OSError):
        return None
    return total


def human_count(n: int | None) -> str:
    """5_512_000 -> '5.5M' (parameters as a model's size is said), '?' when unknown."""
    if n is None:
        return "?"
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)

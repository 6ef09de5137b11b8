"""Which model a score belongs to: its resolved path and the sha256 of its weights, not its display label.

A label is a name a user types; two evaluations into one ``--out`` folder can give the same label to different
models (``--models detour-tiny-en`` then ``--models runs/r1 --labels detour-tiny-en``), and before identities
were recorded the second one reused the first one's finished seeds and credited ``runs/r1`` with the bundled
model's scores. Every model entry in results.json and every seed's metrics.json now carries ``identity``, and a
finished seed or an earlier entry under the same label is reused only when the identity matches.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from backend.core.errors import ConfigError
from backend.engine.checkpoint import file_sha256

_CACHE: dict[tuple, str] = {}  # (path, size, mtime_ns) -> sha256: a model is hashed once per process


def _file_sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _CACHE:
        _CACHE[key] = file_sha256(path)
    return _CACHE[key]


def weights_sha256(model_dir: Path, label: str) -> str:
    """sha256 over the weight files' names and sha256s (one file: that file's own sha256)."""
    from backend.engine.model_files import weight_files

    files = weight_files(model_dir, label)
    if len(files) == 1:
        return _file_sha256(files[0])
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.name}:{_file_sha256(f)}\n".encode())
    return h.hexdigest()


def model_identity(source) -> dict:
    """``{"path", "kind", "sha256"}`` of a resolved ``ModelRef``. A hub model's path is its id, and its sha256
    is that of the cached snapshot when there is one, else None (then the id alone identifies it). A local folder
    without readable weights gets None too: its seeds fail with the loader's own error later."""
    from backend.core.errors import DetourError

    sha = None
    folder = Path(source.path)
    if source.kind == "hub" and source.snapshot:
        folder = Path(source.snapshot)
    elif source.kind == "hub":
        try:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(source.path, local_files_only=True))
        except Exception:  # noqa: BLE001 - not cached: identified by its id
            folder = None
    if folder is not None:
        try:
            sha = weights_sha256(folder, source.spec)
        except (DetourError, OSError):
            sha = None
    return {"path": source.path, "kind": source.kind, "sha256": sha}


def short(identity: dict | None) -> str:
    """``path (sha256 0123456789ab)`` for reports; ``unrecorded`` for results written before identities."""
    if not identity:
        return "unrecorded (written before model identities were recorded)"
    sha = identity.get("sha256")
    return f"{identity.get('path')} (sha256 {sha[:12]})" if sha else f"{identity.get('path')} (no weights hash)"


def same_model(a: dict | None, b: dict | None) -> bool:
    """Same weights when both hashes are known, else the same resolved path."""
    if not a or not b:
        return bool(a is None and b is None)
    if a.get("sha256") and b.get("sha256"):
        return a["sha256"] == b["sha256"]
    return a.get("path") == b.get("path")


def recorded_identity(record: dict) -> dict | None:
    """The identity a results entry or a seed's metrics.json recorded; for one written before identities, what
    it did record (the resolved path) so that a different model under the same label is still caught."""
    if isinstance(record.get("identity"), dict):
        return record["identity"]
    path = record.get("path") or record.get("source_path")
    return {"path": path, "kind": record.get("kind") or record.get("source_kind"), "sha256": None} if path else None


def refuse_relabel(out_dir, label: str, held: dict | None, new: dict) -> None:
    """Raise the one-line error for a label in ``out_dir`` that already names another model."""
    if held is not None and not same_model(held, new):
        raise ConfigError(
            "labels",
            label,
            f"{out_dir} already holds '{label}' for another model, {short(held)}; this one is {short(new)}. "
            "Give it another --labels name, or use another --out folder",
        )

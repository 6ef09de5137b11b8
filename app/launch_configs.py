"""Configs the Launch form saves and loads (``<uploads>/configs``, or an uploaded YAML), and corpora uploaded
into the uploads folder."""

from __future__ import annotations

import copy
import re
import shutil
import time
from pathlib import Path

import yaml

from app import check_path, md_escape, uploads_dir, warn
from app.launch_checks import validate_form
from app.launch_form import config_to_values, kept_note
from backend.core import strict_yaml
from backend.core.errors import ConfigError, DetourError
from backend.engine.config import load_config


def save_config(values: list, base: dict | None = None, overwrite: bool = False) -> tuple[Path | None, str]:
    """Save the form as ``<uploads>/configs/<run name>.yaml``. A saved config of that name is replaced only with
    ``overwrite``; otherwise the message says so and names a free one."""
    res = validate_form(values, deep=False, base=base)
    if not res["ok"]:
        return None, res["message"]
    d = uploads_dir() / "configs"
    d.mkdir(parents=True, exist_ok=True)
    name = res["cfg"]["name"]
    path = d / f"{name}.yaml"
    if path.exists() and not overwrite:
        free = next(f"{name}-{i}" for i in range(2, 10_000) if not (d / f"{name}-{i}.yaml").exists())
        return None, warn(
            f"a saved config named '{name}' already exists: not saved. Tick 'Replace a saved config of the same "
            f"name' to replace it, or change the run name (e.g. '{free}')"
        )
    from backend.core.atomic import write_text

    write_text(path, res["yaml"])
    return path, f"saved config '{md_escape(name)}'" + (" (replaced the one of that name)" if overwrite else "")


def saved_configs() -> list[tuple[str, str]]:
    """The saved configs as (name, path) dropdown choices, newest first: the list shows names, loading gets the
    path. Read again on every call (page load, tab select, a save)."""
    d = uploads_dir() / "configs"
    files = sorted(d.glob("*.yaml"), key=lambda p: p.stat().st_mtime, reverse=True) if d.exists() else []
    return [(p.stem, str(p)) for p in files]


def load_config_file(path: str | None) -> tuple[list | None, str, dict | None]:
    """A YAML file (upload or saved) -> (form values, message, the whole config). The form shows its keys; the
    others (``logging.keep_checkpoints``, ``model.from_scratch``, ...) are kept in the returned config, which the
    form's values go over at launch (they used to fall back to the defaults: a silently different run)."""
    if not path:
        return None, "choose a config file", None
    try:
        p = Path(path)
        if not _is_gradio_upload(p):
            p = check_path(path, "config")
        raw = strict_yaml.load(p.read_text(encoding="utf-8")) or {}  # bounded: a "billion laughs" is refused
        if not isinstance(raw, dict):
            raise ConfigError("config", path, "the top level must be a mapping")
        raw = copy.deepcopy(raw)
        raw.pop("_meta", None)
        cfg = load_config(raw)
    except (DetourError, OSError, yaml.YAMLError) as exc:
        return None, warn(exc), None
    return config_to_values(cfg), f"loaded {Path(path).name}" + kept_note(cfg), cfg


def _is_gradio_upload(p: Path) -> bool:
    """Files Gradio received from the browser live in its cache folder."""
    import os
    import tempfile

    cache = Path(os.environ.get("GRADIO_TEMP_DIR") or Path(tempfile.gettempdir()) / "gradio").resolve()
    return p.resolve().is_relative_to(cache)


def store_upload(path: str | None, max_bytes: int) -> tuple[str | None, str]:
    """Copy an uploaded corpus into the uploads folder (it must outlive Gradio's cache). -> (new path, message)."""
    if not path:
        return None, ""
    src = Path(path)
    size = src.stat().st_size
    if size > max_bytes:
        return None, f"⚠ upload refused: {size / 1e6:.1f} MB is over the {max_bytes / 1e6:.0f} MB limit"
    if src.suffix.lower() not in (".txt", ".jsonl", ".json", ".csv", ".parquet"):
        return None, f"⚠ upload refused: '{src.suffix}' files are not a corpus (.txt, .jsonl, .csv, .parquet)"
    dst_dir = uploads_dir() / "corpora"
    dst_dir.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", src.name)
    from backend.core.catalogue import first_free

    dst = first_free(dst_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-{safe}")  # two uploads of one name in a second
    shutil.copyfile(src, dst)
    return str(dst), f"stored {dst.name} ({size / 1e3:.0f} kB)"

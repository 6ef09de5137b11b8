"""Find train/dev/test files in a task folder; carve a dev split when there is none; subsample."""

from __future__ import annotations

import random
from pathlib import Path

from backend.core.errors import DataError

SPLIT_NAMES = {
    "train": ("train", "training"),
    "dev": ("dev", "devel", "validation", "valid", "val"),
    "test": ("test",),
}
DEV_FRACTION = 0.1  # of train, when the folder has no dev file
CARVE_SEED = 0  # fixed: every model and seed sees the same train/dev partition


def split_key(keys, split: str) -> str | None:
    """The name among ``keys`` (a hub DatasetDict's splits, any case) that stands for ``split``."""
    names = {str(k).lower(): k for k in keys}
    return next((names[s] for s in SPLIT_NAMES[split] if s in names), None)


def find_split_files(folder: str | Path, extensions: tuple[str, ...], what: str) -> dict[str, Path | None]:
    """``{"train": Path, "dev": Path | None, "test": Path}`` from a folder of ``<split>.<ext>`` files.

    ``dev`` may be missing (the caller carves one from train); train and test may not.
    """
    folder = Path(folder)
    if not folder.exists():
        raise DataError(f"{what} data '{folder}': no such folder")
    if not folder.is_dir():
        raise DataError(
            f"{what} data '{folder}': is a file; give a folder holding train/dev/test files ({', '.join(extensions)})"
        )
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    found: dict[str, Path | None] = {}
    for split, stems in SPLIT_NAMES.items():
        hits = [p for p in files if p.suffix.lower() in extensions and p.stem.lower() in stems]
        if len(hits) > 1:
            raise DataError(
                f"{what} data '{folder}': several {split} files ({', '.join(p.name for p in hits)}); keep one"
            )
        found[split] = hits[0] if hits else None
    for split in ("train", "test"):
        if found[split] is None:
            names = ", ".join(p.name for p in files) or "nothing"
            exts = "|".join(e.lstrip(".") for e in extensions)
            raise DataError(
                f"{what} data '{folder}': no {split} file (found: {names}); expected "
                f"train.{{{exts}}}, dev.{{{exts}}} (or devel/validation) and test.{{{exts}}}"
            )
    return found


def carve_dev(n_train: int) -> tuple[list[int], list[int]]:
    """Deterministic (train_idx, dev_idx) partition of ``range(n_train)`` with ~10% for dev."""
    if n_train < 2:
        raise DataError(f"train split has {n_train} example(s) and there is no dev file: cannot carve a dev split")
    idx = list(range(n_train))
    random.Random(CARVE_SEED).shuffle(idx)
    n_dev = max(1, int(round(n_train * DEV_FRACTION)))
    dev = sorted(idx[:n_dev])
    train = sorted(idx[n_dev:])
    return train, dev


def subsample(n: int, k: int | None, seed: int = 0) -> list[int]:
    """Indices of a deterministic random subset of size ``k`` (all of them when k is None or >= n), in order."""
    if k is None or k >= n:
        return list(range(n))
    if k < 1:
        raise DataError(f"subset size must be >= 1, got {k}")
    idx = list(range(n))
    random.Random(seed).shuffle(idx)
    return sorted(idx[:k])

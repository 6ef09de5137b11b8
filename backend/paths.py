"""Where things live. One place, so the CLI, the app and the tests agree."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
ASSETS_DIR = REPO_ROOT / "assets"
BUNDLED_MODELS_DIR = ASSETS_DIR / "models"
BUNDLED_TOKENIZER_DIR = ASSETS_DIR / "tokenizer"
DEMO_DIR = ASSETS_DIR / "demo"
DEMO_CORPUS = DEMO_DIR / "bio_corpus.txt"
DEMO_NER_DIR = DEMO_DIR / "ner"
DEFAULT_MODEL = "detour-tiny-en"
# ../shared/data beside the checkout: real public data for tests/benchmarks; never copied in.
SHARED_DATA_DIR = Path(os.environ.get("DETOUR_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


def runs_dir() -> Path:
    """Root of run directories (``DETOUR_RUNS_DIR`` overrides; tests point it at a tmp dir)."""
    return Path(os.environ.get("DETOUR_RUNS_DIR", REPO_ROOT / "runs")).resolve()


def shared_data(name: str) -> Path | None:
    """Path to a ``../shared/data`` set, or None when absent (tests skip with a reason)."""
    p = SHARED_DATA_DIR / name
    return p if p.exists() else None

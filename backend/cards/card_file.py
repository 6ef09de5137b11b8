"""A card on disk: read from a local file only (``ModelCard.load`` given a string that is not a file would download
one), written atomically (a reader sees the old card or the new one, never half of one)."""

from __future__ import annotations

from pathlib import Path

from backend.core import atomic


def read_card(path: Path, root: Path | None = None):
    """The ``ModelCard`` in ``path``, or None when there is none, it links out of ``root`` (default: its folder; a
    hub snapshot's files are links into the model's cache folder) or it cannot be parsed (metadata errors are
    tolerated: a base model's card is read for its licence, not checked)."""
    from huggingface_hub import ModelCard

    from backend.core.errors import DetourError
    from backend.core.paths import confined

    path = Path(path)
    try:
        path = confined(path, root or path.parent)
    except (DetourError, OSError):
        return None
    if not path.is_file():
        return None
    try:
        return ModelCard.load(path, ignore_metadata_errors=True)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    except Exception:  # noqa: BLE001 - a YAML error of someone else's card: read as no card
        return None


def make_card(data, body: str):
    """A ``ModelCard`` from its metadata (``ModelCardData``) and Markdown body, as the Hub writes one."""
    from huggingface_hub import ModelCard

    return ModelCard(f"---\n{data.to_yaml()}\n---\n{body.rstrip()}\n")


def write_card(path: Path, card) -> Path:
    atomic.write_text(path, str(card))
    return Path(path)

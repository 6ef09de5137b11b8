"""A tokenizer's pieces as words, whatever marks its word boundaries.

Released encoders mark words three ways: WordPiece (BERT, PubMedBERT, BioBERT, SciBERT) prefixes a piece that
*continues* a word with ``##``; SentencePiece (CamemBERT, XLM-R) prefixes a piece that *starts* one with ``▁``;
byte-level BPE (RoBERTa, ModernBERT) writes the space before a word as ``Ġ``. Every view that shows a model's tokens
(fill-mask answers and bars, the surprise view, CKA's texts, NER) reads them through this module, so a word reads as
a word in every model.

A tokenizer's own decoder turns pieces into text, but some released checkpoints ship a ``tokenizer.json`` without
one (transformers then loads a generic tokenizer that joins pieces with spaces: ``asp ##irin reduces ... .``).
``complete_decoder`` gives such a tokenizer the decoder its model and pre-tokenizer imply, when it is loaded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

JOINED = "…"  # shown before a piece that continues the word before it (``##irin`` -> ``…irin``)
BETWEEN_PIECES = "·"  # between the pieces of one word where pieces are shown (``as·p·ir·in``)
SPACE = "␣"  # a piece that is only the space before a word (SentencePiece's lone ``▁``, byte-level's ``Ġ``)


@dataclass(frozen=True)
class Scheme:
    """How a tokenizer marks words: ``kind`` is wordpiece, metaspace, bytelevel or plain; ``marker`` the prefix
    (``##``, ``▁``, ``Ġ``); ``prepend`` Metaspace's prepend scheme."""

    kind: str
    marker: str = ""
    prepend: str = "always"


def _state(component) -> dict:
    """A tokenizers component (pre-tokenizer, decoder) as its JSON state; {} when it has none."""
    if component is None:
        return {}
    try:
        return json.loads(component.__getstate__())
    except (AttributeError, TypeError, ValueError):
        return {}


def _find(state: dict, kind: str) -> dict | None:
    """The first component of type ``kind`` in a (possibly nested Sequence) state."""
    if state.get("type") == kind:
        return state
    for sub in state.get("pretokenizers") or state.get("decoders") or []:
        if found := _find(sub, kind):
            return found
    return None


def scheme(tokenizer) -> Scheme:
    """The tokenizer's word marking, read from its model, pre-tokenizer and decoder (cached on the tokenizer)."""
    cached = getattr(tokenizer, "_detour_scheme", None)
    if cached is not None:
        return cached
    backend = getattr(tokenizer, "backend_tokenizer", None)
    found = Scheme("plain")
    if backend is not None:
        model = backend.model
        states = [_state(backend.pre_tokenizer), _state(backend.decoder)]
        prefix = getattr(model, "continuing_subword_prefix", None)
        if type(model).__name__ == "WordPiece" or (type(model).__name__ == "BPE" and prefix):
            found = Scheme("wordpiece", prefix or "##")
        elif meta := next((m for s in states if (m := _find(s, "Metaspace"))), None):
            found = Scheme("metaspace", meta.get("replacement", "▁"), meta.get("prepend_scheme", "always"))
        elif any(_find(s, "ByteLevel") for s in states):
            found = Scheme("bytelevel", "Ġ")
    try:
        tokenizer._detour_scheme = found
    except AttributeError:  # a tokenizer that takes no attribute: read again next time
        pass
    return found


def complete_decoder(tokenizer):
    """Give a tokenizer loaded without a decoder the one its word marking implies (WordPiece, Metaspace, ByteLevel),
    so that ``decode`` joins pieces into words as the checkpoint's authors' tokenizer does. Returns the tokenizer."""
    from tokenizers import decoders

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or backend.decoder is not None:
        return tokenizer
    s = scheme(tokenizer)
    if s.kind == "wordpiece":
        backend.decoder = decoders.WordPiece(prefix=s.marker, cleanup=True)
    elif s.kind == "metaspace":
        backend.decoder = decoders.Metaspace(replacement=s.marker, prepend_scheme=s.prepend)
    elif s.kind == "bytelevel":
        backend.decoder = decoders.ByteLevel()
    return tokenizer


def _bytes_text(piece: str) -> str:
    from tokenizers import decoders

    return decoders.ByteLevel().decode([piece])


def piece(tokenizer, token_id: int) -> tuple[str, bool]:
    """(the piece's text without its marker, True when it continues the word before it). Special tokens and pieces
    of punctuation alone never continue a word (``.`` after a word is its own mark, not part of it)."""
    raw = tokenizer.convert_ids_to_tokens(int(token_id))
    if raw is None:
        return "", False
    if int(token_id) in set(tokenizer.all_special_ids):
        return raw, False
    s = scheme(tokenizer)
    if s.kind == "wordpiece":
        joins = raw.startswith(s.marker) and len(raw) > len(s.marker)
        text = raw[len(s.marker) :] if joins else raw
    elif s.kind == "metaspace":
        joins = not raw.startswith(s.marker)
        text = raw.replace(s.marker, " ")[0 if joins else 1 :]
    elif s.kind == "bytelevel":
        decoded = _bytes_text(raw)
        joins = not decoded.startswith(" ")
        text = decoded if joins else decoded[1:]
    else:
        text, joins = tokenizer.decode([int(token_id)]).strip(), False
    if not any(c.isalnum() for c in text):
        joins = False
    return text or SPACE, joins


def piece_label(tokenizer, token_id: int) -> str:
    """A piece as a label: its text, after ``…`` when it continues the word before it (``##irin`` -> ``…irin``,
    ``▁risk`` / ``Ġrisk`` -> ``risk``)."""
    text, joins = piece(tokenizer, token_id)
    return JOINED + text if joins else text


def pieces_in_words(tokenizer, ids: list[int]) -> str:
    """Token ids as words with their pieces marked (``as·p·ir·in reduce·s the risk``): how a model reads a text,
    the same for every word marking. Special tokens are left out."""
    special = set(tokenizer.all_special_ids)
    words: list[str] = []
    for i in ids:
        if int(i) in special:
            continue
        text, joins = piece(tokenizer, i)
        if joins and words:
            words[-1] += BETWEEN_PIECES + text
        else:
            words.append(text)
    return " ".join(words)

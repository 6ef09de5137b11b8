"""The corpus split of a replication: whole documents held out, so the CKA texts and the held-out loss are never
trained on. Its own module because it is the one piece of data handling in the plan, tested on its own."""

from __future__ import annotations

import random
import re
from pathlib import Path

from backend.core import atomic
from backend.replication.inputs import ReplicationError

# Files beside a corpus that are not corpus text: licenses, read-mes, provenance notes.
_META_FILE = re.compile(r"(?i)^(readme|source|sources|manifest|copying|notice)$|licen[cs]e")


_SEEN: dict[int, tuple[set, set]] = {}


def _training_text(doc: str, train: list[str]) -> bool:
    """A held-out paragraph that is training text as ``engine.heldout_guard`` reads it (the same paragraph in
    another held-out document -- boilerplate, a repeated caption -- or most of its disjoint 8-word runs found in
    the training words, runs across paragraph ends included): dropped, so the held-out file passes that check."""
    from backend.engine.heldout_guard import MOSTLY, SHINGLE

    key = id(train)
    if key not in _SEEN:
        _SEEN.clear()
        words = " ".join(train).split()
        _SEEN[key] = (set(train), {hash(tuple(words[i : i + SHINGLE])) for i in range(len(words) - SHINGLE + 1)})
    same, runs = _SEEN[key]
    if doc in same:
        return True
    w = doc.split()
    mine = [hash(tuple(w[i : i + SHINGLE])) for i in range(0, len(w) - SHINGLE + 1, SHINGLE)]
    return bool(mine) and sum(h in runs for h in mine) >= MOSTLY * len(mine)


def split_corpus(corpus: str | Path, out_dir: str | Path, heldout_fraction: float, min_words: int, seed: int) -> dict:
    """Hold out whole documents (a folder: one file per document, license / read-me files skipped; one file: one
    paragraph per document) and write ``train.txt`` / ``heldout.txt`` (one paragraph per line) and
    ``cka_texts.txt`` (held-out paragraphs of at least ``min_words`` words). Deterministic; the held-out text is
    never trained on."""
    from backend.engine.data import TEXT_SUFFIXES, read_documents

    corpus, out_dir = Path(corpus), Path(out_dir)
    if corpus.is_dir():
        files = sorted(
            p
            for p in corpus.rglob("*")
            if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES and not _META_FILE.search(p.stem)
        )
        if not files:
            raise ReplicationError(f"corpus '{corpus}': no {'/'.join(TEXT_SUFFIXES)} files")
        groups = [read_documents(str(f)) for f in files]
        unit = "files"
    else:
        groups = [[d] for d in read_documents(str(corpus))]
        unit = "paragraphs"
    if len(groups) < 2:
        raise ReplicationError(f"corpus '{corpus}': one document only; a held-out split needs at least 2")
    order = list(range(len(groups)))
    random.Random(seed).shuffle(order)
    n_held = min(len(groups) - 1, max(1, round(len(groups) * heldout_fraction)))
    held_idx = set(order[:n_held])

    def clean(d: str) -> str:
        return " ".join(d.split())

    train = [clean(d) for i, g in enumerate(groups) if i not in held_idx for d in g if d.strip()]
    held = [clean(d) for i, g in enumerate(groups) if i in held_idx for d in g if d.strip()]
    held = [d for d in held if not _training_text(d, train)] if held else held
    cka = [d for d in held if len(d.split()) >= min_words]
    if len(cka) < 2:
        raise ReplicationError(
            f"corpus '{corpus}': only {len(cka)} held-out paragraph(s) of >= {min_words} words for CKA; "
            "use a larger corpus or a larger data.heldout_fraction"
        )
    for name, docs in (("train.txt", train), ("heldout.txt", held), ("cka_texts.txt", cka)):
        atomic.write_text(out_dir / name, "\n".join(docs) + "\n")
    info = {
        "corpus": str(corpus),
        "unit": unit,
        "units": len(groups),
        "heldout_units": n_held,
        "train_paragraphs": len(train),
        "heldout_paragraphs": len(held),
        "cka_paragraphs": len(cka),
        "train_words": sum(len(d.split()) for d in train),
        "heldout_words": sum(len(d.split()) for d in held),
        "heldout_fraction": heldout_fraction,
        "cka_min_words": min_words,
        "split_seed": seed,
    }
    atomic.write_json(out_dir / "info.json", info)
    return info

"""A held-out file must not be training text: the held-out loss would then measure memorisation.

Before this, ``data.heldout_file`` equal to (or contained in) the training corpus was accepted and the held-out curve
was measured on text the model trained on. Refused when the file is one of the corpus's files (after resolving
paths and links), or when any of its documents is training text: equal to a training document, or sharing most of
its 8-word runs with the corpus, with whitespace normalised -- so a corpus paragraph re-wrapped into other lines
(other document boundaries) is found, not only identical documents. One streaming pass over a local corpus; a hub
corpus is not compared.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from backend.core.errors import DataError
from backend.engine.data import corpus_files, iter_documents, skipped_for

SHINGLE = 8  # words: a run this long shared with the corpus is copied text, not a common phrase
BATCH_WORDS = 1 << 18  # corpus words hashed at once
MOSTLY = 0.5  # of a held-out document's runs found in the corpus: the document is training text


def _words(doc: str) -> list[str]:
    return doc.split()  # whitespace normalised: line breaks, re-wrapping and repeated spaces do not matter


def _digest(words: list[str]) -> bytes:
    return hashlib.sha256(" ".join(words).encode("utf-8")).digest()[:16]


_MIX = np.arange(1, SHINGLE + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)  # one odd multiplier per place


def _runs(words: list[str], step: int) -> np.ndarray:
    """Hashes of the ``SHINGLE``-word runs of ``words`` starting every ``step`` words: each word's ``hash`` (this
    process's) mixed by its place in the run, summed modulo 2**64 (numpy, no Python loop per word)."""
    ids = np.fromiter(map(hash, words), dtype=np.int64, count=len(words)).view(np.uint64)
    n = len(words) - SHINGLE + 1
    if n <= 0:  # shorter than one run: compared as a whole document only
        return np.zeros(0, dtype=np.uint64)
    out = np.zeros(n, dtype=np.uint64)
    for j in range(SHINGLE):
        out += ids[j : j + n] * _MIX[j]
    return out[::step]


def _found(words: list[str], wanted: np.ndarray) -> list[int]:
    """The run hashes of ``words`` that are in ``wanted`` (sorted)."""
    runs = _runs(words, 1)
    if not len(runs) or not len(wanted):
        return []
    at = np.minimum(np.searchsorted(wanted, runs), len(wanted) - 1)
    return runs[wanted[at] == runs].tolist()


def check_disjoint(data_cfg: dict) -> None:
    """Raise DataError naming the file and the overlap when ``data.heldout_file`` shares text with ``data.corpus``.

    Compared word by word: a held-out document is training text when it equals a training document or when most of
    its ``SHINGLE``-word runs occur in the corpus, so a corpus paragraph re-wrapped into other lines (other document
    boundaries) is found too. One streaming pass over the corpus, one hash per word."""
    held = data_cfg.get("heldout_file")
    if not held:
        return
    files = corpus_files(data_cfg["corpus"])
    if files is None:
        return  # a hub dataset: not streamed here
    held_path = Path(held).expanduser().resolve()
    if held_path in {f.resolve() for f in files}:
        raise DataError(
            f"data.heldout_file: {held} is a file of the training corpus ({data_cfg['corpus']}): the held-out loss "
            "would be measured on training text; give a file that is not part of the corpus"
        )
    column = data_cfg["text_column"]
    docs: dict[bytes, np.ndarray] = {}  # held-out document -> its runs (disjoint: one every SHINGLE words)
    for d in iter_documents(str(held_path), column, skipped=skipped_for(data_cfg)):
        words = _words(d)
        docs.setdefault(_digest(words), _runs(words, SHINGLE))
    owner: dict[int, list[bytes]] = {}
    for key, runs in docs.items():
        for h in runs.tolist():
            owner.setdefault(h, []).append(key)
    wanted = np.sort(np.fromiter(owner, dtype=np.uint64, count=len(owner)))
    found: set[int] = set()
    words_run: list[str] = []  # the corpus's words in order, a batch at a time (runs may span its documents)
    same: set[bytes] = set()
    spec = (data_cfg["corpus"], column, data_cfg["hub_split"], data_cfg["max_documents"])
    for d in iter_documents(*spec, skipped=skipped_for(data_cfg)):
        words = _words(d)
        if (key := _digest(words)) in docs:
            same.add(key)
        if owner:
            words_run.extend(words)
            if len(words_run) >= BATCH_WORDS:
                found.update(_found(words_run, wanted))
                words_run = words_run[-(SHINGLE - 1) :]
    if owner:
        found.update(_found(words_run, wanted))
    hits = {key: 0 for key in docs}
    for h in found:
        for key in owner[h]:
            hits[key] += 1
    shared = same | {k for k, runs in docs.items() if len(runs) and hits[k] >= MOSTLY * len(runs)}
    if shared:
        raise DataError(
            f"data.heldout_file: {len(shared)} of its {len(docs)} distinct documents are also in the training "
            f"corpus ({data_cfg['corpus']}), compared word by word whatever the line breaks: the held-out loss would "
            "partly measure training text; remove them from one of the two"
        )

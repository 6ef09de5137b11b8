"""The token store: a corpus tokenized once, packed into fixed ``seq_len`` rows, kept as memory-mapped arrays.

Layout of one cache entry, ``<cache>/tokens/<key>/`` (``<cache>`` = ``DETOUR_CACHE_DIR``, default
``~/.cache/detour-lab``):

    train.ids     (N, seq_len) uint16 (vocabulary <= 65536) or uint32, raw little-endian rows
    train.starts  (N, ceil(seq_len / 8)) uint8: the doc-start flags of each row, ``np.packbits`` along the row
    held.ids / held.starts   the same for the held-out split
    key.json      what the key was computed from (for a human looking at the folder)
    meta.json     counts, dtype, corpus fingerprint, build time; written last: a folder without a valid one is
                  not a store

The rows are exactly what ``data.pack(data.tokenize_documents(...))`` gives for the same split (the in-memory
reference path, ``data.load_corpus_in_memory``), built in two streaming passes: count the documents (and hash
them: the ``fingerprint``), then tokenize them in batches (the fast tokenizer encodes a batch on all cores) and
append full rows to the files. Memory stays flat in the corpus size and in the size of any one file: each file is
streamed in bounded reads (``readers``), then one batch of tokens, and the (documents,) held-out mask.

The key is cheap to compute (file paths, sizes and mtimes, or a hub dataset's own fingerprint; the tokenizer's
serialized form; seq_len; the split), so a second run finds its store without reading the text. One process
builds a given key at a time (a blocking ``flock``); the others wait and then open it. A build writes into a
temporary folder that is renamed into place, so a crash leaves either nothing or a leftover temp folder (removed
by the next build), never a half store.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from backend.core import atomic
from backend.core.errors import DataError
from backend.core.paths import cache_dir
from backend.core.process import FileLock
from backend.engine.data import corpus_files, heldout_indices, hub_dataset, iter_documents, skipped_for

FORMAT = 1
SPLITS = ("train", "held")
PROGRESS_EVERY_S = 5.0
# one tokenizer call: at most this many documents / characters (a batch costs ~40 bytes a character while it is
# encoded: 1M characters keep the build near 350 MB for any file; larger batches are no faster)
BATCH_DOCS, BATCH_CHARS = 1000, 1_000_000


def tokens_dir() -> Path:
    return cache_dir() / "tokens"


class TokenRows:
    """Packed rows on disk: ``rows(idx)`` reads only those rows (int64 ids, bool doc starts)."""

    def __init__(self, folder: Path, split: str, n_rows: int, seq_len: int, dtype: str):
        self.seq_len, self.n = seq_len, n_rows
        nb = (seq_len + 7) // 8
        if n_rows:
            self._ids = np.memmap(folder / f"{split}.ids", dtype=dtype, mode="r", shape=(n_rows, seq_len))
            self._starts = np.memmap(folder / f"{split}.starts", dtype=np.uint8, mode="r", shape=(n_rows, nb))
        else:
            self._ids, self._starts = np.empty((0, seq_len), dtype), np.empty((0, nb), np.uint8)

    def __len__(self) -> int:
        return self.n

    @property
    def num_tokens(self) -> int:
        return self.n * self.seq_len

    def rows(self, idx) -> tuple[torch.Tensor, torch.Tensor]:
        """(input_ids int64, doc_start bool) of the sequences ``idx`` (a tensor, array or list of row indices)."""
        i = np.asarray(idx.numpy() if isinstance(idx, torch.Tensor) else idx, dtype=np.int64)
        ids = torch.from_numpy(self._ids[i].astype(np.int64))
        starts = np.unpackbits(self._starts[i], axis=-1, count=self.seq_len).astype(bool)
        return ids, torch.from_numpy(starts)


# ---------------------------------------------------------------------------------------------- the key
def _source_stamp(corpus: str, text_column: str, hub_split: str) -> dict:
    files = corpus_files(corpus)
    if files is None:
        ds = hub_dataset(corpus, text_column, hub_split)
        return {"hub": corpus, "split": hub_split, "column": text_column, "fingerprint": ds._fingerprint}
    stamps = []
    for f in files:
        st = f.stat()
        stamps.append([str(f.resolve()), st.st_size, st.st_mtime_ns])
    return {"files": stamps, "column": text_column}


def tokenizer_hash(tokenizer) -> str:
    """sha256 of what decides the token ids: the serialized fast tokenizer (or the vocabulary), CLS/SEP, size."""
    h = hashlib.sha256(type(tokenizer).__name__.encode())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        h.update(backend.to_str().encode())
    else:
        h.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
        h.update(repr(getattr(tokenizer, "do_lower_case", None)).encode())
    h.update(json.dumps([tokenizer.cls_token_id, tokenizer.sep_token_id, len(tokenizer)]).encode())
    return h.hexdigest()[:24]


def cache_key(data_cfg: dict, tokenizer, seq_len: int) -> tuple[str, dict]:
    """(key, what it was computed from). Cheap: stats files and hashes the tokenizer, never reads the text."""
    d = data_cfg
    material = {
        "format": FORMAT,
        "corpus": _source_stamp(d["corpus"], d["text_column"], d["hub_split"]),
        "max_documents": d.get("max_documents"),
        "heldout": (
            {"file": _source_stamp(d["heldout_file"], d["text_column"], "train")}
            if d.get("heldout_file")
            else {"fraction": d["heldout_fraction"]}
        ),
        "tokenizer": tokenizer_hash(tokenizer),
        "seq_len": seq_len,
    }
    if d.get("skip_non_text"):  # only then may the documents differ (else a cell that is not text is refused)
        material["skip_non_text"] = True
    key = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:20]
    return key, material


# ---------------------------------------------------------------------------------------------- open / check
def _check(folder: Path, key: str) -> tuple[dict | None, str]:
    """(meta, '') for a complete store, else (None, why not)."""
    if not folder.exists():
        return None, "absent"
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except FileNotFoundError:
        return None, "no meta.json (an interrupted build)"
    except (OSError, ValueError) as exc:
        return None, f"meta.json unreadable ({exc})"
    if meta.get("format") != FORMAT or meta.get("key") != key:
        return None, f"meta.json is format {meta.get('format')} key {meta.get('key')}, expected {FORMAT} {key}"
    seq_len, item = meta["seq_len"], np.dtype(meta["dtype"]).itemsize
    for split in SPLITS:
        n = meta[f"{split}_rows"]
        for name, want in ((f"{split}.ids", n * seq_len * item), (f"{split}.starts", n * ((seq_len + 7) // 8))):
            p = folder / name
            got = p.stat().st_size if p.exists() else None
            if got != want:
                return None, f"{name} has {got} bytes, expected {want}"
    return meta, ""


def _open(folder: Path, meta: dict) -> tuple[TokenRows, TokenRows]:
    t, dt = meta["seq_len"], meta["dtype"]
    return (TokenRows(folder, "train", meta["train_rows"], t, dt), TokenRows(folder, "held", meta["held_rows"], t, dt))


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def cached_info(data_cfg: dict, tokenizer, seq_len: int) -> dict | None:
    """The corpus facts of an already built store (no text read, nothing built), or None."""
    key, _ = cache_key(data_cfg, tokenizer, seq_len)
    meta, _ = _check(tokens_dir() / key, key)
    return None if meta is None else meta["info"]


def open_corpus(data_cfg: dict, tokenizer, seq_len: int, log=print) -> tuple[TokenRows, TokenRows, dict]:
    """(train rows, held-out rows, info) of a corpus, from the cache, built first if needed.

    ``info`` is what ``data_info.json`` holds: the corpus facts of ``load_corpus_in_memory`` plus ``cache_path``,
    ``cache_bytes``, ``cache_hit`` and ``prepare_seconds``."""
    t0 = time.time()
    if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
        raise DataError("tokenizer: needs a CLS (bos) and a SEP (document separator) token")
    key, material = cache_key(data_cfg, tokenizer, seq_len)
    root = tokens_dir()
    folder = root / key
    meta, why = _check(folder, key)
    hit = meta is not None
    if not hit:
        msg = "{what}: being built by pid {pid}"
        with FileLock(root / f"{key}.lock", f"token store {key}", msg, wait=True, on_wait=log):
            meta, why = _check(folder, key)  # built by the holder we waited for?
            hit = meta is not None
            if not hit:
                if why != "absent":
                    log(f"token store {folder}: {why}; rebuilding")
                meta = _build(data_cfg, tokenizer, seq_len, key, material, folder, log)
    train, held = _open(folder, meta)
    info = dict(meta["info"])
    if len(held) == 0:
        raise DataError(
            f"data.heldout_fraction: the held-out split ({info['heldout_documents']} documents) is shorter than one "
            f"sequence of {seq_len} tokens; raise the fraction or lower train.seq_len"
        )
    info.update(
        cache_path=str(folder),
        cache_bytes=_folder_bytes(folder),
        cache_hit=hit,
        prepare_seconds=round(time.time() - t0, 3),
    )
    return train, held, info


# ---------------------------------------------------------------------------------------------- building
class _RowWriter:
    """Streaming ``pack``: ``doc SEP doc SEP ...`` cut into ``[CLS] + (seq_len-1)`` rows appended to two files."""

    def __init__(self, folder: Path, split: str, seq_len: int, cls_id: int, sep_id: int, dtype: np.dtype):
        self.f_ids = open(folder / f"{split}.ids", "wb")  # noqa: SIM115 (closed in close())
        self.f_starts = open(folder / f"{split}.starts", "wb")  # noqa: SIM115
        self.seq_len, self.cls, self.sep, self.dtype = seq_len, cls_id, sep_id, dtype
        self.carry_ids, self.carry_starts = np.empty(0, dtype), np.empty(0, bool)
        self.rows = 0
        self.documents = 0
        self.limit = np.iinfo(dtype).max

    def add(self, token_docs: list[list[int]]) -> None:
        docs = [d for d in token_docs if d]  # a document with no tokens adds nothing, not even a SEP
        if not docs:
            return
        lens = np.fromiter((len(d) for d in docs), np.int64, len(docs))
        flat = np.fromiter(itertools.chain.from_iterable(docs), np.int64, int(lens.sum()))
        if flat.size and (flat.max() > self.limit or flat.min() < 0):
            raise DataError(f"tokenizer: token id {int(flat.max())} does not fit the store's {self.dtype} rows")
        ends = np.cumsum(lens + 1)  # one past each document's SEP
        ids = np.empty(int(ends[-1]), self.dtype)
        sep_pos = ends - 1
        body_mask = np.ones(ids.size, bool)
        body_mask[sep_pos] = False
        ids[body_mask] = flat
        ids[sep_pos] = self.sep
        starts = np.zeros(ids.size, bool)
        starts[ends - lens - 1] = True
        ids = np.concatenate([self.carry_ids, ids])
        starts = np.concatenate([self.carry_starts, starts])
        body = self.seq_len - 1
        n = ids.size // body
        if n:
            rows = np.empty((n, self.seq_len), self.dtype)
            rows[:, 0] = self.cls
            rows[:, 1:] = ids[: n * body].reshape(n, body)
            st = np.zeros((n, self.seq_len), bool)
            st[:, 1:] = starts[: n * body].reshape(n, body)
            self.f_ids.write(rows.tobytes())
            self.f_starts.write(np.packbits(st, axis=1).tobytes())
            self.rows += n
        self.carry_ids, self.carry_starts = ids[n * body :].copy(), starts[n * body :].copy()

    def close(self) -> None:
        for f in (self.f_ids, self.f_starts):
            f.flush()
            os.fsync(f.fileno())
            f.close()


def _id_dtype(tokenizer) -> np.dtype:
    """uint16 where every id fits (vocabulary <= 65536), else uint32; little-endian on disk."""
    size = max(len(tokenizer), getattr(tokenizer, "vocab_size", 0) or 0)
    return np.dtype("<u2") if size <= 1 << 16 else np.dtype("<u4")


def _count(spec: tuple, skipped=None) -> tuple[int, str]:
    """(documents, content fingerprint) in one streaming pass; the fingerprint is ``data.corpus_fingerprint``.
    Cells that are not text are counted in ``skipped`` (where it allows skipping them)."""
    h, n = hashlib.sha256(), 0
    for doc in iter_documents(*spec, skipped=skipped):
        h.update(doc.encode("utf-8"))
        h.update(b"\x00")
        n += 1
    return n, h.hexdigest()[:16]


def _build(data_cfg, tokenizer, seq_len, key, material, folder: Path, log) -> dict:
    d = data_cfg
    t0 = time.time()
    root = folder.parent
    root.mkdir(parents=True, exist_ok=True)
    for old in root.glob(f".{key}.tmp-*"):  # left by a build that died (we hold the lock: nobody is writing it)
        shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        shutil.rmtree(folder)
    spec = (d["corpus"], d["text_column"], d["hub_split"], d["max_documents"])
    log(f"token store: counting documents of {d['corpus']}")
    skipped = skipped_for(d)
    n_docs, fingerprint = _count(spec, skipped)
    skip_again = skipped_for(d)  # the second pass skips the same cells; its tally is not added twice
    held_spec = (d["heldout_file"], d["text_column"]) if d.get("heldout_file") else None
    held_mask = np.zeros(n_docs, bool)
    n_held_docs = 0
    if held_spec is None:
        if n_docs < 2:
            raise DataError(f"data.corpus: {d['corpus']} has 1 document; a held-out split needs at least 2")
        held_mask[heldout_indices(n_docs, d["heldout_fraction"]).numpy()] = True
        n_held_docs = int(held_mask.sum())
    dtype = _id_dtype(tokenizer)
    tmp = root / f".{key}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        writers = {
            s: _RowWriter(tmp, s, seq_len, tokenizer.cls_token_id, tokenizer.sep_token_id, dtype) for s in SPLITS
        }
        progress = _Progress(log, n_docs, writers, seq_len)
        batches: dict[str, list[str]] = {s: [] for s in SPLITS}
        chars = dict.fromkeys(SPLITS, 0)

        def flush(split: str) -> None:
            writers[split].add(_tokenize(batches[split], tokenizer))
            batches[split], chars[split] = [], 0
            progress.maybe_log()

        def route(split: str, doc: str) -> None:
            batches[split].append(doc)
            chars[split] += len(doc)
            if len(batches[split]) >= BATCH_DOCS or chars[split] >= BATCH_CHARS:
                flush(split)

        for i, doc in enumerate(iter_documents(*spec, skipped=skip_again)):
            progress.docs = i + 1
            route("held" if i < n_docs and held_mask[i] else "train", doc)
        if progress.docs != n_docs:
            raise DataError(f"data.corpus: {d['corpus']} changed while it was read ({progress.docs} != {n_docs} docs)")
        if held_spec is not None:
            for doc in iter_documents(*held_spec, skipped=skipped):
                n_held_docs += 1
                route("held", doc)
        for s in SPLITS:
            flush(s)
            writers[s].close()
        seconds = time.time() - t0
        tokens = sum(w.rows for w in writers.values()) * seq_len
        meta = {
            "format": FORMAT,
            "key": key,
            "seq_len": seq_len,
            "dtype": dtype.str,
            "train_rows": writers["train"].rows,
            "held_rows": writers["held"].rows,
            "info": {
                "documents": n_docs,
                "train_documents": n_docs - (0 if held_spec else n_held_docs),
                "heldout_documents": n_held_docs,
                "train_sequences": writers["train"].rows,
                "heldout_sequences": writers["held"].rows,
                "train_tokens": writers["train"].rows * seq_len,
                "heldout_tokens": writers["held"].rows * seq_len,
                "fingerprint": fingerprint,
                **({"skipped_cells": dict(sorted(skipped.counts.items()))} if skipped.counts else {}),
            },
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "build_seconds": round(seconds, 3),
            "tokens_per_s": round(tokens / max(seconds, 1e-9)),
        }
        atomic.write_json(tmp / "key.json", material)
        atomic.write_json(tmp / "meta.json", meta)  # last: what makes the folder a store
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(
        f"token store: built {folder} in {seconds:.1f} s ({meta['tokens_per_s']:,} tokens/s): "
        f"{meta['train_rows']} train + {meta['held_rows']} held-out rows of {seq_len} ({dtype.name})"
    )
    return meta


def _tokenize(docs: list[str], tokenizer) -> list[list[int]]:
    """Exactly ``data.tokenize_documents`` on one batch (a fast tokenizer encodes it on all cores)."""
    if not docs:
        return []
    old_max, tokenizer.model_max_length = tokenizer.model_max_length, int(1e12)
    try:
        return tokenizer(docs, add_special_tokens=False, return_attention_mask=False)["input_ids"]
    finally:
        tokenizer.model_max_length = old_max


class _Progress:
    """A log line every few seconds while building: documents done, rows, tokens/s, ETA."""

    def __init__(self, log, n_docs: int, writers: dict, seq_len: int):
        self.log, self.n_docs, self.writers, self.seq_len = log, n_docs, writers, seq_len
        self.t0 = self.t_last = time.time()
        self.docs = 0

    def maybe_log(self) -> None:
        now = time.time()
        if now - self.t_last < PROGRESS_EVERY_S:
            return
        self.t_last = now
        rows = sum(w.rows for w in self.writers.values())
        dt = now - self.t0
        frac = self.docs / max(self.n_docs, 1)
        eta = dt * (1 - frac) / frac if frac > 0 else float("nan")
        self.log(
            f"token store: {self.docs:,}/{self.n_docs:,} documents ({100 * frac:.0f}%), {rows:,} rows, "
            f"{rows / dt:,.0f} rows/s, {rows * self.seq_len / dt:,.0f} tokens/s, ETA {eta:.0f} s"
        )

"""Corpus -> documents -> token stream -> packed sequences, with a fixed held-out split.

Packing follows the paper: documents are concatenated with the tokenizer's separator token
between them and cut into ``seq_len`` sequences (each starting with [CLS]); attention is not
masked across documents. ``doc_start`` marks the first token of every document so that CLM
labels never ask a token to predict the start of the next document.

Data order is a pure function of (seed, micro-batch index): a baseline and a detour run with the
same seed see the same tokens in the same order, and a resumed run continues exactly.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from backend.core.errors import DataError
from backend.core.paths import DEMO_CORPUS
from backend.engine import readers

TEXT_SUFFIXES = readers.SUFFIXES  # what a corpus folder is read for
SPLIT_SEED = 1234  # the held-out split never depends on the training seed


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)
    if not files:
        raise DataError(f"data.corpus: folder {path} has no {'/'.join(TEXT_SUFFIXES)} files")
    return files


def corpus_files(corpus: str) -> list[Path] | None:
    """The files a local corpus spec ('demo', a file, a folder) reads, in order; None for a hub dataset id."""
    path = DEMO_CORPUS if corpus == "demo" else Path(corpus).expanduser()
    if path.exists():
        return _files(path)
    if corpus.startswith((".", "/", "~")) or corpus == "demo":
        raise DataError(f"data.corpus: no such file or folder: {corpus}")
    return None


def iter_documents(
    corpus: str,
    text_column: str = "text",
    hub_split: str = "train",
    max_documents=None,
    *,
    whole_files: bool = False,
    skipped: readers.Skipped | None = None,
):
    """Yield the non-empty documents of a corpus spec one at a time, each file streamed in bounded pieces
    (``readers``). ``whole_files``: read each file whole instead, as earlier versions did (the reference). A cell
    that is not text is refused, or skipped and counted in ``skipped`` where it allows that (``skipped_for``).

    Raises DataError at the end if nothing was yielded."""
    files = corpus_files(corpus)
    if files is not None:
        read = readers.whole_documents if whole_files else readers.documents
        raw = (d for f in files for d in read(f, text_column, skipped))
    else:
        raw = _hub_documents(corpus, text_column, hub_split, skipped=skipped)
    n = 0
    for x in raw:
        d = x.strip()
        if not d:
            continue
        if max_documents and n >= max_documents:
            break
        n += 1
        yield d
    if n == 0:
        raise DataError(f"data.corpus: {corpus} contains no text")


def read_documents(
    corpus: str,
    text_column: str = "text",
    hub_split: str = "train",
    max_documents=None,
    *,
    whole_files=False,
    skipped: readers.Skipped | None = None,
) -> list[str]:
    """All non-empty documents of a corpus spec as one list: for small corpora (the replication split, tests)."""
    return list(iter_documents(corpus, text_column, hub_split, max_documents, whole_files=whole_files, skipped=skipped))


def skipped_for(data_cfg: dict) -> readers.Skipped:
    """The ``Skipped`` tally of a config's data section: skipping allowed only where ``data.skip_non_text`` asks."""
    return readers.Skipped(allow=bool(data_cfg.get("skip_non_text")))


def hub_dataset(dataset_id: str, column: str, split: str):
    """A hub dataset split (``datasets``' arrow cache, memory-mapped; never materialised as a list)."""
    try:
        import datasets

        ds = datasets.load_dataset(dataset_id, split=split)
    except Exception as exc:  # offline, unknown id, gated...
        raise DataError(
            f"data.corpus: '{dataset_id}' is neither a local path nor a loadable hub dataset "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        ) from exc
    if column not in ds.column_names:
        raise DataError(f"data.text_column: '{column}' not in {dataset_id}; columns: {', '.join(ds.column_names)}")
    return ds


def _hub_documents(dataset_id: str, column: str, split: str, batch: int = 1000, skipped=None):
    ds = hub_dataset(dataset_id, column, split).select_columns([column])
    row = 0
    for rows in ds.iter(batch_size=batch):
        for x in rows[column]:
            row += 1
            text = readers.text_cell(x, f"data.corpus: {dataset_id} ({split}) row {row}, '{column}'", skipped)
            if text is not None:
                yield text


def heldout_indices(n_documents: int, heldout_fraction: float) -> torch.Tensor:
    """Indices of the held-out documents among ``n_documents`` (fixed seed, independent of the training seed)."""
    g = torch.Generator().manual_seed(SPLIT_SEED)
    perm = torch.randperm(n_documents, generator=g)
    n_held = max(1, round(n_documents * heldout_fraction)) if n_documents > 1 else 0
    return perm[:n_held]


def split_documents(docs: list[str], heldout_fraction: float) -> tuple[list[str], list[str]]:
    """Deterministic document-level split (fixed seed, independent of the training seed)."""
    held = set(heldout_indices(len(docs), heldout_fraction).tolist())
    train = [d for i, d in enumerate(docs) if i not in held]
    heldout = [d for i, d in enumerate(docs) if i in held]
    return train, heldout


@dataclass
class PackedData:
    """Packed sequences: ``input_ids`` (N, T) and ``doc_start`` (N, T) bool."""

    input_ids: torch.Tensor
    doc_start: torch.Tensor

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    @property
    def num_tokens(self) -> int:
        return self.input_ids.numel()

    def rows(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(input_ids int64, doc_start bool) of the sequences ``idx``."""
        return self.input_ids[idx], self.doc_start[idx]


def tokenize_documents(docs: list[str], tokenizer, batch: int = 1000) -> list[list[int]]:
    out: list[list[int]] = []
    # Documents longer than the model's max length are fine here: they are packed, then cut.
    old_max, tokenizer.model_max_length = tokenizer.model_max_length, int(1e12)
    for i in range(0, len(docs), batch):
        enc = tokenizer(docs[i : i + batch], add_special_tokens=False, return_attention_mask=False)
        out.extend(enc["input_ids"])
    tokenizer.model_max_length = old_max
    return out


def pack(token_docs: list[list[int]], seq_len: int, cls_id: int, sep_id: int) -> PackedData:
    """Concatenate docs as ``doc SEP doc SEP ...`` and cut into ``[CLS] + (seq_len-1)`` chunks.

    The tail that does not fill a whole sequence is dropped (no padding during training).
    """
    stream: list[int] = []
    starts: list[bool] = []
    for doc in token_docs:
        if not doc:
            continue
        stream.extend(doc)
        stream.append(sep_id)
        starts.extend([True] + [False] * len(doc))
    body = seq_len - 1
    n = len(stream) // body
    if n == 0:
        return PackedData(torch.empty(0, seq_len, dtype=torch.long), torch.empty(0, seq_len, dtype=torch.bool))
    ids = torch.tensor(stream[: n * body], dtype=torch.long).view(n, body)
    st = torch.tensor(starts[: n * body], dtype=torch.bool).view(n, body)
    ids = torch.cat([torch.full((n, 1), cls_id, dtype=torch.long), ids], dim=1)
    st = torch.cat([torch.zeros(n, 1, dtype=torch.bool), st], dim=1)
    return PackedData(ids, st)


def sequence_order(n_sequences: int, seed: int, epoch: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n_sequences, generator=g)


def batch_indices(n_sequences: int, seed: int, micro_index: int, global_batch: int) -> torch.Tensor:
    """Sequence indices of global micro-batch ``micro_index``: epochs are reshuffled, never truncated."""
    start = micro_index * global_batch
    out = []
    while len(out) < global_batch:
        epoch, pos = divmod(start + len(out), n_sequences)
        order = sequence_order(n_sequences, seed, epoch)
        take = min(global_batch - len(out), n_sequences - pos)
        out.extend(order[pos : pos + take].tolist())
    return torch.tensor(out, dtype=torch.long)


def corpus_fingerprint(docs: list[str]) -> str:
    h = hashlib.sha256()
    for d in docs:
        h.update(d.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()[:16]


def load_corpus_in_memory(data_cfg: dict, tokenizer, seq_len: int) -> tuple[PackedData, PackedData, dict]:
    """Read, split, tokenize and pack a corpus in memory. Returns (train, heldout, info).

    The reference the token store (``tokenstore.open_corpus``, what training uses) must reproduce bit for bit: it
    reads every file whole (``readers.whole_documents``, the reading of earlier versions) and holds the whole corpus
    as Python lists, then tensors (~80 bytes per token): small corpora only."""
    d = data_cfg
    skipped = skipped_for(d)
    docs = read_documents(
        d["corpus"], d["text_column"], d["hub_split"], d["max_documents"], whole_files=True, skipped=skipped
    )
    if data_cfg.get("heldout_file"):
        train_docs = docs
        heldout_docs = read_documents(
            data_cfg["heldout_file"], data_cfg["text_column"], whole_files=True, skipped=skipped
        )
    else:
        if len(docs) < 2:
            raise DataError(f"data.corpus: {data_cfg['corpus']} has 1 document; a held-out split needs at least 2")
        train_docs, heldout_docs = split_documents(docs, data_cfg["heldout_fraction"])
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    if cls_id is None or sep_id is None:
        raise DataError("tokenizer: needs a CLS (bos) and a SEP (document separator) token")
    train = pack(tokenize_documents(train_docs, tokenizer), seq_len, cls_id, sep_id)
    held = pack(tokenize_documents(heldout_docs, tokenizer), seq_len, cls_id, sep_id)
    if len(held) == 0:
        raise DataError(
            f"data.heldout_fraction: the held-out split ({len(heldout_docs)} documents) is shorter than one "
            f"sequence of {seq_len} tokens; raise the fraction or lower train.seq_len"
        )
    info = {
        "documents": len(docs),
        "train_documents": len(train_docs),
        "heldout_documents": len(heldout_docs),
        "train_sequences": len(train),
        "heldout_sequences": len(held),
        "train_tokens": train.num_tokens,
        "heldout_tokens": held.num_tokens,
        "fingerprint": corpus_fingerprint(docs),
    }
    if skipped.counts:
        info["skipped_cells"] = dict(sorted(skipped.counts.items()))
    return train, held, info


def info_json(info: dict) -> str:
    return json.dumps(info, indent=2)

"""The token store reproduces the in-memory reference (``load_corpus_in_memory``) bit for bit, and its cache
is found, missed, repaired and shared exactly when it should be."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from backend.core.errors import DataError
from backend.core.paths import REPO_ROOT
from backend.engine import readers, tokenstore
from backend.engine.config import load_config
from backend.engine.data import load_corpus_in_memory, read_documents, split_documents
from backend.engine.tokenstore import TokenRows, open_corpus, tokens_dir
from conftest import bundled_tokenizer, require_shared


def _data(**sets) -> dict:
    return load_config(None, [f"data.{k}={v}" for k, v in sets.items()])["data"]


def _assert_same(store, ref) -> None:
    ids, starts = store.rows(torch.arange(len(store)))
    assert len(store) == len(ref) and store.num_tokens == ref.num_tokens
    assert ids.dtype == torch.long and starts.dtype == torch.bool
    assert torch.equal(ids, ref.input_ids) and torch.equal(starts, ref.doc_start)


def _exact(data_cfg: dict, seq_len: int, tok=None) -> dict:
    tok = tok or bundled_tokenizer()
    ref_train, ref_held, ref_info = load_corpus_in_memory(data_cfg, tok, seq_len)
    train, held, info = open_corpus(data_cfg, tok, seq_len, log=lambda m: None)
    _assert_same(train, ref_train)
    _assert_same(held, ref_held)  # same held-out documents, same rows
    assert {k: info[k] for k in ref_info} == ref_info  # counts and the content fingerprint of old runs
    idx = torch.randint(0, len(train), (17,), generator=torch.Generator().manual_seed(0))
    got = train.rows(idx)  # a few rows, in any order, with repeats
    assert torch.equal(got[0], ref_train.input_ids[idx]) and torch.equal(got[1], ref_train.doc_start[idx])
    return info


@pytest.mark.parametrize("seq_len", [8, 64, 257])
def test_store_rows_equal_reference_packing_on_demo(seq_len):
    info = _exact(_data(corpus="demo", heldout_fraction=0.1), seq_len)
    assert info["cache_hit"] is False and info["cache_bytes"] > 0 and info["prepare_seconds"] >= 0
    assert info["cache_path"].startswith(str(tokens_dir()))


def test_store_equals_reference_on_a_real_corpus_slice():
    corpus = require_shared("gutenberg_en")
    _exact(_data(corpus=str(corpus), max_documents=3000), 128)


# Recorded with the whole-file reading of earlier versions (commit 21c29c3): documents, fingerprint and the sha256 of
# the packed rows at seq_len 128. Stores built now must match, so earlier cache entries stay hits and earlier run
# directories resume on the same rows.
EARLIER_READING = {
    "demo": (200, "f2499211e07ac248", "4395f134b6d9d90a"),
    "gutenberg_en": (26714, "e86175b64001a75a", "114be69e86947eff"),
    "craft_pmc_oa_text/articles": (8859, "165da8d19c86bb20", "9743e8664883d785"),
}


@pytest.mark.parametrize("name", list(EARLIER_READING))
def test_streamed_store_equals_the_earlier_whole_file_reading(name):
    corpus = "demo" if name == "demo" else str(require_shared(name.split("/")[0]) / "/".join(name.split("/")[1:]))
    train, held, info = open_corpus(_data(corpus=corpus), bundled_tokenizer(), 128, log=lambda m: None)
    h = hashlib.sha256()
    for rows in (train, held):
        ids, starts = rows.rows(torch.arange(len(rows)))
        h.update(ids.numpy().tobytes() + starts.numpy().tobytes())
    assert (info["documents"], info["fingerprint"], h.hexdigest()[:16]) == EARLIER_READING[name]


def _write_corpus(path: Path, docs: list[str]) -> None:
    kind = path.suffix
    if path.name == "folder":  # one file of each kind
        path.mkdir()
        parts = [docs[i::5] for i in range(5)]
        for i, suffix in enumerate((".txt", ".jsonl", ".csv", ".parquet", ".md")):
            _write_corpus(path / f"{i}{suffix}", parts[i])
    elif kind == ".txt":
        path.write_text("\r\n\r\n".join(d.replace(". ", ".\n") for d in docs))  # hard-wrapped paragraphs, CRLF
    elif kind == ".jsonl":
        path.write_text("".join(json.dumps({"id": i, "text": d}) + "\n" for i, d in enumerate(docs)))
    elif kind in (".csv", ".parquet"):
        df = pd.DataFrame({"id": range(len(docs)), "text": docs})
        df.to_csv(path, index=False) if kind == ".csv" else df.to_parquet(path, row_group_size=23)
    else:  # a file the folder reading skips
        path.write_text("not a corpus file")


@pytest.mark.parametrize("name", ["c.txt", "c.jsonl", "c.csv", "c.parquet", "folder"])
def test_store_of_one_file_of_each_kind_equals_the_whole_file_reference(tmp_path, monkeypatch, name):
    """Small reads (so documents and characters straddle them): still the reference's rows and split."""
    monkeypatch.setattr(readers, "CHUNK_BYTES", 333)
    monkeypatch.setattr(readers, "TABLE_ROWS", 7)
    _write_corpus(tmp_path / name, read_documents("demo"))
    info = _exact(_data(corpus=str(tmp_path / name), heldout_fraction=0.1), 32)
    assert info["documents"] == (160 if name == "folder" else 200)  # the folder skips its .md file


def test_store_with_a_heldout_file_and_a_folder(tmp_path):
    docs = [f"document {i} " + "word " * (i % 37) for i in range(300)]
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.txt").write_text("\n".join(docs[:150]))
    (tmp_path / "c" / "b.txt").write_text("\n\n".join(docs[150:]))  # paragraphs
    (tmp_path / "held.txt").write_text("\n".join(docs[:40]))
    _exact(_data(corpus=str(tmp_path / "c"), heldout_file=str(tmp_path / "held.txt")), 32)
    _exact(_data(corpus=str(tmp_path / "c"), heldout_fraction=0.2, max_documents=250), 32)


def test_heldout_split_is_the_same_documents():
    """The store's split is ``split_documents`` over the same document order: same held-out docs."""
    tok = bundled_tokenizer()
    d = _data(corpus="demo", heldout_fraction=0.1)
    docs = read_documents("demo")
    _, held_docs = split_documents(docs, 0.1)
    _, held, info = open_corpus(d, tok, 16, log=lambda m: None)
    assert info["heldout_documents"] == len(held_docs) and info["documents"] == len(docs)
    ids, starts = held.rows(torch.arange(len(held)))
    first = tok(held_docs[0], add_special_tokens=False)["input_ids"]
    assert ids[0, 1 : 1 + min(len(first), 15)].tolist() == first[:15]


def test_uint16_or_uint32_by_vocabulary(monkeypatch):
    class Sized:
        def __init__(self, n):
            self.n, self.vocab_size = n, n

        def __len__(self):
            return self.n

    assert tokenstore._id_dtype(Sized(65536)) == np.dtype("<u2")
    assert tokenstore._id_dtype(Sized(65537)) == np.dtype("<u4")
    d = _data(corpus="demo", heldout_fraction=0.1)
    _, _, info = open_corpus(d, bundled_tokenizer(), 32, log=lambda m: None)
    meta = json.loads((tokens_dir() / info["cache_path"].split("/")[-1] / "meta.json").read_text())
    assert meta["dtype"] == "<u2"  # the bundled 8192-token vocabulary
    assert os.path.getsize(f"{info['cache_path']}/train.ids") == meta["train_rows"] * 32 * 2
    monkeypatch.setattr(tokenstore, "_id_dtype", lambda tok: np.dtype("<u4"))  # a big vocabulary, same rows
    monkeypatch.setattr(tokenstore, "FORMAT", 99)  # another key: a fresh build
    info = _exact(d, 32)
    assert json.loads((tokens_dir() / info["cache_path"].split("/")[-1] / "meta.json").read_text())["dtype"] == "<u4"


def test_second_call_hits_the_cache_without_rebuilding(monkeypatch):
    tok, d = bundled_tokenizer(), _data(corpus="demo", heldout_fraction=0.1)
    _, _, first = open_corpus(d, tok, 64, log=lambda m: None)
    meta_path = f"{first['cache_path']}/meta.json"
    before = (open(meta_path).read(), os.stat(meta_path).st_mtime_ns)

    def no_build(*a, **k):
        raise AssertionError("rebuilt")

    monkeypatch.setattr(tokenstore, "_build", no_build)
    t = time.time()
    _, _, again = open_corpus(d, tok, 64, log=lambda m: None)
    assert time.time() - t < 2
    assert again["cache_hit"] is True and again["cache_path"] == first["cache_path"]
    assert (open(meta_path).read(), os.stat(meta_path).st_mtime_ns) == before
    assert {k: v for k, v in again.items() if k not in ("cache_hit", "prepare_seconds")} == {
        k: v for k, v in first.items() if k not in ("cache_hit", "prepare_seconds")
    }


def test_cache_misses_when_seq_len_tokenizer_split_or_corpus_change(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(f"line {i} of the corpus with some words" for i in range(200)))
    tok = bundled_tokenizer()
    d = _data(corpus=str(corpus), heldout_fraction=0.1)
    quiet = lambda m: None  # noqa: E731
    base = open_corpus(d, tok, 32, log=quiet)[2]["cache_path"]
    assert open_corpus(d, tok, 32, log=quiet)[2]["cache_path"] == base
    assert open_corpus(d, tok, 16, log=quiet)[2]["cache_path"] != base
    assert open_corpus({**d, "heldout_fraction": 0.2}, tok, 32, log=quiet)[2]["cache_path"] != base
    other = bundled_tokenizer()
    other.add_tokens(["zzznewtoken"])
    assert open_corpus(d, other, 32, log=quiet)[2]["cache_path"] != base
    corpus.write_text(corpus.read_text() + "\none more line")
    info = open_corpus(d, tok, 32, log=quiet)[2]
    assert info["cache_path"] != base and info["cache_hit"] is False and info["documents"] == 201


def test_partial_or_corrupt_store_is_detected_and_rebuilt():
    tok, d = bundled_tokenizer(), _data(corpus="demo", heldout_fraction=0.1)
    ref_train = load_corpus_in_memory(d, tok, 64)[0]
    logs: list[str] = []
    info = open_corpus(d, tok, 64, log=logs.append)[2]
    folder = tokens_dir() / info["cache_path"].split("/")[-1]
    key = folder.name
    leftover = tokens_dir() / f".{key}.tmp-999999"  # a builder that died mid-way
    (leftover).mkdir()
    (leftover / "train.ids").write_bytes(b"x")
    ids = folder / "train.ids"
    ids.write_bytes(ids.read_bytes()[:100])  # truncated
    train, _, info = open_corpus(d, tok, 64, log=logs.append)
    assert info["cache_hit"] is False and not leftover.exists()
    assert any("train.ids has 100 bytes" in m and "rebuilding" in m for m in logs), logs
    _assert_same(train, ref_train)
    (folder / "meta.json").unlink()  # an interrupted build that got as far as renaming (cannot happen, but)
    assert open_corpus(d, tok, 64, log=logs.append)[2]["cache_hit"] is False
    assert "no meta.json" in logs[-2] or any("no meta.json" in m for m in logs)
    (folder / "meta.json").write_text("{not json")
    assert open_corpus(d, tok, 64, log=logs.append)[2]["cache_hit"] is False


def test_errors_name_the_key_and_value(tmp_path):
    tok = bundled_tokenizer()
    one = tmp_path / "one.txt"
    one.write_text("a single document")
    with pytest.raises(DataError, match=f"data.corpus: {one} has 1 document"):
        open_corpus(_data(corpus=str(one)), tok, 16, log=lambda m: None)
    small = tmp_path / "small.txt"
    small.write_text("\n".join(f"doc {i}" for i in range(20)))  # one held-out doc of ~3 tokens: no row of 16
    with pytest.raises(DataError, match="data.heldout_fraction: the held-out split"):
        open_corpus(_data(corpus=str(small), heldout_fraction=0.01), tok, 16, log=lambda m: None)
    with pytest.raises(DataError, match="data.corpus: no such file or folder: /nope"):
        open_corpus(_data(corpus="/nope"), tok, 16, log=lambda m: None)


def test_empty_store_rows():
    rows = TokenRows(tokens_dir(), "train", 0, 8, "<u2")
    assert len(rows) == 0 and rows.rows(torch.tensor([], dtype=torch.long))[0].shape == (0, 8)


_BUILD = """
import sys
from backend.engine.config import load_config
from backend.engine.tokenstore import open_corpus
from conftest import bundled_tokenizer
d = load_config(None, ["data.corpus=demo"])["data"]
info = open_corpus(d, bundled_tokenizer(), 48, log=lambda m: print(m, flush=True))[2]
print("HIT" if info["cache_hit"] else "MISS", info["cache_path"])
"""


def test_two_processes_at_once_build_the_store_once():
    """The two runs of a pair started together by the queue: one builds, the other waits and opens it."""
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{REPO_ROOT / 'tests'}"}
    procs = [
        subprocess.Popen([sys.executable, "-c", _BUILD], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    last = [o.strip().splitlines()[-1].split() for o in outs]
    assert sorted(x[0] for x in last) == ["HIT", "MISS"] and last[0][1] == last[1][1], outs
    assert sum(o.count("token store: built") for o in outs) == 1
    assert [p.name for p in tokens_dir().iterdir() if not p.name.endswith(".lock")] == [last[0][1].split("/")[-1]]


def test_hub_dataset_is_read_in_batches_and_keyed_by_its_fingerprint(monkeypatch):
    """A hub corpus: ``datasets``' arrow table iterated in batches (never ``ds[column]``), same rows as before."""
    import datasets

    docs = [f"hub document {i} " + "text " * (i % 23) for i in range(400)]
    ds = datasets.Dataset.from_dict({"text": docs, "id": list(range(400))})
    calls = []

    def fake_load(name, split):
        calls.append((name, split))
        return ds

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    info = _exact(_data(corpus="someone/some-corpus", hub_split="train"), 32)
    assert calls and set(calls) == {("someone/some-corpus", "train")}
    key = json.loads((tokens_dir() / info["cache_path"].split("/")[-1] / "key.json").read_text())
    assert key["corpus"]["fingerprint"] == ds._fingerprint
    with pytest.raises(DataError, match="data.text_column: 'body' not in someone/some-corpus"):
        open_corpus(_data(corpus="someone/some-corpus", text_column="body"), bundled_tokenizer(), 32)


def test_file_lock_can_wait_for_its_holder(tmp_path):
    import threading

    from backend.core.process import Busy, FileLock

    path, events = tmp_path / "x.lock", []
    holder = FileLock(path, "thing").acquire()
    with pytest.raises(Busy, match="thing: busy"):
        FileLock(path, "thing").acquire()

    def waiter():
        with FileLock(path, "thing", wait=True, on_wait=events.append):
            events.append("got it")

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.3)
    assert events and "waiting" in events[0] and "got it" not in events
    holder.release()
    t.join(5)
    assert events[-1] == "got it"

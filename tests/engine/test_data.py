"""Corpus reading, the held-out split and packing."""

from __future__ import annotations

import pandas as pd
import pytest

from backend.core.errors import DataError
from backend.engine.data import batch_indices, pack, read_documents, split_documents


def test_txt_paragraphs_and_lines(tmp_path):
    (tmp_path / "para.txt").write_text("line one\nwrapped here\n\nsecond para\r\n\r\nthird\n")
    assert read_documents(str(tmp_path / "para.txt")) == ["line one wrapped here", "second para", "third"]
    (tmp_path / "lines.txt").write_text("doc a\ndoc b\n\n")
    assert read_documents(str(tmp_path / "lines.txt")) == ["doc a", "doc b"]


def test_tables_and_folders(tmp_path):
    pd.DataFrame({"text": ["x y", "z"], "other": [1, 2]}).to_csv(tmp_path / "a.csv", index=False)
    pd.DataFrame({"text": ["p"]}).to_parquet(tmp_path / "b.parquet")
    (tmp_path / "c.jsonl").write_text('{"text": "j"}\n')
    assert read_documents(str(tmp_path)) == ["x y", "z", "p", "j"]
    with pytest.raises(DataError, match="columns found: text, other"):
        read_documents(str(tmp_path / "a.csv"), text_column="body")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="has no"):
        read_documents(str(tmp_path / "empty"))


def test_heldout_split_is_fixed_and_disjoint():
    docs = [f"doc {i}" for i in range(100)]
    tr, he = split_documents(docs, 0.1)
    assert len(he) == 10 and not set(tr) & set(he) and split_documents(docs, 0.1) == (tr, he)


def test_packing_and_order():
    p = pack([[5] * 10, [6] * 10], seq_len=8, cls_id=1, sep_id=2)
    assert p.input_ids.shape == (3, 8) and (p.input_ids[:, 0] == 1).all()
    assert p.doc_start.sum() == 2  # first token of each document
    a = batch_indices(10, seed=3, micro_index=4, global_batch=4)
    assert a.tolist() == batch_indices(10, seed=3, micro_index=4, global_batch=4).tolist()
    epoch0 = sorted(sum((batch_indices(10, 3, i, 5).tolist() for i in range(2)), []))
    assert epoch0 == list(range(10))  # one pass is a permutation: no sequence repeated or skipped

"""What a study reads before it plans: the base's lower and middle thirds (the paper's split), and the corpus split by
whole documents (the CKA and held-out texts are never trained on)."""

from __future__ import annotations

import pytest

from backend.replication import inputs
from backend.replication.corpus import split_corpus


def test_layer_thirds_follow_the_paper_split():
    assert inputs.layer_thirds(6) == ([0, 1], [2, 3])
    assert inputs.layer_thirds(22) == (list(range(8)), list(range(8, 15)))  # the paper: 0-7 and 8-14
    assert inputs.layer_thirds(4) == ([0, 1], [2])
    with pytest.raises(inputs.ReplicationError):
        inputs.layer_thirds(2)


def test_corpus_split_holds_out_whole_documents(tmp_path):
    src = tmp_path / "corpus"
    src.mkdir()
    for i in range(10):
        words = " ".join(f"w{i}x{j}" for j in range(30))
        (src / f"doc{i}.txt").write_text(f"Title {i}\n\n{words} first\n\n{words} second\n")
    (src / "LICENSE.txt").write_text("All rights reserved " * 20)
    a = split_corpus(src, tmp_path / "a", 0.2, 20, 0)
    b = split_corpus(src, tmp_path / "b", 0.2, 20, 0)
    assert (tmp_path / "a" / "heldout.txt").read_text() == (tmp_path / "b" / "heldout.txt").read_text()
    assert a["units"] == 10 and a["heldout_units"] == 2 and a == {**b}
    train = (tmp_path / "a" / "train.txt").read_text()
    held_docs = {ln.split()[0].split("x")[0] for ln in (tmp_path / "a" / "cka_texts.txt").read_text().splitlines()}
    assert len(held_docs) == 2 and not any(f" {d}x" in f" {train}" for d in held_docs)
    assert "All rights reserved" not in train + (tmp_path / "a" / "heldout.txt").read_text()

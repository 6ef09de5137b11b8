"""One rule for corpus cells everywhere (training, the in-memory reference, CKA texts): text is a string. A number,
a list, bytes or a null is refused naming the file and line; skipped only where ``data.skip_non_text`` asks, and
then counted in ``data_info.json`` and the log."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from backend.core.errors import DataError
from backend.engine import readers
from backend.engine.data import read_documents
from conftest import tiny_train_cfg

GOOD = [f"Sentence number {i} of a small corpus about words and letters." for i in range(80)]


def mixed_jsonl(path):
    rows = [{"text": t} for t in GOOD] + [{"text": 12345}, {"text": ["a list", "of words"]}] + [{"text": None}] * 40
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("whole", [False, True], ids=["streamed", "whole"])
def test_jsonl_number_list_and_null_are_refused_naming_the_line(tmp_path, whole):
    p = mixed_jsonl(tmp_path / "c.jsonl")
    with pytest.raises(DataError, match=r"line 81, 'text': holds a number \(12345\).*skip_non_text") as e:
        read_documents(str(p), whole_files=whole)
    assert "[CLS]" not in str(e.value)


def test_parquet_binary_column_is_refused(tmp_path):
    p = tmp_path / "b.parquet"
    pq.write_table(pa.table({"text": pa.array([b"A 58-year-old woman", b"x"], pa.binary())}), p)
    for whole in (False, True):
        with pytest.raises(DataError, match=r"holds bytes \(b'A 58-year-old woman'\)"):
            read_documents(str(p), whole_files=whole)


def test_skip_non_text_skips_and_counts_in_data_info_and_log(tmp_path, tiny_modernbert_dir):
    from backend.runs.train import prepare_runs, train_run

    p = mixed_jsonl(tmp_path / "c.jsonl")
    cfg = tiny_train_cfg(tiny_modernbert_dir, "skip", data__corpus=str(p), data__skip_non_text="true", recipe="mlm",
                         phases__main__steps=2, train__seq_len=16)  # fmt: skip
    (run,) = prepare_runs(cfg)
    assert train_run(run)["state"] == "done"
    info = json.loads((run / "data_info.json").read_text())
    assert info["skipped_cells"] == {"list": 1, "null": 40, "number": 1}
    assert info["documents"] == len(GOOD)
    assert "skipped 42 corpus cells that are not text (1 list, 40 null, 1 number)" in (run / "train.log").read_text()


def test_training_refuses_without_the_option(tmp_path, tiny_modernbert_dir, capsys):
    from backend.__main__ import main

    p = mixed_jsonl(tmp_path / "c.jsonl")
    rc = main(["train", "--set", f"model.name={tiny_modernbert_dir}", "--set", f"data.corpus={p}",
               "--set", "phases.main.steps=2", "--set", "phases.decay.steps=0", "--set", "train.seq_len=16",
               "--name", "refused"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "holds a number (12345)" in err, err


def test_cka_texts_and_training_give_one_answer(tmp_path):
    from backend.analysis.api import load_text_pool

    p = mixed_jsonl(tmp_path / "c.jsonl")
    with pytest.raises(DataError, match=r"^texts: .* line 81, 'text': holds a number"):
        load_text_pool(str(p))
    with pytest.raises(DataError, match="item 2: holds a number"):
        load_text_pool(["one text", 7])
    ok = tmp_path / "ok.jsonl"
    ok.write_text("".join(json.dumps({"text": t}) + "\n" for t in GOOD[:3]))
    assert load_text_pool(str(ok))[0] == GOOD[:3]


def test_csv_reads_na_and_null_as_words(tmp_path):
    p = tmp_path / "c.csv"
    p.write_text("text\nNA\nnull\nN/A\n007\n")
    assert read_documents(str(p)) == ["NA", "null", "N/A", "007"]
    assert read_documents(str(p), whole_files=True) == ["NA", "null", "N/A", "007"]


def test_json_strings_that_look_like_numbers_stay_text(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps([{"text": "123"}, {"text": "2024-01-01"}]))
    assert read_documents(str(p)) == ["123", "2024-01-01"]


def test_skipped_tally_counts_by_kind():
    sk = readers.Skipped(allow=True)
    for x in (None, float("nan"), 1, 2.5, True, b"x", [1], {"a": 1}):
        assert readers.text_cell(x, "w", sk) is None
    assert sk.counts == {"null": 2, "number": 2, "boolean": 1, "bytes": 1, "list": 1, "object": 1}

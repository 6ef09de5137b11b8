"""The streaming file readers give exactly the documents of the whole-file reading of earlier versions
(``readers.whole_documents``), wherever reads end, while holding a bounded amount of memory."""

from __future__ import annotations

import json
import random
import re
import tracemalloc
from pathlib import Path

import pandas as pd
import pytest

from backend.core.errors import DataError
from backend.engine import readers
from backend.engine.data import read_documents
from conftest import require_shared


def _streamed(path: Path, column: str = "text", skipped=None) -> list[str]:
    return read_documents(str(path), column, skipped=skipped)


def _whole(path: Path, column: str = "text", skipped=None) -> list[str]:
    return read_documents(str(path), column, whole_files=True, skipped=skipped)


# ---------------------------------------------------------------------------------------------- text
# every character the whole-file rules treat specially: line breaks of str.splitlines, whitespace that is not one,
# a BOM (not whitespace), multi-byte characters that a read can cut in two
_ALPHABET = ["a", "b", "word", " ", "  ", "\t", "\n", "\n", "\n\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1f"]
_ALPHABET += ["\x85", "\u2028", "\u2029", "\xa0", "\u3000", "\ufeff", "é", "’", "😀"]


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 64])
def test_txt_documents_equal_the_whole_file_reading_wherever_reads_end(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(readers, "CHUNK_BYTES", chunk)
    rng = random.Random(chunk)
    f = tmp_path / "c.txt"
    modes = []
    for i in range(150):
        weights = [1.0] * len(_ALPHABET)
        if i % 2:  # half the files rarely have a blank line: one document per line
            weights[_ALPHABET.index("\n\n")] = weights[_ALPHABET.index("\r\n")] = 0.02
        text = "".join(rng.choices(_ALPHABET, weights, k=rng.randrange(0, 120)))
        f.write_bytes(text.encode("utf-8"))
        whole = readers.whole_txt_documents(f)
        modes.append(bool(re.search(r"\n\s*\n", text.replace("\r\n", "\n").replace("\r", "\n").strip())))
        assert [d.strip() for d in readers.txt_documents(f) if d.strip()] == [d.strip() for d in whole if d.strip()], (
            repr(text)
        )
    assert 20 < sum(modes) < 130  # both readings (paragraphs, lines) were exercised


def test_cuts_of_long_documents_do_not_depend_on_where_reads_end(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "MAX_DOC_CHARS", 8)
    rng = random.Random(1)
    f = tmp_path / "c.txt"
    for _ in range(150):
        f.write_bytes("".join(rng.choices(_ALPHABET, k=rng.randrange(0, 120))).encode("utf-8"))
        monkeypatch.setattr(readers, "CHUNK_BYTES", 1 << 20)
        docs = list(readers.txt_documents(f))
        assert all(len(d) <= 8 for d in docs)
        whole = readers.whole_txt_documents(f)
        assert "".join("".join(docs).split()) == "".join("".join(whole).split())  # the same text, in order
        for chunk in (1, 2, 3, 5):
            monkeypatch.setattr(readers, "CHUNK_BYTES", chunk)
            assert list(readers.txt_documents(f)) == docs, (f.read_bytes(), chunk)


def test_txt_paragraph_or_line_mode_is_decided_on_the_whole_file(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "CHUNK_BYTES", 4)
    f = tmp_path / "c.txt"
    cases = {
        "a\nb\n\n \n": ["a", "b"],  # trailing blank lines: still one document per line
        "\n \n\na\nb": ["a", "b"],  # leading ones too
        "a\nb\n \t\nc": ["a b", "c"],  # a whitespace-only line between text: paragraphs
        "a\n" * 20 + "\nz": ["a " * 19 + "a", "z"],  # the blank line far after the first read
        "\ufeffa\r\nb\r\rc": ["\ufeffa b", "c"],  # the BOM stays text, as it always did
        "a\u2028b\n\u2029c": ["a", "b", "c"],  # splitlines' breaks; no blank \n-line
    }
    for text, docs in cases.items():
        f.write_bytes(text.encode())
        assert _streamed(f) == docs == _whole(f), repr(text)


def test_shared_text_corpora_read_the_same_documents():
    files = [p for name in ("gutenberg_en", "craft_pmc_oa_text") for p in sorted(require_shared(name).rglob("*.txt"))]
    for f in files:
        assert _streamed(f) == _whole(f), f


def test_a_giant_paragraph_or_line_is_cut_at_spaces_the_same_way_wherever_reads_end(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "MAX_DOC_CHARS", 50)
    rng = random.Random(0)
    words = [rng.choice(["a", "bb", "ccc", "dddddddd", "x" * 70]) for _ in range(400)]
    f = tmp_path / "c.txt"
    cases = (
        " ".join(words) + "\n\nshort",  # one long line in a paragraph file
        "\n".join(words) + "\n\nshort",  # a long paragraph of short lines
        " ".join(words),  # a file that is one line
        "short\n" + " ".join(words) + "\nshort",  # one long line among lines
    )
    for text in cases:
        f.write_text(text)
        results = []
        for chunk in (1, 7, 50, 51, 4096):
            monkeypatch.setattr(readers, "CHUNK_BYTES", chunk)
            results.append(_streamed(f))
        docs = results[0]
        assert all(r == docs for r in results)  # the cuts depend on the text only
        assert max(map(len, docs)) <= 50 and len(docs) > 100
        assert "".join("".join(docs).split()) == "".join("".join(_whole(f)).split())  # nothing lost or reordered
        pieces = [d for d in docs if d != "short"]
        assert all(len(d) + 1 + len(n.split(" ")[0]) > 50 for d, n in zip(pieces, pieces[1:]))  # the last space
    monkeypatch.setattr(readers, "MAX_DOC_CHARS", 10**6)
    assert _streamed(f) == _whole(f)  # under the limit nothing changes


def test_long_whitespace_runs_are_cut_without_changing_documents(tmp_path, monkeypatch):
    """Whitespace a document strips (or a separator still being read) may make a block longer than the limit: it is
    cut inside that whitespace, so the documents are the whole-file ones; whitespace inside a line is text."""
    monkeypatch.setattr(readers, "MAX_DOC_CHARS", 50)
    f = tmp_path / "c.txt"
    cases = {
        "lead\n" + "text " * 9 + "\t" * 200 + "\nnext": None,  # trailing tabs of a line: stripped
        "a b\n" + "\u3000" * 300 + "\n" + "word " * 9 + "\n" + " " * 120 + "\n\nz": None,  # blank lines of spaces
        "x\n\n" + "para " * 9 + "\n" + " " * 70 + "\n" + " " * 70 + "y": None,  # one paragraph, indented line
        "a" + " " * 500 + "b\nc": ["a", "b", "c"],  # a line 502 long: cut, its inner spaces with it
    }
    for text, docs in cases.items():
        f.write_text(text)
        for chunk in (1, 3, 16, 4096):
            monkeypatch.setattr(readers, "CHUNK_BYTES", chunk)
            assert _streamed(f) == (docs or _whole(f)), (repr(text), chunk)


def test_bad_utf8_names_the_file_and_the_byte_offset(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "CHUNK_BYTES", 1000)
    f = tmp_path / "c.txt"
    head = ("line é\n" * 400).encode()  # 8 bytes a line: 'é' is cut by a read at 1000, 2000...
    f.write_bytes(head + b"\xff" + b"more\n")
    with pytest.raises(DataError, match=rf"data.corpus: {f} is not UTF-8 text: invalid start byte \(byte ff\) "
                       rf"at byte offset {len(head)}$"):  # fmt: skip
        _streamed(f)
    f.write_bytes(head + "é".encode()[:1])  # cut at the end of the file
    with pytest.raises(DataError, match=f"unexpected end of data .* at byte offset {len(head)}$"):
        _streamed(f)
    f.write_bytes(b"PK\x00\x01binary")
    with pytest.raises(DataError, match="looks binary"):
        _streamed(f)


def _peak_bytes(read) -> tuple[int, int, int]:
    """(documents, longest, peak bytes Python allocated) while ``read()`` is consumed one document at a time."""
    tracemalloc.start()
    try:
        n = longest = 0
        for d in read():
            n, longest = n + 1, max(longest, len(d))
        return n, longest, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("shape", ["paragraphs", "lines", "one line", "one paragraph", "a run of spaces"])
def test_txt_reader_holds_one_read_and_one_document_not_the_file(tmp_path, monkeypatch, shape):
    """Allocation accounting, not timing or RSS: the reader's peak is a few reads and the longest document, for a
    file 40x that size (the whole-file reading needs at least twice the file)."""
    monkeypatch.setattr(readers, "CHUNK_BYTES", 64 << 10)
    monkeypatch.setattr(readers, "MAX_DOC_CHARS", 100_000)
    line = "the quick brown fox jumps over the lazy dog " * 2
    body = {
        "paragraphs": (line + "\n" + line + "\n\n") * 45_000,
        "lines": (line + "\n") * 90_000,
        "one line": line * 90_000,
        "one paragraph": "x\n\n" + (line + "\n") * 90_000,
        "a run of spaces": "x\n\n" + line + " " * 7_200_000 + "\n" + line,
    }[shape]
    f = tmp_path / "c.txt"
    f.write_text(body)
    size = f.stat().st_size
    assert size > 7_000_000
    n, longest, peak = _peak_bytes(lambda: readers.txt_documents(f))
    assert n > 1 and longest <= 100_000
    assert peak < 1_500_000, f"{peak:,} bytes held for a {size:,}-byte file"
    if shape == "lines":
        assert _peak_bytes(lambda: readers.whole_txt_documents(f))[2] > 2 * size  # the test can fail


# ---------------------------------------------------------------------------------------------- tables
_DOCS = ["plain", 'ünïcödé ’quotes’ and "escapes"', "line\nbreaks\r\ninside", "  padded  ", "", "😀 emoji"]


def test_jsonl_records_equal_the_pandas_reading(tmp_path, monkeypatch):
    f = tmp_path / "c.jsonl"
    rows = [{"text": d, "id": i} for i, d in enumerate(_DOCS * 5)]
    rows[3]["text"] = None  # null: refused, or skipped where asked (data.skip_non_text)
    del rows[5]["text"]  # missing: a null too
    lines = [json.dumps(r, ensure_ascii=i % 2 == 0) for i, r in enumerate(rows)]
    lines.insert(7, "   ")  # blank lines are skipped, as pandas skips them
    f.write_text("\r\n".join(lines) + "\n\n")
    tallies = [readers.Skipped(allow=True), readers.Skipped(allow=True)]
    assert (
        _streamed(f, skipped=tallies[0]) == _whole(f, skipped=tallies[1])
        and len(_streamed(f, skipped=readers.Skipped(allow=True))) == 23
    )
    assert tallies[0].counts == tallies[1].counts == {"null": 2}
    for read in (_streamed, _whole):
        with pytest.raises(DataError, match="line 4, 'text': holds a null"):
            read(f)


def test_jsonl_errors_name_the_file_line_and_column(tmp_path):
    f = tmp_path / "c.jsonl"
    f.write_text('{"text": "a"}\n{"text": oops}\n')
    with pytest.raises(DataError, match=f"data.corpus: {f} line 2 is not JSON"):
        _streamed(f)
    f.write_text('{"text": "a"}\n["text"]\n')
    with pytest.raises(DataError, match="line 2 is a JSON list; expected one object per line"):
        _streamed(f)
    f.write_text('{"body": "a", "id": 1}\n{"body": "b", "lang": "en"}\n')
    with pytest.raises(DataError, match="column 'text' not in c.jsonl; columns found: body, id, lang"):
        _streamed(f)
    f.write_bytes(b'{"text": "a"}\n{"text": "\xff"}\n')
    with pytest.raises(DataError, match=r"is not UTF-8 text: invalid start byte at byte offset 24 \(line 2\)"):
        _streamed(f)
    f.write_bytes('\ufeff{"text": "bom"}\n'.encode())  # a BOM before the first record is not part of it
    assert _streamed(f) == ["bom"]


def test_csv_and_parquet_equal_the_pandas_reading_across_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "TABLE_ROWS", 4)
    texts = [d or None for d in _DOCS * 5] + ["3", "4.50", "NA"]  # a null; text that looks like numbers
    df = pd.DataFrame({"id": range(len(texts)), "text": texts})
    df.to_csv(tmp_path / "c.csv", index=False)
    df.to_parquet(tmp_path / "c.parquet", row_group_size=7)
    for f in (tmp_path / "c.csv", tmp_path / "c.parquet"):
        whole = _whole(f, skipped=readers.Skipped(allow=True))  # parquet's null is a null (a CSV's: empty text)
        assert _streamed(f, skipped=readers.Skipped(allow=True)) == whole and "4.50" in whole, f
        assert "NA" in whole  # the word, in a CSV too (pandas' default made it a missing value)
    with pytest.raises(DataError, match="column 'body' not in c.parquet; columns found: id, text"):
        _streamed(tmp_path / "c.parquet", "body")
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(DataError, match="cannot read .*bad.parquet as parquet"):
        _streamed(tmp_path / "bad.parquet")
    (tmp_path / "notes.md").write_text("x")
    with pytest.raises(DataError, match="unsupported file type '.md'; expected .txt, .jsonl, .csv, .parquet, .json"):
        _streamed(tmp_path / "notes.md")


@pytest.mark.parametrize("kind", ["jsonl", "csv", "parquet"])
def test_table_readers_hold_a_few_rows_not_the_file(tmp_path, monkeypatch, kind):
    import pyarrow as pa

    monkeypatch.setattr(readers, "TABLE_ROWS", 200)
    texts = [f"record {i} " + "some words of text " * 50 for i in range(8000)]  # ~8 MB of text
    f = tmp_path / f"c.{kind}"
    if kind == "jsonl":
        f.write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(texts)))
    elif kind == "csv":
        pd.DataFrame({"id": range(len(texts)), "text": texts}).to_csv(f, index=False)
    else:
        pd.DataFrame({"id": range(len(texts)), "text": texts}).to_parquet(f, row_group_size=500)
    arrow = []

    def docs():
        for d in readers.documents(f, "text"):
            arrow.append(pa.total_allocated_bytes())
            yield d

    n, _, peak = _peak_bytes(docs)
    assert n == len(texts)
    assert peak < 1_500_000 and max(arrow) < 3_000_000, (peak, max(arrow))
    assert _peak_bytes(lambda: readers.whole_documents(f, "text"))[2] > 7_000_000  # the test can fail


def test_a_headerless_csv_says_its_header_looks_missing(tmp_path):
    (tmp_path / "nohead.csv").write_text(
        "The heart pumps blood through the body.,1\nCells divide by mitosis in most tissues.,0\n"
    )
    with pytest.raises(DataError, match="header looks missing.*add a header row naming the columns"):
        list(readers.documents(tmp_path / "nohead.csv", "text"))
    (tmp_path / "twice.csv").write_text("x,x\n")  # a repeated value: pandas renames the second 'x.1'
    with pytest.raises(DataError, match="header looks missing"):
        list(readers.documents(tmp_path / "twice.csv", "text"))
    (tmp_path / "header.csv").write_text("id,body,a.b,a.c\n1,hello,2,3\n")  # real names: the columns are listed
    with pytest.raises(DataError, match="columns found: id, body, a.b, a.c") as err:
        list(readers.documents(tmp_path / "header.csv", "text"))
    assert "header looks missing" not in str(err.value)

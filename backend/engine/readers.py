"""The documents of one corpus file, streamed: a file of any size is read in bounded pieces, never whole.

Each reader gives exactly the documents that earlier versions gave by reading the whole file (``whole_documents``,
kept as the reference the tests and ``bench/bench_data.py`` compare against), in the same order, so packed rows,
the held-out split and the corpus fingerprint do not change:

* ``.txt``: UTF-8 (a BOM stays part of the first document, as before), ``\\r\\n`` and ``\\r`` read as ``\\n``. A
  file with a blank line (only whitespace) between two non-blank lines anywhere is read as paragraphs: blank-line
  separated blocks, their lines stripped and joined with one space. Any other file is one document per line (lines
  break where ``str.splitlines`` breaks them). Deciding which takes one pass over the text (``_has_blank_line``; it
  stops at the first blank line), the documents a second. Memory: one chunk of ``CHUNK_BYTES`` plus the paragraph
  being read, and a paragraph or line longer than ``MAX_DOC_CHARS`` characters (the longest in ``../shared/data``:
  14,695) is cut into documents of at most that length, at the last whitespace before the limit.
* ``.jsonl``: one JSON object per line, line by line; blank lines skipped.
* ``.csv``: ``TABLE_ROWS`` rows at a time (pandas), the text column read as text.
* ``.parquet``: ``TABLE_ROWS`` rows at a time (pyarrow), one row group's pages at a time.
* ``.json`` (one JSON document): parsed whole with pandas, as before; large corpora belong in ``.jsonl``.

A cell is text only when it is a string (``text_cell``, the one rule of every reader here, of CKA's texts and of
hub datasets): a number, a list, an object, bytes or a null is refused, naming the file, the line or row and what it
held, never turned into its Python repr or dropped without a word. Where the user asks (``data.skip_non_text``,
``cka --skip-non-text``) such cells are skipped instead and counted by kind (``Skipped``: ``data_info.json``'s
``skipped_cells``, the log). A CSV is read as text throughout: an empty cell is empty text (no document), and
``NA`` or ``null`` are the words themselves. Bad input gets a ``DataError`` naming the file and, for text, the byte
offset.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from backend.core.errors import DataError

CHUNK_BYTES = 1 << 20  # one read of a text file
MAX_DOC_CHARS = 200_000  # a longer paragraph or line is cut: tokenizing one 1M-char string took +220 MB, 200k +42
TABLE_ROWS = 1000  # one read of a csv / parquet file

_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")  # a blank line: what separates paragraphs (the whole-file rule)
_LINE_BREAK = re.compile("[\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")  # where str.splitlines breaks once \r is gone
_NON_SPACE, _SPACE = re.compile(r"\S"), re.compile(r"\s")


SKIP_HINT = "or set data.skip_non_text=true to skip such cells (they are counted in data_info.json)"


@dataclass
class Skipped:
    """Cells that were not text, by kind (``null``, ``number``, ``list``, ...). ``allow``: skip them (the user asked)
    instead of refusing the first one; ``hint`` says how to ask, in the refusal."""

    allow: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    hint: str = SKIP_HINT

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        return ", ".join(f"{n} {kind}" for kind, n in sorted(self.counts.items()))


def cell_kind(x) -> str:
    """What a cell that is not text holds, in words."""
    if x is None or (isinstance(x, float) and x != x) or type(x).__name__ in ("NAType", "NaTType"):
        return "null"
    if isinstance(x, bool) or type(x).__name__ == "bool_":
        return "boolean"
    if isinstance(x, bytes | bytearray | memoryview):
        return "bytes"
    if isinstance(x, int | float | complex) or type(x).__module__ == "numpy" and hasattr(x, "dtype"):
        return "number"
    if isinstance(x, list | tuple) or type(x).__name__ == "ndarray":
        return "list"
    if isinstance(x, dict):
        return "object"
    return type(x).__name__


def text_cell(x, where: str, skipped: Skipped | None = None) -> str | None:
    """``x`` when it is a string; otherwise None where ``skipped.allow`` (counted there), else a DataError naming
    ``where`` (file and line/row) and what the cell held."""
    if isinstance(x, str):
        return x
    kind = cell_kind(x)
    if skipped is not None and skipped.allow:
        skipped.counts[kind] = skipped.counts.get(kind, 0) + 1
        return None
    shown = "" if kind == "null" else f" ({' '.join(repr(x).split())[:40]})"
    hint = (skipped or Skipped()).hint
    article = "" if kind == "bytes" else "an " if kind[0] in "aeiou" else "a "
    raise DataError(
        f"{where}: holds {article}{kind}{shown} where text was expected; a corpus is text: fix the cell {hint}"
    )


def documents(path: Path, column: str, skipped: Skipped | None = None) -> Iterator[str]:
    """The documents of one file, streamed (not yet stripped of surrounding whitespace or filtered for empty ones).
    A cell that is not text is refused, or counted in ``skipped`` where it allows skipping."""
    reader = _READERS.get(path.suffix.lower())
    if reader is None:
        raise DataError(f"data.corpus: {path}: unsupported file type '{path.suffix}'; expected {', '.join(_READERS)}")
    return reader(path) if reader is txt_documents else reader(path, column, skipped)


# ---------------------------------------------------------------------------------------------- text
def txt_documents(path: Path) -> Iterator[str]:
    """Paragraphs (or lines) of a UTF-8 text file, in order, each at most ``MAX_DOC_CHARS`` characters."""
    paragraphs = _has_blank_line(_text_chunks(path))
    for block in _blocks(_text_chunks(path), _PARAGRAPH_BREAK if paragraphs else _LINE_BREAK):
        doc = _join_lines(block) if paragraphs else block.strip()
        if doc:
            yield doc


def _text_chunks(path: Path) -> Iterator[str]:
    """The file's text in pieces of ``CHUNK_BYTES``, ``\\r\\n`` and ``\\r`` turned into ``\\n``."""
    decoder = codecs.getincrementaldecoder("utf-8")()  # strict: a bad byte is an error, never replaced
    offset, cr = 0, ""
    with open(path, "rb") as f:
        if b"\x00" in f.read(8192):
            raise DataError(f"data.corpus: {path} looks binary (NUL bytes); expected UTF-8 text")
        f.seek(0)
        while True:
            raw = f.read(CHUNK_BYTES)
            held = len(decoder.getstate()[0])  # bytes of a character cut by the previous read
            try:
                text = cr + decoder.decode(raw, final=not raw)
            except UnicodeDecodeError as exc:
                bad = exc.object[exc.start : exc.end].hex(" ")
                raise DataError(
                    f"data.corpus: {path} is not UTF-8 text: {exc.reason} (byte {bad}) at byte offset "
                    f"{offset - held + exc.start}"
                ) from exc
            offset += len(raw)
            cr = "\r" if raw and text.endswith("\r") else ""  # a \r\n cut between two reads stays one line break
            if cr:
                text = text[:-1]
            yield text.replace("\r\n", "\n").replace("\r", "\n")
            if not raw:
                return


def _has_blank_line(chunks: Iterator[str]) -> bool:
    """Whether a whitespace-only line lies between two non-blank lines (then the file is read as paragraphs).

    Exactly ``re.search(r"\\n\\s*\\n", text.strip())`` on the whole text; what it carries between chunks is the line
    breaks (at most two) of the whitespace the previous chunk ended with."""
    seen_text, tail = False, ""
    for chunk in chunks:
        buf = tail + chunk
        first = _NON_SPACE.search(buf)
        if first is None:  # only whitespace so far in this run
            tail = "\n" * min(2, buf.count("\n"))
            continue
        end = len(buf.rstrip())  # a blank line must be followed by text: search up to the last non-space
        if _PARAGRAPH_BREAK.search(buf, 0 if seen_text else first.start(), end):
            return True
        seen_text = True
        tail = "\n" * min(2, buf.count("\n", end))
    return False


def _blocks(chunks: Iterator[str], sep: re.Pattern) -> Iterator[str]:
    """The text cut at every match of ``sep``, left-stripped, none longer than ``MAX_DOC_CHARS``.

    Memory: one chunk plus at most ``MAX_DOC_CHARS`` of the unfinished block. Where a separator is cut between two
    chunks the pieces split it twice, which only adds whitespace-only blocks (they make no document)."""
    carry = ""
    for chunk in chunks:
        parts = sep.split(carry + chunk)
        carry = parts.pop().lstrip()
        for part in parts:
            yield from _cut(part.lstrip(), final=True)[0]
        if len(carry) > MAX_DOC_CHARS:
            pieces, carry = _cut(carry, final=False)
            yield from pieces
    yield from _cut(carry, final=True)[0]


def _cut(block: str, final: bool) -> tuple[list[str], str]:
    """(pieces of at most ``MAX_DOC_CHARS`` cut off ``block``'s front, what is left). ``final``: the block is
    complete, the rest is a piece too.

    Each cut is at the last whitespace character before the limit, else at the limit, so the documents depend only
    on the text, never on where reads ended: a block that is only longer than the limit because of whitespace the
    document strips anyway (or the start of a separator a later read completes) is cut inside that whitespace,
    which leaves its document unchanged."""
    pieces = []
    while len(block) > MAX_DOC_CHARS:
        space = _SPACE.search(block[MAX_DOC_CHARS:0:-1])  # the last whitespace in block[1 : MAX_DOC_CHARS + 1]
        at = MAX_DOC_CHARS - space.start() if space else MAX_DOC_CHARS
        pieces.append(block[:at])
        block = block[at:].lstrip()
    if final:
        pieces.append(block)
        block = ""
    return pieces, block


def _join_lines(block: str) -> str:
    """A paragraph's hard-wrapped lines, stripped and joined with one space."""
    return " ".join(s for s in (ln.strip() for ln in block.splitlines()) if s)


# ---------------------------------------------------------------------------------------------- tables
def jsonl_documents(path: Path, column: str, skipped: Skipped | None = None) -> Iterator[str]:
    """The ``column`` of each JSON line; a record without it is a null cell (``text_cell``), a file where none has
    it is an error naming the columns found."""
    found, columns, offset, missing = False, {}, 0, []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            start, offset = offset, offset + len(raw)
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(
                    f"data.corpus: {path} is not UTF-8 text: {exc.reason} at byte offset {start + exc.start} "
                    f"(line {number})"
                ) from exc
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise DataError(f"data.corpus: {path} line {number} is not JSON ({exc})") from exc
            if not isinstance(record, dict):
                raise DataError(
                    f"data.corpus: {path} line {number} is a JSON {type(record).__name__}; expected one object per line"
                )
            if column in record:
                if not found and missing:  # records before the first with the column lacked it: null cells
                    for at in missing:
                        text_cell(None, f"data.corpus: {path} line {at}, '{column}' (absent)", skipped)
                found = True
                text = text_cell(record[column], f"data.corpus: {path} line {number}, '{column}'", skipped)
                if text is not None:
                    yield text
            elif found:
                text_cell(None, f"data.corpus: {path} line {number}, '{column}' (absent)", skipped)
            else:
                missing.append(number)
                if len(columns) < 100:
                    columns.update(dict.fromkeys(record))
    if not found and columns:
        raise _no_column(path, column, list(columns))


def csv_documents(path: Path, column: str, skipped: Skipped | None = None) -> Iterator[str]:
    """The ``column`` of a CSV file, ``TABLE_ROWS`` rows at a time, read as text (never guessed to be numbers, and
    ``NA``/``null`` stay words: pandas' default made them missing values, dropped without a word)."""
    import pandas as pd

    try:
        header = list(pd.read_csv(path, nrows=0).columns)
    except Exception as exc:  # pandas raises many types for malformed files
        raise _unreadable(path, exc) from exc
    if column not in header:
        if _looks_like_data(header):
            shown = ", ".join(repr(str(h))[:60] for h in header[:3])
            raise DataError(
                f"data.text_column: column '{column}' not in {path.name}, whose header looks missing: its first row "
                f"({shown}) reads like data, not column names; add a header row naming the columns (e.g. {column})"
            )
        raise _no_column(path, column, header)
    try:
        with pd.read_csv(
            path, usecols=[column], dtype={column: str}, keep_default_na=False, chunksize=TABLE_ROWS
        ) as chunks:
            for chunk in chunks:
                yield from chunk[column].tolist()
    except Exception as exc:
        raise _unreadable(path, exc) from exc


def parquet_documents(path: Path, column: str, skipped: Skipped | None = None) -> Iterator[str]:
    """The ``column`` of a Parquet file, ``TABLE_ROWS`` rows at a time, pages read as needed (buffered stream)."""
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path, buffer_size=CHUNK_BYTES)
    except Exception as exc:
        raise _unreadable(path, exc) from exc
    names = pf.schema_arrow.names
    if column not in names:
        raise _no_column(path, column, names)
    row = 0
    try:
        batches = pf.iter_batches(batch_size=TABLE_ROWS, columns=[column])
        for batch in batches:
            for x in batch.column(0).to_pylist():
                row += 1
                text = text_cell(x, f"data.corpus: {path} row {row}, '{column}'", skipped)
                if text is not None:
                    yield text
    except DataError:
        raise
    except Exception as exc:
        raise _unreadable(path, exc) from exc


def json_documents(path: Path, column: str, skipped: Skipped | None = None) -> Iterator[str]:
    """One JSON document (records or columns), parsed whole by pandas as before."""
    return iter(whole_table_documents(path, column, skipped))


def _unreadable(path: Path, exc: Exception) -> DataError:
    return DataError(f"data.corpus: cannot read {path} as {path.suffix[1:]} ({type(exc).__name__}: {exc})")


def _looks_like_data(header: list) -> bool:
    """A CSV's first row that reads like a record rather than column names: a number, a sentence (several words or
    long), or a cell pandas had to rename (``Unnamed: 0``, a repeated value's ``x.1``)."""
    for h in map(str, header):
        try:
            float(h)
            return True
        except ValueError:
            pass
        if len(h.split()) > 3 or len(h) > 40 or h.startswith("Unnamed: "):
            return True
    names = set(map(str, header))
    return any(re.fullmatch(r"(.+)\.\d+", h) and h.rsplit(".", 1)[0] in names for h in names)


def _no_column(path: Path, column: str, columns: list) -> DataError:
    return DataError(
        f"data.text_column: column '{column}' not in {path.name}; columns found: {', '.join(map(str, columns))}"
    )


_READERS = {
    ".txt": txt_documents,
    ".jsonl": jsonl_documents,
    ".csv": csv_documents,
    ".parquet": parquet_documents,
    ".json": json_documents,
}
SUFFIXES = tuple(_READERS)


# ---------------------------------------------------------------------------------------------- the reference
def whole_documents(path: Path, column: str, skipped: Skipped | None = None) -> list[str]:
    """The documents of one file read whole, as every version before the streaming readers did.

    The reference the streaming readers must reproduce (``data.load_corpus_in_memory`` reads with it): small files."""
    if path.suffix.lower() == ".txt":
        return whole_txt_documents(path)
    return whole_table_documents(path, column, skipped)


def whole_txt_documents(path: Path) -> list[str]:
    raw = path.read_bytes()
    if b"\x00" in raw[:8192]:
        raise DataError(f"data.corpus: {path} looks binary (NUL bytes); expected UTF-8 text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"data.corpus: {path} is not UTF-8 text ({exc})") from exc
    text = text.replace("\r\n", "\n").replace("\r", "\n").strip()
    if re.search(r"\n\s*\n", text):  # paragraphs separated by blank lines; hard wraps joined
        blocks = re.split(r"\n\s*\n", text)
        return [" ".join(ln.strip() for ln in b.splitlines() if ln.strip()) for b in blocks]
    return [ln.strip() for ln in text.splitlines()]


def whole_table_documents(path: Path, column: str, skipped: Skipped | None = None) -> list[str]:
    """A table read whole; its cells pass ``text_cell`` as the streaming readers' do (read as written: no dtype
    guessing, so a JSON string "123" stays text and a CSV's ``NA`` stays a word)."""
    import pandas as pd

    try:
        if path.suffix == ".parquet":
            df = pd.read_parquet(path)
        elif path.suffix == ".csv":
            df = pd.read_csv(path, dtype=str, keep_default_na=False)
        else:
            df = pd.read_json(path, lines=path.suffix == ".jsonl", dtype=False, convert_dates=False)
    except Exception as exc:  # pandas raises many types for malformed files
        raise _unreadable(path, exc) from exc
    if column not in df.columns:
        raise _no_column(path, column, list(df.columns))
    unit = "line" if path.suffix == ".jsonl" else "row"
    texts = (text_cell(x, f"data.corpus: {path} {unit} {i}, '{column}'", skipped) for i, x in enumerate(df[column], 1))
    return [t for t in texts if t is not None]

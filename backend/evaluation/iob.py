"""Read and validate IOB2 NER data: CoNLL-style files (``token<TAB>tag``, blank line between sentences) in a
train/dev/test folder, or a hub dataset with token and tag columns.

Every error names the file (or dataset and split), the line (or example) and the problem. IOB1-style entity
starts (``I-X`` after ``O`` or after another type) are rewritten to ``B-X`` (strict IOB2 scoring would drop
them otherwise) and counted in ``NerData.notes``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from backend.core.errors import DataError
from backend.evaluation.datafiles import carve_dev, find_split_files, split_key

NER_EXTENSIONS = (".tsv", ".txt", ".conll", ".iob", ".bio")
_TAG = re.compile(r"^([BI])-(\S.*)$")
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")


@dataclass
class NerSplit:
    name: str  # train | dev | test
    source: str  # file path or "dataset:split"
    sentences: list[list[str]]
    tags: list[list[str]]
    where: list[str] = field(default_factory=list)  # per sentence: "file line N" / "dataset split example i"

    def __len__(self) -> int:
        return len(self.sentences)

    def select(self, idx: list[int], name: str | None = None) -> NerSplit:
        return NerSplit(
            name or self.name,
            self.source,
            [self.sentences[i] for i in idx],
            [self.tags[i] for i in idx],
            [self.where[i] for i in idx] if self.where else [],
        )


@dataclass
class NerData:
    train: NerSplit
    dev: NerSplit
    test: NerSplit
    labels: list[str]  # "O", then B-/I- per entity type (sorted)
    source: str
    notes: list[str] = field(default_factory=list)

    @property
    def entity_types(self) -> list[str]:
        return sorted({lab[2:] for lab in self.labels if lab != "O"})

    def splits(self) -> list[NerSplit]:
        return [self.train, self.dev, self.test]


def check_tag(tag: str, where: str) -> None:
    if tag == "O" or _TAG.match(tag):
        return
    if re.match(r"^[ESLU]-", tag):
        raise DataError(f"{where}: tag '{tag}' is IOBES/BILOU; only IOB2 tags are supported (O, B-TYPE, I-TYPE)")
    raise DataError(f"{where}: tag '{tag}' is not IOB2 (expected O, B-TYPE or I-TYPE)")


def repair_iob1(tags: list[str]) -> tuple[list[str], int]:
    """Rewrite entity-starting ``I-X`` (after O, at the start, or after another type) to ``B-X``."""
    out, fixed, prev = [], 0, "O"
    for t in tags:
        if t.startswith("I-") and (prev == "O" or prev[2:] != t[2:]):
            t = "B-" + t[2:]
            fixed += 1
        out.append(t)
        prev = t
    return out, fixed


def parse_iob_lines(lines: list[str], source: str, split: str = "") -> NerSplit:
    """Parse ``token<TAB>tag`` lines (whitespace-separated when a line has no tab: first column = token,
    last column = tag, as in CoNLL-2003). Blank lines separate sentences; ``-DOCSTART-`` lines are skipped."""
    sentences: list[list[str]] = []
    tags: list[list[str]] = []
    where: list[str] = []
    words: list[str] = []
    wtags: list[str] = []
    start = 0

    def flush():
        nonlocal words, wtags
        if words:
            sentences.append(words)
            tags.append(wtags)
            where.append(f"{source} line {start}")
        words, wtags = [], []

    for lineno, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        if not line.strip():
            flush()
            continue
        cols = line.split("\t") if "\t" in line else line.split()
        if cols[0].startswith("-DOCSTART-"):
            flush()
            continue
        loc = f"{source} line {lineno}"
        if len(cols) < 2:
            raise DataError(
                f"{loc}: token '{cols[0][:40]}' has no tag (expected token<TAB>tag; tokens and tags must pair up)"
            )
        token, tag = cols[0].strip(), cols[-1].strip()
        if not token:
            raise DataError(f"{loc}: empty token before tag '{tag}'")
        if not tag:
            raise DataError(f"{loc}: token '{token[:40]}' has an empty tag")
        check_tag(tag, loc)
        if not words:
            start = lineno
        words.append(token)
        wtags.append(tag)
    flush()
    return NerSplit(split, source, sentences, tags, where)


def read_iob_file(path: str | Path, split: str = "") -> NerSplit:
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise DataError(f"{path} line {line}: not valid UTF-8 ({exc.reason})") from exc
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    sp = parse_iob_lines(text.splitlines(), str(path), split)
    if not sp.sentences:
        raise DataError(f"{path}: empty {split or 'data'} split (no sentences)")
    return sp


def records_to_split(tokens: list[list[str]], tags: list[list[str]], source: str, split: str) -> NerSplit:
    """Validate token/tag lists from a dataset (``source``: dataset name) into a NerSplit."""
    if len(tokens) != len(tags):
        raise DataError(f"{source} {split}: {len(tokens)} token rows but {len(tags)} tag rows")
    sentences, out_tags, where = [], [], []
    for i, (toks, tgs) in enumerate(zip(tokens, tags, strict=True)):
        loc = f"{source} {split} example {i}"
        toks, tgs = list(toks), list(tgs)
        if len(toks) != len(tgs):
            raise DataError(f"{loc}: {len(toks)} tokens but {len(tgs)} tags")
        if not toks:
            continue
        for t in tgs:
            check_tag(str(t), loc)
        for w in toks:
            if not str(w).strip():
                raise DataError(f"{loc}: empty token")
        sentences.append([str(w) for w in toks])
        out_tags.append([str(t) for t in tgs])
        where.append(loc)
    if not sentences:
        raise DataError(f"{source}: empty {split} split (no sentences)")
    return NerSplit(split, source, sentences, out_tags, where)


def build_label_set(data_splits: list[NerSplit]) -> list[str]:
    """Labels from train; a type seen in dev/test but never in train is an error naming it."""
    train = data_splits[0]
    types = {t[2:] for sent in train.tags for t in sent if t != "O"}
    if not types:
        raise DataError(f"{train.source}: train split has no entities (every tag is O)")
    for sp in data_splits[1:]:
        for sent, loc in zip(sp.tags, sp.where or [sp.source] * len(sp.tags), strict=True):
            for t in sent:
                if t != "O" and t[2:] not in types:
                    raise DataError(
                        f"label '{t}' appears in {sp.name} ({loc}) but entity type '{t[2:]}' never appears in train "
                        f"(train types: {', '.join(sorted(types))})"
                    )
    return ["O"] + [f"{p}-{t}" for t in sorted(types) for p in ("B", "I")]


def finalize(train: NerSplit, dev: NerSplit | None, test: NerSplit, source: str) -> NerData:
    notes = []
    if dev is None:
        tr_idx, dev_idx = carve_dev(len(train))
        dev = train.select(dev_idx, "dev")
        train = train.select(tr_idx, "train")
        notes.append(f"no dev split: using a fixed 10% of train ({len(dev)} sentences) as dev")
    for sp in (train, dev, test):
        fixed = 0
        for i, t in enumerate(sp.tags):
            sp.tags[i], n = repair_iob1(t)
            fixed += n
        if fixed:
            notes.append(f"{sp.name}: {fixed} IOB1-style entity starts (I- after O or another type) read as B-")
    labels = build_label_set([train, dev, test])
    return NerData(train, dev, test, labels, source, notes)


def load_ner_folder(folder: str | Path) -> NerData:
    files = find_split_files(folder, NER_EXTENSIONS, "NER")
    train = read_iob_file(files["train"], "train")
    dev = read_iob_file(files["dev"], "dev") if files["dev"] else None
    test = read_iob_file(files["test"], "test")
    return finalize(train, dev, test, str(folder))


def ner_from_dataset_dict(dd, source: str, tokens_column: str = "tokens", tags_column: str | None = None) -> NerData:
    """A ``datasets.DatasetDict`` (or a dict of split -> Dataset) with a tokens column and a tags column
    (strings, or ints with a ``ClassLabel`` sequence feature)."""
    picked = {}
    for split in ("train", "dev", "test"):
        key = split_key(dd.keys(), split)
        if key is None and split != "dev":
            raise DataError(f"{source}: no '{split}' split (splits found: {', '.join(dd.keys())})")
        picked[split] = key
    splits = {}
    for split, key in picked.items():
        if key is None:
            splits[split] = None
            continue
        ds = dd[key]
        cols = list(ds.column_names)
        tcol = tags_column or next((c for c in ("ner_tags", "tags", "labels", "ner") if c in cols), None)
        for col, flag in ((tokens_column, "tokens column"), (tcol, "tags column")):
            if col is None or col not in cols:
                raise DataError(
                    f"{source} {key}: no {flag} '{col or 'ner_tags/tags/labels'}' (columns found: {', '.join(cols)})"
                )
        tags = ds[tcol]
        feat = ds.features.get(tcol) if hasattr(ds, "features") else None
        inner = getattr(feat, "feature", None)
        if inner is None and isinstance(feat, list) and feat:
            inner = feat[0]
        names_list = getattr(inner, "names", None)
        if names_list:
            tags = [[names_list[int(t)] for t in row] for row in tags]
        splits[split] = records_to_split(ds[tokens_column], tags, source, split)
    return finalize(splits["train"], splits["dev"], splits["test"], source)


def load_ner_data(data: str | Path, tokens_column: str = "tokens", tags_column: str | None = None) -> NerData:
    """A folder of IOB files, or a hub dataset id (``org/name``) with token and tag columns."""
    p = Path(data).expanduser()
    if p.exists():
        return load_ner_folder(p)
    s = str(data)
    if s.startswith((".", "/", "~")) or not _HUB_ID.match(s):
        raise DataError(f"NER data '{s}': no such folder")
    try:
        from datasets import load_dataset

        dd = load_dataset(s)
    except Exception as exc:  # noqa: BLE001 - any hub failure becomes one clean line
        raise DataError(
            f"NER data '{s}': not a local folder and could not load it from the hub "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        ) from exc
    return ner_from_dataset_dict(dd, s, tokens_column, tags_column)

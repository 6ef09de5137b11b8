"""Text classification data (CSV / TSV / JSONL / JSON / parquet folders, or a hub dataset) and the task object the
fine-tuning loop uses. Single-label, or multi-label when labels are lists or strings split by ``label_separator``.
Scored by macro-F1 over labels (plus micro-F1 and accuracy; exact-match accuracy for multi-label)."""

from __future__ import annotations

import contextlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from backend.core.errors import DataError
from backend.evaluation import sanity
from backend.evaluation.datafiles import carve_dev, find_split_files, split_key

CLS_EXTENSIONS = (".csv", ".tsv", ".jsonl", ".json", ".parquet")
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")


@dataclass
class ClsSplit:
    name: str
    source: str
    texts: list[str]
    labels: list[list[str]]  # one label per example for single-label data

    def __len__(self) -> int:
        return len(self.texts)

    def select(self, idx: list[int], name: str | None = None) -> ClsSplit:
        return ClsSplit(name or self.name, self.source, [self.texts[i] for i in idx], [self.labels[i] for i in idx])


@dataclass
class ClsData:
    train: ClsSplit
    dev: ClsSplit
    test: ClsSplit
    labels: list[str]
    multi_label: bool
    source: str
    notes: list[str] = field(default_factory=list)

    def splits(self) -> list[ClsSplit]:
        return [self.train, self.dev, self.test]


# ---------------------------------------------------------------- reading


def _read_jsonl(path: Path):
    import pandas as pd

    rows = []
    with open(path, encoding="utf-8-sig") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path} line {lineno}: not valid JSON ({exc.msg})") from exc
            if not isinstance(obj, dict):
                raise DataError(f"{path} line {lineno}: expected a JSON object per line, got {type(obj).__name__}")
            rows.append(obj)
    return pd.DataFrame(rows)


def read_table(path: str | Path):
    """A pandas DataFrame from a CSV/TSV (all strings), JSONL/JSON or parquet file."""
    import pandas as pd

    path = Path(path)
    ext = path.suffix.lower()
    try:
        if ext in (".csv", ".tsv"):
            return pd.read_csv(path, sep="\t" if ext == ".tsv" else ",", dtype=str, keep_default_na=False)
        if ext == ".jsonl":
            return _read_jsonl(path)
        if ext == ".json":
            text = path.read_text(encoding="utf-8-sig").strip()
            if text.startswith("["):
                rows = json.loads(text)
                if not all(isinstance(r, dict) for r in rows):
                    raise DataError(f"{path}: expected a JSON list of objects")
                return pd.DataFrame(rows)
            return _read_jsonl(path)
        if ext == ".parquet":
            return pd.read_parquet(path)
    except DataError:
        raise
    except pd.errors.EmptyDataError as exc:
        raise DataError(f"{path}: empty file (no header, no rows)") from exc
    except (ValueError, UnicodeDecodeError, OSError, pd.errors.ParserError) as exc:
        raise DataError(f"{path}: cannot read as {ext.lstrip('.')} ({str(exc).splitlines()[0]})") from exc
    except Exception as exc:  # noqa: BLE001 - e.g. pyarrow errors on a corrupt parquet file
        raise DataError(f"{path}: cannot read as {ext.lstrip('.')} ({type(exc).__name__}: {exc})") from exc
    raise DataError(f"{path}: unsupported extension '{ext}' (use {', '.join(CLS_EXTENSIONS)})")


def _missing(v) -> bool:
    if v is None:
        return True
    if isinstance(v, float) and math.isnan(v):
        return True
    return False


def _label_str(v) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v).strip()


def _is_listlike(v) -> bool:
    if isinstance(v, (list, tuple)):
        return True
    return type(v).__name__ == "ndarray"


def frame_to_split(df, source: str, split: str, text_column: str, label_column: str, label_separator: str | None):
    """(ClsSplit, saw_list_labels) with every row checked; errors name the source and the row."""
    cols = [str(c) for c in df.columns]
    for col, flag in ((text_column, "text"), (label_column, "label")):
        if col not in cols:
            raise DataError(
                f"{source}: no {flag} column '{col}' (columns found: {', '.join(cols) or 'none'}); "
                f"choose one with --{flag}-column"
            )
    texts, labels, saw_list = [], [], False
    for i, (t, lab) in enumerate(zip(df[text_column].tolist(), df[label_column].tolist(), strict=True)):
        row = f"{source} row {i + 1}"
        if _missing(t) or not str(t).strip():
            raise DataError(f"{row}: empty text in column '{text_column}'")
        if _is_listlike(lab):
            saw_list = True
            labs = [_label_str(x) for x in list(lab) if not _missing(x) and _label_str(x)]
        elif _missing(lab):
            if label_separator is None:
                raise DataError(f"{row}: missing label in column '{label_column}'")
            labs = []
        elif label_separator is not None:
            labs = [p.strip() for p in str(lab).split(label_separator) if p.strip()]
        else:
            s = _label_str(lab)
            if not s:
                raise DataError(f"{row}: missing label in column '{label_column}'")
            labs = [s]
        texts.append(str(t))
        labels.append(labs)
    if not texts:
        raise DataError(f"{source}: empty {split} split (no rows)")
    return ClsSplit(split, source, texts, labels), saw_list


def _sort_labels(labels: set[str]) -> list[str]:
    if all(re.fullmatch(r"-?\d+", s) for s in labels):
        return sorted(labels, key=int)
    return sorted(labels)


def finalize(splits: dict, source: str, multi_label: bool) -> ClsData:
    notes = []
    train, dev, test = splits["train"], splits["dev"], splits["test"]
    if dev is None:
        tr_idx, dev_idx = carve_dev(len(train))
        dev = train.select(dev_idx, "dev")
        train = train.select(tr_idx, "train")
        notes.append(f"no dev split: using a fixed 10% of train ({len(dev)} examples) as dev")
    if not multi_label:
        for sp in (train, dev, test):
            for i, labs in enumerate(sp.labels):
                if len(labs) != 1:
                    raise DataError(f"{sp.source} row {i + 1}: {len(labs)} labels in a single-label task")
    seen = {lab for labs in train.labels for lab in labs}
    for sp in (dev, test):
        for i, labs in enumerate(sp.labels):
            for lab in labs:
                if lab not in seen:
                    raise DataError(
                        f"label '{lab}' appears in {sp.name} ({sp.source} row {i + 1}) but never in train "
                        f"(train labels: {', '.join(_sort_labels(seen))})"
                    )
    if not multi_label and len(seen) < 2:
        raise DataError(f"{train.source}: train has {len(seen)} distinct label(s); classification needs at least 2")
    if multi_label and not seen:
        raise DataError(f"{train.source}: train has no labels at all")
    return ClsData(train, dev, test, _sort_labels(seen), multi_label, source, notes)


def load_classification_folder(
    folder: str | Path, text_column: str = "text", label_column: str = "label", label_separator: str | None = None
) -> ClsData:
    files = find_split_files(folder, CLS_EXTENSIONS, "classification")
    splits, any_list = {}, False
    for split, path in files.items():
        if path is None:
            splits[split] = None
            continue
        sp, saw = frame_to_split(read_table(path), str(path), split, text_column, label_column, label_separator)
        splits[split] = sp
        any_list |= saw
    return finalize(splits, str(folder), multi_label=any_list or label_separator is not None)


def classification_from_dataset_dict(
    dd, source: str, text_column: str = "text", label_column: str = "label", label_separator: str | None = None
) -> ClsData:
    """A ``datasets.DatasetDict``: ``ClassLabel`` ints (or sequences of them) are mapped to their names."""
    splits, any_list = {}, False
    for split in ("train", "dev", "test"):
        key = split_key(dd.keys(), split)
        if key is None:
            if split == "dev":
                splits[split] = None
                continue
            raise DataError(f"{source}: no '{split}' split (splits found: {', '.join(dd.keys())})")
        ds = dd[key]
        df = ds.to_pandas()
        feat = ds.features.get(label_column)
        cl_names = getattr(feat, "names", None) or getattr(getattr(feat, "feature", None), "names", None)
        if cl_names and label_column in df.columns:
            df[label_column] = [
                [cl_names[int(x)] for x in v] if _is_listlike(v) else (None if _missing(v) else cl_names[int(v)])
                for v in df[label_column].tolist()
            ]
        sp, saw = frame_to_split(df, f"{source} {key}", split, text_column, label_column, label_separator)
        splits[split] = sp
        any_list |= saw
    return finalize(splits, source, multi_label=any_list or label_separator is not None)


def load_classification_data(
    data: str | Path, text_column: str = "text", label_column: str = "label", label_separator: str | None = None
) -> ClsData:
    p = Path(data).expanduser()
    if p.exists():
        return load_classification_folder(p, text_column, label_column, label_separator)
    s = str(data)
    if s.startswith((".", "/", "~")) or not _HUB_ID.match(s):
        raise DataError(f"classification data '{s}': no such folder")
    try:
        from datasets import load_dataset

        dd = load_dataset(s)
    except Exception as exc:  # noqa: BLE001
        raise DataError(
            f"classification data '{s}': not a local folder and could not load it from the hub "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        ) from exc
    return classification_from_dataset_dict(dd, s, text_column, label_column, label_separator)


# ---------------------------------------------------------------- scoring


def classification_scores(gold: list[list[int]], pred: list[list[int]], n_labels: int, multi_label: bool) -> dict:
    """macro-F1 (over all train labels), micro-F1 and accuracy (exact match when multi-label)."""
    tp = [0] * n_labels
    fp = [0] * n_labels
    fn = [0] * n_labels
    exact = 0
    for g, p in zip(gold, pred, strict=True):
        gs, ps = set(g), set(p)
        exact += gs == ps
        for k in ps & gs:
            tp[k] += 1
        for k in ps - gs:
            fp[k] += 1
        for k in gs - ps:
            fn[k] += 1

    def f1(t, f_p, f_n):
        d = 2 * t + f_p + f_n
        return 2 * t / d if d else 0.0

    per = [f1(tp[k], fp[k], fn[k]) for k in range(n_labels)]
    return {
        "macro_f1": sum(per) / n_labels if n_labels else 0.0,
        "micro_f1": f1(sum(tp), sum(fp), sum(fn)),
        "accuracy": exact / len(gold) if gold else 0.0,
        "per_label_f1": per,
    }


class ClsTask:
    task = "classification"
    default_metric = "macro_f1"

    def __init__(self, data: ClsData, tokenizer, max_len: int, model_label: str):
        from backend.evaluation.ner import pad_token_id

        self.data = data
        self.tokenizer = tokenizer
        self.max_len = max_len
        self.labels = list(data.labels)
        self.multi_label = data.multi_label
        self.label2id = {lab: i for i, lab in enumerate(self.labels)}
        self.id2label = dict(enumerate(self.labels))
        self.pad_id = pad_token_id(tokenizer, model_label)
        self._enc = {sp.name: self._encode(sp) for sp in data.splits()}
        self.train_features = self._enc["train"]

    def _target(self, labs: list[str]):
        ids = [self.label2id[x] for x in labs]
        if not self.multi_label:
            return ids[0]
        v = torch.zeros(len(self.labels), dtype=torch.float)
        v[ids] = 1.0
        return v

    def _encode(self, sp: ClsSplit) -> list[dict]:
        enc = self.tokenizer(sp.texts, truncation=True, max_length=self.max_len)
        return [
            {"input_ids": ids, "labels": self._target(labs)}
            for ids, labs in zip(enc["input_ids"], sp.labels, strict=True)
        ]

    def sizes(self) -> dict:
        return {sp.name: len(sp) for sp in self.data.splits()}

    def load_model(self, source, trust_remote_code: bool = False):
        """The encoder with a new head, ready for padded batches (``padded_attention``: no empty attention rows)."""
        from transformers import AutoModelForSequenceClassification

        from backend.engine.models import _load
        from backend.evaluation.padded_attention import padding_attends_to_itself

        model = _load(
            AutoModelForSequenceClassification,
            source,
            trust_remote_code=trust_remote_code,
            num_labels=len(self.labels),
            id2label=self.id2label,
            label2id=self.label2id,
            problem_type="multi_label_classification" if self.multi_label else "single_label_classification",
        )
        padding_attends_to_itself(model)
        return model

    @torch.no_grad()
    def evaluate(self, model, split: str, batch_size: int, device, autocast=None) -> dict:
        from backend.evaluation.ner import pad_batch

        model.eval()
        feats = self._enc[split]
        order = sorted(range(len(feats)), key=lambda i: len(feats[i]["input_ids"]))
        preds: list[list[int]] = [[] for _ in feats]
        total = 0.0
        for s in range(0, len(order), batch_size):
            idx = order[s : s + batch_size]
            batch = {k: v.to(device) for k, v in pad_batch([feats[i] for i in idx], self.pad_id).items()}
            labels = batch.pop("labels")
            with autocast() if autocast is not None else contextlib.nullcontext():
                logits = model(**batch).logits
            logits = logits.float()
            if self.multi_label:
                total += float(
                    torch.nn.functional.binary_cross_entropy_with_logits(logits, labels, reduction="sum").item()
                ) / len(self.labels)
                rows = [torch.nonzero(r > 0).flatten().tolist() for r in logits.cpu()]
            else:
                total += float(torch.nn.functional.cross_entropy(logits, labels, reduction="sum").item())
                rows = [[int(k)] for k in logits.argmax(-1).cpu()]
            for r, i in zip(rows, idx, strict=True):
                preds[i] = r
        gold = [
            [self.label2id[x] for x in labs]
            for labs in {"train": self.data.train, "dev": self.data.dev, "test": self.data.test}[split].labels
        ]
        scores = classification_scores(gold, preds, len(self.labels), self.multi_label)
        scores["constant"] = sanity.constant_answer([[self.labels[k] for k in p] for p in preds])  # one answer for all
        scores["loss"] = total / len(feats) if feats else math.nan
        scores["n"] = len(feats)
        return scores

    def label_map(self) -> dict:
        return {
            "task": "classification",
            "labels": self.labels,
            "multi_label": self.multi_label,
            "max_len": self.max_len,
        }

"""NER as token classification: word-level IOB2 tags onto subwords (first subword labelled, -100 elsewhere),
chunking of sentences longer than ``max_len``, and strict IOB2 entity scoring with seqeval.

Byte-level BPE tokenizers (RoBERTa / ModernBERT style) encode a word differently with and without a leading
space ("Ġof" vs "of"). Text seen in pretraining has the space, so when the tokenizer's ByteLevel
pre-tokenizer does not add it (``add_prefix_space=False``) every word gets a leading space here, which is what
``add_prefix_space=True`` does for RoBERTa. The choice is stored in ``label_map.json`` so prediction matches.
"""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import dataclass

import torch

from backend.core.errors import DataError, ModelSpecError
from backend.evaluation import sanity
from backend.evaluation.iob import NerData, NerSplit

IGNORE = -100


def _bytelevel_without_prefix(state: dict) -> bool:
    if state.get("type") == "ByteLevel":
        return not state.get("add_prefix_space", False)
    if state.get("type") == "Sequence":
        return any(_bytelevel_without_prefix(s) for s in state.get("pretokenizers", []))
    return False


def needs_prefix_space(tokenizer) -> bool:
    """True for a byte-level BPE tokenizer whose pre-tokenizer does not add the leading space itself."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    pre = getattr(backend, "pre_tokenizer", None) if backend is not None else None
    if pre is None:
        return False
    try:
        state = json.loads(pre.__getstate__())
    except Exception:  # noqa: BLE001 - unknown pre-tokenizer: leave words as they are
        return False
    return _bytelevel_without_prefix(state)


def require_fast(tokenizer, model: str) -> None:
    if not getattr(tokenizer, "is_fast", False):
        raise ModelSpecError(
            f"model '{model}': NER needs a fast (Rust) tokenizer to map subwords to words (word_ids()); "
            f"{type(tokenizer).__name__} is not one"
        )


@dataclass
class Chunk:
    """One model input: a window of a sentence's words that fits in ``max_len`` tokens."""

    sentence: int
    input_ids: list[int]
    labels: list[int]  # label id at each word's first subword, IGNORE elsewhere
    word_pos: list[tuple[int, int]]  # (word index in the sentence, token position of its first subword)


def _prep_words(words: list[str], prefix_space: bool) -> list[str]:
    return [" " + w for w in words] if prefix_space else list(words)


def encode_sentences(
    tokenizer,
    sentences: list[list[str]],
    max_len: int,
    prefix_space: bool,
    tag_ids: list[list[int]] | None = None,
) -> list[Chunk]:
    """Tokenize pretokenized sentences; a sentence longer than ``max_len`` is split into word windows (a single
    word longer than the budget is truncated). Words that tokenize to nothing get no position (predicted O)."""
    if max_len < 4:
        raise DataError(f"max_len must be >= 4, got {max_len}")
    chunks: list[Chunk] = []
    if not sentences:
        return chunks
    enc = tokenizer([_prep_words(s, prefix_space) for s in sentences], is_split_into_words=True, truncation=False)
    for si, words in enumerate(sentences):
        ids = enc["input_ids"][si]
        wids = enc.word_ids(si)
        if len(ids) <= max_len:
            groups = [(0, len(words), ids, wids)]
        else:
            counts = [0] * len(words)
            for w in wids:
                if w is not None:
                    counts[w] += 1
            n_special = sum(1 for w in wids if w is None)
            budget = max(1, max_len - n_special)
            bounds, start, used = [], 0, 0
            for wi, c in enumerate(counts):
                if used + c > budget and wi > start:
                    bounds.append((start, wi))
                    start, used = wi, 0
                used += c
            bounds.append((start, len(words)))
            groups = []
            for a, b in bounds:
                sub = tokenizer(
                    _prep_words(words[a:b], prefix_space), is_split_into_words=True, truncation=True, max_length=max_len
                )
                groups.append((a, b, sub["input_ids"], [None if w is None else w + a for w in sub.word_ids()]))
        for _a, _b, gids, gwids in groups:
            labels = [IGNORE] * len(gids)
            word_pos = []
            prev = None
            for pos, w in enumerate(gwids):
                if w is not None and w != prev:
                    word_pos.append((w, pos))
                    if tag_ids is not None:
                        labels[pos] = tag_ids[si][w]
                prev = w
            chunks.append(Chunk(si, list(gids), labels, word_pos))
    return chunks


def decode_chunks(
    chunks: list[Chunk], pred_ids: list[list[int]], n_words: list[int], id2label: dict
) -> list[list[str]]:
    """Word-level tags from token-level predicted ids (first subword); words without a position get O."""
    out = [["O"] * n for n in n_words]
    for ch, preds in zip(chunks, pred_ids, strict=True):
        for w, pos in ch.word_pos:
            out[ch.sentence][w] = id2label[int(preds[pos])]
    return out


def pad_batch(items: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad ``input_ids`` (with pad_id) and ``labels`` (with IGNORE when present) to the longest item."""
    n = max(len(it["input_ids"]) for it in items)
    ids = torch.full((len(items), n), pad_id, dtype=torch.long)
    mask = torch.zeros((len(items), n), dtype=torch.long)
    out = {"input_ids": ids, "attention_mask": mask}
    has_labels = "labels" in items[0]
    seq_labels = has_labels and isinstance(items[0]["labels"], list)
    if seq_labels:
        out["labels"] = torch.full((len(items), n), IGNORE, dtype=torch.long)
    for i, it in enumerate(items):
        L = len(it["input_ids"])
        ids[i, :L] = torch.tensor(it["input_ids"], dtype=torch.long)
        mask[i, :L] = 1
        if seq_labels:
            out["labels"][i, :L] = torch.tensor(it["labels"], dtype=torch.long)
    if has_labels and not seq_labels:
        out["labels"] = torch.stack([torch.as_tensor(it["labels"]) for it in items])
    return out


def ner_scores(gold: list[list[str]], pred: list[list[str]]) -> dict:
    """Entity-level strict IOB2 scores (seqeval): micro precision/recall/F1, macro-F1 over types, per type."""
    from seqeval.metrics import classification_report, f1_score, precision_score, recall_score
    from seqeval.scheme import IOB2

    kw = dict(mode="strict", scheme=IOB2, zero_division=0)
    report = classification_report(gold, pred, output_dict=True, **kw)
    per_type = {
        k: {
            "precision": float(v["precision"]),
            "recall": float(v["recall"]),
            "f1": float(v["f1-score"]),
            "support": int(v["support"]),
        }
        for k, v in report.items()
        if k not in ("micro avg", "macro avg", "weighted avg")
    }
    out = {
        "precision": float(precision_score(gold, pred, **kw)),
        "recall": float(recall_score(gold, pred, **kw)),
        "f1": float(f1_score(gold, pred, **kw)),
        "macro_f1": float(f1_score(gold, pred, average="macro", **kw)),
        "token_accuracy": _token_accuracy(gold, pred),
        "per_type": per_type,
        "constant": sanity.constant_answer([t for s in pred for t in s]),  # e.g. 'O' everywhere
    }
    if not any(t != "O" for s in gold for t in s):  # no entity: F1 is 0/0, not 0
        out.update(precision=None, recall=None, f1=None, macro_f1=None, undefined=sanity.NO_ENTITIES)
    return out


def _token_accuracy(gold, pred) -> float:
    n = sum(len(g) for g in gold)
    ok = sum(a == b for g, p in zip(gold, pred, strict=True) for a, b in zip(g, p, strict=True))
    return ok / n if n else 0.0


class NerTask:
    """Everything the fine-tuning loop needs for NER with one tokenizer."""

    task = "ner"
    default_metric = "f1"

    def __init__(self, data: NerData, tokenizer, max_len: int, model_label: str):
        require_fast(tokenizer, model_label)
        self.data = data
        self.tokenizer = tokenizer
        self.max_len = max_len
        self.labels = list(data.labels)
        self.label2id = {lab: i for i, lab in enumerate(self.labels)}
        self.id2label = dict(enumerate(self.labels))
        self.prefix_space = needs_prefix_space(tokenizer)
        self.pad_id = pad_token_id(tokenizer, model_label)
        self._chunks = {sp.name: self._encode(sp) for sp in data.splits()}
        self.train_features = [{"input_ids": c.input_ids, "labels": c.labels} for c in self._chunks["train"]]

    def _encode(self, sp: NerSplit) -> list[Chunk]:
        tag_ids = [[self.label2id[t] for t in sent] for sent in sp.tags]
        return encode_sentences(self.tokenizer, sp.sentences, self.max_len, self.prefix_space, tag_ids)

    def sizes(self) -> dict:
        return {sp.name: len(sp) for sp in self.data.splits()}

    def load_model(self, source, trust_remote_code: bool = False):
        """The encoder with a new head, ready for padded batches (``padded_attention``: no empty attention rows)."""
        from transformers import AutoModelForTokenClassification

        from backend.engine.models import _load
        from backend.evaluation.padded_attention import padding_attends_to_itself

        model = _load(
            AutoModelForTokenClassification,
            source,
            trust_remote_code=trust_remote_code,
            num_labels=len(self.labels),
            id2label=self.id2label,
            label2id=self.label2id,
        )
        padding_attends_to_itself(model)
        return model

    @torch.no_grad()
    def evaluate(self, model, split: str, batch_size: int, device, autocast=None) -> dict:
        sp = {"dev": self.data.dev, "test": self.data.test, "train": self.data.train}[split]
        chunks = self._chunks[split]
        loss, preds = run_token_model(model, chunks, self.pad_id, batch_size, device, autocast)
        pred_tags = decode_chunks(chunks, preds, [len(s) for s in sp.sentences], self.id2label)
        scores = ner_scores(sp.tags, pred_tags)
        scores["loss"] = loss
        scores["n"] = len(sp)
        return scores

    def label_map(self) -> dict:
        return {
            "task": "ner",
            "labels": self.labels,
            "entity_types": self.data.entity_types,
            "max_len": self.max_len,
            "prefix_space": self.prefix_space,
            "first_subword": True,
        }


def pad_token_id(tokenizer, model_label: str) -> int:
    pid = tokenizer.pad_token_id
    if pid is None:
        pid = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    if pid is None:
        raise ModelSpecError(f"model '{model_label}': tokenizer has no pad, eos or sep token to pad batches with")
    return int(pid)


def run_token_model(model, chunks: list[Chunk], pad_id: int, batch_size: int, device, autocast=None):
    """Mean loss over labelled tokens and argmax ids per chunk (sorted by length for speed, order restored)."""
    model.eval()
    order = sorted(range(len(chunks)), key=lambda i: len(chunks[i].input_ids))
    preds: list[list[int] | None] = [None] * len(chunks)
    total, count = 0.0, 0
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        batch = pad_batch([{"input_ids": chunks[i].input_ids, "labels": chunks[i].labels} for i in idx], pad_id)
        batch = {k: v.to(device) for k, v in batch.items()}
        labels = batch.pop("labels")
        with autocast() if autocast is not None else contextlib.nullcontext():
            logits = model(**batch).logits
        logits = logits.float()
        valid = labels != IGNORE
        if valid.any():
            total += float(torch.nn.functional.cross_entropy(logits[valid], labels[valid], reduction="sum").item())
            count += int(valid.sum().item())
        am = logits.argmax(-1).cpu()
        for row, i in enumerate(idx):
            preds[i] = am[row, : len(chunks[i].input_ids)].tolist()
    loss = total / count if count else math.nan
    return loss, preds

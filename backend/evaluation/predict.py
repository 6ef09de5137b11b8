"""The NER demo's backend: list the fine-tuned NER models an evaluation kept, and tag free text with any
token-classification model -- one of them or a released one (``tagger``) -- (output shaped for
``gr.HighlightedText``: the whole text as ``(segment, entity_type_or_None)`` pairs). Every model reads the same
words (``split_words``), so side by side their spans start and end at the same places."""

from __future__ import annotations

import re
from pathlib import Path

from backend.core.atomic import read_json
from backend.engine.model_ref import ModelRef

# words, and each punctuation mark between words on its own (as in CoNLL-style data); punctuation inside a word
# stays in it ("Alzheimer's", "IL-2", "Smith-Lemli-Opitz", "3.5"): split off, a model tagged its "'" and "s" as
# two entities, and a highlighted entity must be whole words
_WORD = re.compile(r"\w+(?:['’.\-/]\w+)*|[^\w\s]")


def split_words(text: str) -> list[tuple[str, int, int]]:
    """``(word, start, end)`` for every word / punctuation mark in ``text``."""
    return [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]


def list_finetuned(root: str | Path | None = None, task: str = "ner") -> list[dict]:
    """Saved fine-tuned models under ``root`` (default: the evaluations folder, ``<repo>/evals``), newest first.

    Each item: ``path`` (model folder for ``predict_entities``), ``name`` (a display string), ``model`` (label),
    ``spec`` (what it was fine-tuned from), ``seed``, ``task``, ``primary_metric``, ``f1`` and ``macro_f1``
    (test scores, fractions), ``dev_metric`` (dev score of the primary metric), ``labels`` (entity types for NER,
    class labels otherwise), ``eval_dir``, ``finished_at``.
    ``root`` may be the evaluations folder or a single evaluation's output folder.
    """
    from backend.core.paths import evals_dir

    root = Path(root) if root else evals_dir()
    if not root.exists():
        return []
    seen, out = set(), []
    for pattern in ("models/*/seed-*", "*/models/*/seed-*"):
        for d in root.glob(pattern):
            if d in seen or not d.is_dir() or d.name.startswith("."):
                continue
            seen.add(d)
            lm, m = read_json(d / "label_map.json"), read_json(d / "metrics.json")
            if not lm or not m or m.get("status") != "ok" or not (d / "config.json").exists():
                continue
            if task and lm.get("task") != task:
                continue
            test = m.get("test") or {}
            primary = m.get("primary_metric", "f1")
            score = test.get(primary)
            eval_dir = d.parent.parent.parent
            shown = "?" if score is None else f"{100 * score:.1f}"
            out.append(
                {
                    "path": str(d),
                    "name": f"{m.get('model', d.parent.name)} · seed {m.get('seed')} · test {primary} {shown} "
                    f"· {eval_dir.name}",
                    "model": m.get("model", d.parent.name),
                    "spec": m.get("spec"),
                    "seed": m.get("seed"),
                    "task": lm.get("task"),
                    "primary_metric": primary,
                    "f1": test.get("f1"),
                    "macro_f1": test.get("macro_f1"),
                    "dev_metric": (m.get("dev") or {}).get(primary),
                    "labels": lm.get("entity_types") if lm.get("task") == "ner" else lm.get("labels"),
                    "eval_dir": str(eval_dir),
                    "finished_at": m.get("finished_at") or "",
                }
            )
    out.sort(key=lambda e: (e["finished_at"], e["eval_dir"]), reverse=True)
    return out


def tag_words(model: str | Path | ModelRef, words: list[str]) -> list[str]:
    """IOB2 tags for pretokenized ``words`` with a token-classification model (``tagger.load_tagger``)."""
    return tag_words_batch(model, [words])[0]


def tag_words_batch(model, sentences: list[list[str]], batch_size: int = 32) -> list[list[str]]:
    """IOB2 tags for many pretokenized sentences, ``batch_size`` chunks per forward pass, each word tagged by its
    first piece; an empty sentence gets no tags. ``model``: a fine-tuned model's folder, any token-classification
    model's name, its ``ModelRef``, or a loaded ``Tagger``."""
    from backend.evaluation.ner import decode_chunks, encode_sentences, pad_token_id, run_token_model
    from backend.evaluation.tagger import Tagger, load_tagger

    kept = [i for i, ws in enumerate(sentences) if ws]
    out: list[list[str]] = [[] for _ in sentences]
    if not kept:
        return out
    tagger = model if isinstance(model, Tagger) else load_tagger(model if isinstance(model, ModelRef) else str(model))
    chosen = [sentences[i] for i in kept]
    chunks = encode_sentences(tagger.tokenizer, chosen, tagger.max_len, tagger.prefix_space)
    device = next(tagger.model.parameters()).device
    _, preds = run_token_model(tagger.model, chunks, pad_token_id(tagger.tokenizer, tagger.name), batch_size, device)
    id2label = {i: tagger.labels.iob2(lab) for i, lab in enumerate(tagger.labels.labels)}
    for i, tags in zip(kept, decode_chunks(chunks, preds, [len(ws) for ws in chosen], id2label), strict=True):
        out[i] = tags
    return out


def entity_spans(tags: list[str]) -> list[tuple[int, int, str]]:
    """``(first_word, last_word, type)`` per entity: B-X then I-X of the same type; a stray I-X starts one."""
    spans, cur = [], None
    for i, t in enumerate(tags):
        if t.startswith("I-") and cur is not None and cur[2] == t[2:]:
            cur[1] = i
            continue
        if cur is not None:
            spans.append(tuple(cur))
            cur = None
        if t.startswith(("B-", "I-")):
            cur = [i, i, t[2:]]
    if cur is not None:
        spans.append(tuple(cur))
    return spans


def predict_entities(model: str | Path | ModelRef, text: str) -> list[tuple[str, str | None]]:
    """Tag ``text``: the whole text split into ``(segment, entity_type)`` / ``(segment, None)`` pairs in order,
    ready for ``gr.HighlightedText``. Joining the segments gives ``text`` back."""
    return predict_entities_batch(model, [text])[0]


def predict_entities_batch(model: str | Path | ModelRef, texts: list[str]) -> list[list[tuple[str, str | None]]]:
    """``predict_entities`` for many texts with one model, in one batched pass (the app batches its users). A model
    this lab fine-tuned reads the words it was trained on (``split_words``, CoNLL-style); a released one reads the
    text as transformers' pipeline feeds it (``tagger.released_spans``)."""
    from backend.evaluation.tagger import load_tagger, released_spans

    texts = [t or "" for t in texts]
    tagger = load_tagger(model if isinstance(model, ModelRef) else str(model))
    if not tagger.lab:
        return [spans_to_segments(t, sp) for t, sp in zip(texts, released_spans(tagger, texts), strict=True)]
    words = [split_words(t) for t in texts]
    tags = tag_words_batch(tagger, [[w for w, _, _ in ws] for ws in words])
    return [_segments(t, ws, tg) for t, ws, tg in zip(texts, words, tags, strict=True)]


def spans_to_segments(text: str, spans: list[tuple[int, int, str]]) -> list[tuple[str, str | None]]:
    """The whole ``text`` as (segment, entity type or None) pairs, from ``(start, end, type)`` spans in order."""
    out: list[tuple[str, str | None]] = []
    cursor = 0
    for start, end, typ in sorted(spans):
        if start < cursor:  # overlapping windows' leftovers: the first span kept
            continue
        if start > cursor:
            out.append((text[cursor:start], None))
        out.append((text[start:end], typ))
        cursor = end
    if cursor < len(text):
        out.append((text[cursor:], None))
    return out


def _segments(text: str, words: list[tuple[str, int, int]], tags: list[str]) -> list[tuple[str, str | None]]:
    """The whole ``text`` as (segment, entity type or None) pairs, from its words' tags."""
    if not words:
        return [(text, None)] if text else []
    return spans_to_segments(text, [(words[a][1], words[b][2], typ) for a, b, typ in entity_spans(tags)])

"""The NER demo's backend: list the fine-tuned NER models an evaluation kept, and tag free text with one of them
(output shaped for ``gr.HighlightedText``: the whole text as ``(segment, entity_type_or_None)`` pairs)."""

from __future__ import annotations

import re
import threading
from pathlib import Path

from backend.core.atomic import read_json
from backend.core.errors import ModelSpecError

# words, and each punctuation mark between words on its own (as in CoNLL-style data); punctuation inside a word
# stays in it ("Alzheimer's", "IL-2", "Smith-Lemli-Opitz", "3.5"): split off, a model tagged its "'" and "s" as
# two entities, and a highlighted entity must be whole words
_WORD = re.compile(r"\w+(?:['’.\-/]\w+)*|[^\w\s]")
_CACHE: dict[str, tuple[float, object, object, dict]] = {}
_CACHE_MAX = 3
_LOCK = threading.Lock()


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


def _load(model_dir: Path):
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from backend.engine.models import quiet_transformers

    lm = read_json(model_dir / "label_map.json")
    if lm is None:
        raise ModelSpecError(f"'{model_dir}': not a fine-tuned model folder (no readable label_map.json)")
    if lm.get("task") != "ner":
        raise ModelSpecError(f"'{model_dir}': fine-tuned for {lm.get('task')}, not NER")
    if not (model_dir / "config.json").exists():
        raise ModelSpecError(f"'{model_dir}': the fine-tuned weights were not kept (no config.json)")
    key = str(model_dir.resolve())
    stamp = (model_dir / "label_map.json").stat().st_mtime
    with _LOCK:
        hit = _CACHE.get(key)
        if hit and hit[0] == stamp:
            return hit[1], hit[2], hit[3]
    try:
        with quiet_transformers():
            tok = AutoTokenizer.from_pretrained(model_dir)
            model = AutoModelForTokenClassification.from_pretrained(model_dir, use_safetensors=True)
    except (OSError, ValueError) as exc:
        raise ModelSpecError(f"'{model_dir}': cannot load the fine-tuned model ({exc})") from exc
    model.eval()
    with _LOCK:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = (stamp, tok, model, lm)
    return tok, model, lm


def tag_words(model_dir: str | Path, words: list[str]) -> list[str]:
    """IOB2 tags for pretokenized ``words`` with a fine-tuned NER model folder."""
    return tag_words_batch(model_dir, [words])[0]


def tag_words_batch(model_dir: str | Path, sentences: list[list[str]], batch_size: int = 32) -> list[list[str]]:
    """IOB2 tags for many pretokenized sentences, ``batch_size`` chunks per forward pass; an empty sentence gets
    no tags."""
    from backend.evaluation.ner import decode_chunks, encode_sentences, pad_token_id, run_token_model

    kept = [i for i, ws in enumerate(sentences) if ws]
    out: list[list[str]] = [[] for _ in sentences]
    if not kept:
        return out
    tok, model, lm = _load(Path(model_dir))
    chosen = [sentences[i] for i in kept]
    chunks = encode_sentences(tok, chosen, int(lm.get("max_len", 256)), bool(lm.get("prefix_space", False)))
    device = next(model.parameters()).device
    _, preds = run_token_model(model, chunks, pad_token_id(tok, str(model_dir)), batch_size, device)
    id2label = {int(k): v for k, v in model.config.id2label.items()}
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


def predict_entities(model_dir: str | Path, text: str) -> list[tuple[str, str | None]]:
    """Tag ``text``: the whole text split into ``(segment, entity_type)`` / ``(segment, None)`` pairs in order,
    ready for ``gr.HighlightedText``. Joining the segments gives ``text`` back."""
    return predict_entities_batch(model_dir, [text])[0]


def predict_entities_batch(model_dir: str | Path, texts: list[str]) -> list[list[tuple[str, str | None]]]:
    """``predict_entities`` for many texts with one model, in one batched pass (the app batches its users)."""
    texts = [t or "" for t in texts]
    words = [split_words(t) for t in texts]
    tags = tag_words_batch(model_dir, [[w for w, _, _ in ws] for ws in words])
    return [_segments(t, ws, tg) for t, ws, tg in zip(texts, words, tags, strict=True)]


def _segments(text: str, words: list[tuple[str, int, int]], tags: list[str]) -> list[tuple[str, str | None]]:
    """The whole ``text`` as (segment, entity type or None) pairs, from its words' tags."""
    if not words:
        return [(text, None)] if text else []
    out: list[tuple[str, str | None]] = []
    cursor = 0
    for a, b, typ in entity_spans(tags):
        start, end = words[a][1], words[b][2]
        if start > cursor:
            out.append((text[cursor:start], None))
        out.append((text[start:end], typ))
        cursor = end
    if cursor < len(text):
        out.append((text[cursor:], None))
    return out

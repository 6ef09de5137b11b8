"""Any token-classification model as a tagger: one this lab fine-tuned (its ``label_map.json`` says how it was fed:
window length, the space before each word) or a released one -- a hub id, a model in the Hugging Face cache, a
local folder -- with its own ``id2label``, read the way its users run it: through transformers'
token-classification pipeline at word level (``aggregation_strategy="first"``: each word takes its first piece's
label; ``released_spans``), so the spans shown are the ones ``pipeline("token-classification", model=...)`` finds.

The checks come first, from ``config.json`` and the weights' headers, so a model that cannot tag is refused in one
line before anything loads: a pretrained encoder (its head predicts words, not labels: it tags nothing until it is
fine-tuned), a sequence classifier, and a checkpoint whose classifier has a different number of rows than its
``id2label`` names (transformers would stop on the size mismatch, or tag with a head it re-initialised).

Label schemes: ``B-X`` / ``I-X`` (IOB2, the usual one), BIOES / BILOU (``S-X``, ``E-X``, ``U-X``, ``L-X``, read as
``B-X`` / ``I-X``) and bare types (``X``, read as ``I-X`` as transformers' pipeline reads them). A model's entity
types are its labels without their prefixes, as it names them (``Chemical`` and ``CHEMICAL`` stay two types; the
NER tab gives them one colour).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from backend.core.atomic import read_json
from backend.core.errors import ModelSpecError
from backend.engine import model_files
from backend.engine.model_ref import ModelRef, resolve_model

PREFIXES = {"B": "B", "I": "I", "E": "I", "L": "I", "S": "B", "U": "B"}
RELEASED_MAX_LEN = 512  # a released model's window: its own limits clamp it (``finetune.effective_max_len``)
_CACHE: OrderedDict[tuple, Tagger] = OrderedDict()
_CACHE_MAX = 3
_LOCK = threading.Lock()


class NotATagger(ModelSpecError):
    """The model is not a token-classification model: it tags nothing as it is (the caller says where it is
    fine-tuned: a page's button, a command)."""


@dataclass(frozen=True)
class Labels:
    """A tagger's label set as its config names it: ``labels`` in id order, the entity ``types`` in order of first
    appearance, the ``scheme`` they follow (IOB2, BIOES, bare types)."""

    labels: tuple[str, ...]
    types: tuple[str, ...]
    scheme: str

    def iob2(self, label: str) -> str:
        """The label as IOB2 (``O``, ``B-X``, ``I-X``), as the spans are read."""
        if label == "O":
            return "O"
        prefix, sep, typ = label.partition("-")
        if self.scheme != "bare" and sep and prefix.upper() in PREFIXES:
            return f"{PREFIXES[prefix.upper()]}-{typ}"
        return f"I-{label}"


def read_labels(id2label: dict) -> Labels:
    """``id2label`` (keys as config.json writes them, strings) -> ``Labels``; refused unless the ids are 0..n-1."""
    try:
        by_id = {int(k): str(v) for k, v in id2label.items()}
    except (TypeError, ValueError) as exc:
        raise ModelSpecError(f"its id2label has a key that is not a number ({exc})") from None
    if sorted(by_id) != list(range(len(by_id))):
        raise ModelSpecError(f"its id2label numbers its labels {sorted(by_id)}, not 0 to {len(by_id) - 1}")
    labels = tuple(by_id[i] for i in range(len(by_id)))
    tagged = [lab for lab in labels if lab != "O"]
    prefixed = bool(tagged) and all(lab.partition("-")[0].upper() in PREFIXES and "-" in lab for lab in tagged)
    firsts = {lab.partition("-")[0].upper() for lab in tagged}
    scheme = ("BIOES" if firsts & {"E", "S", "L", "U"} else "IOB2") if prefixed else "bare"
    types: list[str] = []
    for lab in tagged:
        typ = lab.partition("-")[2] if prefixed else lab
        if typ not in types:
            types.append(typ)
    return Labels(labels, tuple(types), scheme)


@dataclass
class Tagger:
    """A loaded tagger: what ``predict.tag_words_batch`` feeds it with and reads its answers by."""

    name: str
    tokenizer: object
    model: object
    labels: Labels
    max_len: int
    prefix_space: bool
    lab: bool  # fine-tuned by this lab (label_map.json)
    pipeline: object = None  # a released model's token-classification pipeline, made when first used


def _config(ref: ModelRef) -> dict:
    try:
        cfg = json.loads((Path(ref.folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelSpecError(f"model '{ref.spec}': unreadable config.json ({exc})") from None
    if not isinstance(cfg, dict):
        raise ModelSpecError(f"model '{ref.spec}': config.json is not a JSON object")
    return cfg


def _head_rows(folder: Path, spec: str) -> int | None:
    """How many labels the classifier's weights give (its ``classifier.weight`` rows, from the safetensors headers);
    None when the weights name no classifier."""
    from safetensors import SafetensorError, safe_open

    try:
        for f in model_files.weight_files(folder, spec):
            with safe_open(str(f), framework="pt") as st:
                for key in st.keys():  # noqa: SIM118 (a safe_open handle is no mapping)
                    if key.endswith("classifier.weight") or key.endswith("classifier.out_proj.weight"):
                        return int(st.get_slice(key).get_shape()[0])
    except (SafetensorError, OSError):
        return None
    return None


def _on_disk(ref: ModelRef) -> ModelRef:
    """A hub model not in the cache is downloaded into it first (its files are checked before anything loads)."""
    if ref.local:
        return ref
    try:
        from huggingface_hub import snapshot_download

        snapshot_download(ref.path, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"])
    except Exception as exc:  # network, auth, missing repo: one clean message
        raise ModelSpecError(
            f"model '{ref.spec}': could not download it from the Hugging Face hub ({type(exc).__name__}); "
            "offline? pick a model you have"
        ) from exc
    return resolve_model(ref.spec)


def check_tagger(source: str | ModelRef) -> Labels:
    """The label set of a token-classification model, checked from its files without loading it: refuses (one
    line) a model that is not one, a lab model fine-tuned for another task, and a head whose size disagrees with
    its ``id2label``."""
    ref = _on_disk(resolve_model(source))
    lm = read_json(Path(ref.folder) / "label_map.json")
    if lm is not None and lm.get("task") not in (None, "ner"):
        raise NotATagger(f"model '{ref.spec}': fine-tuned for {lm.get('task')}, not NER")
    cfg = _config(ref)
    archs = [str(a) for a in cfg.get("architectures") or []]
    if not any(a.endswith("ForTokenClassification") for a in archs):
        what = ", ".join(archs) or f"a {cfg.get('model_type', '?')} model naming no architecture"
        kind = "a pretrained encoder" if any(a.endswith("ForMaskedLM") for a in archs) else "not a token classifier"
        raise NotATagger(
            f"model '{ref.spec}': {kind} ({what}), not a token-classification model: it tags nothing until it is "
            "fine-tuned for NER"
        )
    try:
        labels = read_labels(cfg.get("id2label") or {})
    except ModelSpecError as exc:
        raise ModelSpecError(f"model '{ref.spec}': {exc} (config.json)") from None
    rows = _head_rows(Path(ref.folder), ref.spec)
    n = len(labels.labels)
    if rows is not None and rows != n:
        raise ModelSpecError(
            f"model '{ref.spec}': its classifier gives {rows} labels but its id2label names {n} "
            f"({', '.join(labels.labels[:6])}{' …' if n > 6 else ''}): the checkpoint disagrees with itself; not loaded"
        )
    if isinstance(cfg.get("num_labels"), int) and cfg["num_labels"] != n:
        raise ModelSpecError(
            f"model '{ref.spec}': config.json says num_labels {cfg['num_labels']} but its id2label names {n} labels"
        )
    return labels


def _stamp(ref: ModelRef) -> float:
    folder = Path(ref.folder)
    return max((p.stat().st_mtime for p in folder.iterdir() if p.suffix in (".json", ".safetensors")), default=0.0)


def load_tagger(source: str | ModelRef) -> Tagger:
    """The tagger for a model (a name, resolved here, or the ``ModelRef`` the caller resolved), checked by
    ``check_tagger``; the last few loaded are kept (a re-saved model is loaded again)."""
    from backend.engine.models import load_token_classifier, load_tokenizer, quiet_transformers
    from backend.evaluation.finetune import effective_max_len
    from backend.evaluation.ner import needs_prefix_space, require_fast
    from backend.evaluation.padded_attention import padding_attends_to_itself

    ref = _on_disk(resolve_model(source))
    labels = check_tagger(ref)
    key = (ref.kind, ref.folder, _stamp(ref))
    with _LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    with quiet_transformers():
        tok = load_tokenizer(ref)
        model = load_token_classifier(ref).eval()
    require_fast(tok, ref.spec)
    padding_attends_to_itself(model)  # padded batches of many users' texts: no empty attention rows
    lm = read_json(Path(ref.folder) / "label_map.json")
    if lm is not None:  # the lab's own: fed as it was fine-tuned
        max_len, prefix = int(lm.get("max_len", 256)), bool(lm.get("prefix_space", False))
    else:
        max_len, prefix = effective_max_len(RELEASED_MAX_LEN, tok, model.config), needs_prefix_space(tok)
    model.config.id2label = {i: labels.iob2(lab) for i, lab in enumerate(labels.labels)}  # as the spans are read
    tok.model_max_length = max_len  # the pipeline's windows fit the model's positions
    tagger = Tagger(ref.spec, tok, model, labels, max_len, prefix, lm is not None)
    with _LOCK:
        _CACHE[key] = tagger
        while len(_CACHE) > _CACHE_MAX:
            _CACHE.popitem(last=False)
    return tagger


def released_spans(tagger: Tagger, texts: list[str]) -> list[list[tuple[int, int, str]]]:
    """``(start, end, type)`` of each entity in each text, as transformers' token-classification pipeline finds
    them at word level (``aggregation_strategy="first"``; a text longer than the model's window is read in
    overlapping windows), each span trimmed of the spaces around it."""
    import warnings

    from transformers import pipeline

    if tagger.pipeline is None:
        tagger.pipeline = pipeline("token-classification", model=tagger.model, tokenizer=tagger.tokenizer,
                                   aggregation_strategy="first", stride=max(1, tagger.max_len // 8))  # fmt: skip
    out: list[list[tuple[int, int, str]]] = [[] for _ in texts]
    kept = [i for i, t in enumerate(texts) if t.strip()]
    if not kept:
        return out
    with warnings.catch_warnings():  # "Tokenizer does not support real words, using fallback heuristic", per text
        warnings.simplefilter("ignore")
        found = tagger.pipeline([texts[i] for i in kept], batch_size=8)
    for i, entities in zip(kept, found, strict=True):
        for e in entities:
            start, end, text = int(e["start"]), int(e["end"]), texts[i]
            while start < end and text[start].isspace():
                start += 1
            while end > start and text[end - 1].isspace():
                end -= 1
            if end > start:
                out[i].append((start, end, str(e["entity_group"])))
    return out

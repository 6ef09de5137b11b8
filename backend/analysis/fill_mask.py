"""Fill-mask: top-k predictions for one masked position, for one or more models (CLI and app share this).

The user may write ``[MASK]`` or ``<mask>`` (any case) whatever the model: each is rewritten to the tokenizer's
own mask token. Exactly one mask is allowed; otherwise a DetourError says what was found.

Answers are in words for every word marking (``engine.token_words``): the filled sentence is decoded by the model's
tokenizer (``asp ##irin`` reads ``aspirin``), and each predicted piece is given without its marker (``##``, ``▁``,
``Ġ``); a piece that continues the word before it is labelled ``…s``.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from pathlib import Path

import torch

from backend.core.errors import DetourError
from backend.engine.model_ref import ModelRef
from backend.engine.models import load_masked_lm, load_tokenizer, resolve_model
from backend.engine.token_words import JOINED, piece

MASK_FORMS = re.compile(r"\[mask\]|<mask>", re.IGNORECASE)
MAX_TEXT_CHARS = 2000
_CACHE_SIZE = 4

_cache: OrderedDict[tuple, tuple] = OrderedDict()
_cache_lock = threading.Lock()


class FillMaskError(DetourError):
    pass


def count_masks(text: str) -> int:
    return len(MASK_FORMS.findall(text))


def check_text(text: str) -> str:
    """Refuse text that is empty, too long, or does not hold exactly one mask (before any model is loaded)."""
    if not isinstance(text, str) or not text.strip():
        raise FillMaskError("fill-mask: the text is empty; write a sentence with one [MASK], e.g. 'The [MASK] binds.'")
    if len(text) > MAX_TEXT_CHARS:
        raise FillMaskError(f"fill-mask: the text has {len(text)} characters; at most {MAX_TEXT_CHARS}")
    n = count_masks(text)
    if n == 0:
        raise FillMaskError(
            "fill-mask: no mask token in the text; put [MASK] (or <mask>) where a word should be predicted"
        )
    if n > 1:
        raise FillMaskError(f"fill-mask: found {n} mask tokens; use exactly one [MASK] (or <mask>)")
    return text


def normalise_mask(text: str, mask_token: str) -> str:
    """Rewrite ``[MASK]``/``<mask>`` (any case) to ``mask_token``."""
    return MASK_FORMS.sub(lambda _m: mask_token, text)


def _cache_key(src, trust_remote_code: bool) -> tuple:
    mtime = 0.0
    cfg = Path(src.folder) / "config.json"
    if cfg.exists():
        mtime = cfg.stat().st_mtime
        for w in Path(src.folder).glob("*.safetensors"):
            mtime = max(mtime, w.stat().st_mtime)
    return (src.kind, src.path, mtime, trust_remote_code)


def get_model(spec: str | ModelRef, trust_remote_code: bool = False):
    """(tokenizer, model) for ``spec`` (a name, resolved here, or the ``ModelRef`` the caller resolved), from a
    small LRU cache (a re-saved model is reloaded)."""
    src = resolve_model(spec)  # a ModelRef as it is; a name once: the key and the loads take the reference
    spec = src.spec
    key = _cache_key(src, trust_remote_code)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    tok = load_tokenizer(src, trust_remote_code=trust_remote_code)
    if tok.mask_token is None or tok.mask_token_id is None:
        raise FillMaskError(f"fill-mask: model '{spec}' has no mask token in its tokenizer")
    model = load_masked_lm(src, trust_remote_code=trust_remote_code)
    model.eval()
    with _cache_lock:
        _cache[key] = (tok, model)
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return tok, model


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()


def _predict(spec: ModelRef, text: str, top_k: int, trust_remote_code: bool) -> dict:
    out = predict_batch(spec, [text], [top_k], trust_remote_code)[0]
    if isinstance(out, FillMaskError):
        raise out
    return out


def predict_batch(
    source: str | ModelRef, texts: list[str], top_ks: list[int], trust_remote_code: bool = False
) -> list[dict | FillMaskError]:
    """One model, many sentences in one padded forward pass (the app batches its users' requests): per sentence its
    result dict, or the FillMaskError that sentence got (the others are still answered). A model that cannot load
    raises for all."""
    source = resolve_model(source)
    spec = source.spec
    tok, model = get_model(source, trust_remote_code)
    out: list[dict | FillMaskError | None] = [None] * len(texts)
    masked = [normalise_mask(t, tok.mask_token) for t in texts]
    enc = tok(masked, return_tensors="pt", truncation=True, max_length=512, padding=True)
    ids = enc["input_ids"]
    rows, positions = [], []
    for j in range(len(texts)):
        found = (ids[j] == tok.mask_token_id).nonzero().flatten().tolist()
        if len(found) != 1:
            out[j] = FillMaskError(
                f"fill-mask: model '{spec}': expected one {tok.mask_token} after tokenisation, found {len(found)}"
                + (" (the mask is past the 512-token limit)" if not found else "")
            )
            continue
        rows.append(j)
        positions.append(found[0])
    if rows:
        with torch.inference_mode():
            inputs = {k: v[rows] for k, v in enc.items() if k in ("input_ids", "attention_mask")}
            logits = model(**inputs).logits[torch.arange(len(rows)), torch.tensor(positions)]
        probs_all = torch.softmax(logits.float(), dim=-1)
        for r, (j, pos) in enumerate(zip(rows, positions, strict=True)):
            out[j] = _top_k(spec, tok, ids[j], pos, probs_all[r], top_ks[j])
            if not isinstance(out[j], FillMaskError):
                out[j]["masked_text"] = masked[j]
    return out  # type: ignore[return-value]


def _top_k(spec: str, tok, ids: torch.Tensor, pos: int, probs: torch.Tensor, top_k: int) -> dict | FillMaskError:
    """The ``top_k`` tokens at ``pos`` of one sentence (``ids``: its padded tokens; decoding skips the padding)."""
    if not torch.isfinite(probs).all():  # NaN would print as 'nan%' and sort anywhere
        return FillMaskError(f"fill-mask: model '{spec}' gives NaN or infinite scores: its weights are not finite")
    k = max(1, min(int(top_k), probs.numel()))
    top = torch.topk(probs, k)
    preds = []
    for p, i in zip(top.values.tolist(), top.indices.tolist(), strict=True):
        token, joins = piece(tok, i)
        filled = ids.clone()
        filled[pos] = i
        seq = tok.decode(filled, skip_special_tokens=True)
        preds.append({"token": token, "joins": joins, "label": JOINED + token if joins else token,
                      "token_id": int(i), "prob": float(p), "sequence": seq})  # fmt: skip
    return {"model": spec, "mask_token": tok.mask_token, "predictions": preds}


def fill_mask(
    models: list[str | ModelRef],
    text: str,
    top_k: int = 5,
    trust_remote_code: bool | set[str] | dict[str, bool] = False,
) -> list[dict]:
    """Top-k predictions at the single masked position, one dict per model: ``{"model", "mask_token",
    "masked_text", "predictions": [{"token", "joins", "label", "token_id", "prob", "sequence"}]}`` (``token``: the
    piece in words; ``joins``: it continues the word before it; ``label``: the bar's, ``…s`` for such a piece).

    ``trust_remote_code`` is off unless opted in per model (a set of specs, a dict, or True for all). Each name is
    resolved once, here, unless the caller passes the ``ModelRef`` it resolved.
    """
    check_text(text)
    if not models:
        raise FillMaskError("fill-mask: choose at least one model")
    if not 1 <= int(top_k) <= 50:
        raise FillMaskError(f"fill-mask: top_k={top_k}; allowed 1-50")
    out = []
    for given in models:
        spec = given.spec if isinstance(given, ModelRef) else given
        if isinstance(trust_remote_code, bool):
            trust = trust_remote_code
        elif isinstance(trust_remote_code, dict):
            trust = bool(trust_remote_code.get(spec, False))
        else:
            trust = spec in trust_remote_code
        out.append(_predict(resolve_model(given), text, top_k, trust))
    return out

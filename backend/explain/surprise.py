"""How surprised a model is by every token of one text under each objective: the per-token loss, in nats.

Each objective that declares a per-token view (``per_token``, ``backend/objectives/``) is read with it, under
its own name in the result (``<name>``, ``<name>_mean``, ...; ``views`` lists them in the registry's order). Two views:

* ``next-token`` (CLM, the detour): the text is packed exactly like a training row (``[CLS] text [SEP]`` by
  ``engine.data.pack``), labelled by the trainer's ``clm_labels`` and run through the MLM head under the trainer's
  causal masks. Token t's surprise is the loss at position t-1: it saw only the tokens before it. The mean over the
  labelled tokens is the trainer's CLM loss on this text (tested against ``EncoderLM``). As in training, the first
  word opens a document and is never predicted, and ``[SEP]`` is.
* ``masked-alone`` (MLM): pseudo-log-likelihood. Each non-special token is replaced by the mask token on its own
  (one copy of the text per token, batched) and predicted with the bidirectional mask from everything else. Training
  masks 15-30% of the tokens at once, so this per-token view is easier than the training MLM loss.

The causal pass gives ``causal_attention`` an all-ones padding mask: explicit masks, the same outputs as the sdpa
shortcut that training takes (``tests/detour/test_attention.py``), and no ``is_causal`` flag flipped on a model that
the Fill-mask tab may be running at the same moment.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

from backend import objectives
from backend.analysis.fill_mask import get_model
from backend.core.errors import DetourError
from backend.detour.attention import causal_attention
from backend.engine.data import pack
from backend.engine.model_ref import ModelRef, resolve_model
from backend.engine.token_words import piece_label
from backend.objectives import IGNORE, clm_labels, special_ids

MAX_TOKENS = 128  # the masked view runs one copy of the text per token: its cost grows with the square of this
MAX_TEXT_CHARS = 2000
COPIES_PER_FORWARD = 64  # masked view: copies of the text per forward


class SurpriseError(DetourError):
    pass


def check_text(text: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise SurpriseError("surprise: the text is empty; write a sentence or two")
    if len(text) > MAX_TEXT_CHARS:
        raise SurpriseError(f"surprise: the text has {len(text)} characters; at most {MAX_TEXT_CHARS}")
    return text


def encode(tokenizer, text: str, max_tokens: int = MAX_TOKENS) -> dict:
    """One training row for ``text``: ``ids`` and ``doc_start`` (1, T), each token's piece of the text (the gap
    before it and its own characters) and whether the text was cut to ``max_tokens``."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)  # the call tokenize_documents makes
    doc, offsets = enc["input_ids"], enc["offset_mapping"]
    if not doc:
        raise SurpriseError("surprise: the text has no tokens")
    truncated = len(doc) > max_tokens - 2
    doc, offsets = doc[: max_tokens - 2], offsets[: max_tokens - 2]
    row = pack([doc], len(doc) + 2, tokenizer.cls_token_id, tokenizer.sep_token_id)
    pieces, end = [("", tokenizer.cls_token)], 0
    for start, stop in offsets:
        pieces.append((text[end:start], text[start:stop]))
        end = max(end, stop)
    pieces.append(("", tokenizer.sep_token))
    return {"ids": row.input_ids, "doc_start": row.doc_start, "pieces": pieces, "truncated": truncated}


@torch.inference_mode()
def clm_surprise(model, ids: torch.Tensor, doc_start: torch.Tensor) -> tuple[list, list]:
    """(surprise of each token given the tokens before it, or None; the id the model expected there, or None)."""
    labels = clm_labels(ids, doc_start)[0]
    with causal_attention(model, ids, torch.ones_like(ids), True) as attn:
        logits = model(input_ids=ids, attention_mask=attn).logits[0].float()
    loss = F.cross_entropy(logits, labels.clamp(min=0), reduction="none")
    top = logits.argmax(-1)
    surprise, expected = [None] * ids.shape[1], [None] * ids.shape[1]
    for t in (labels != IGNORE).nonzero().flatten().tolist():  # position t predicts token t + 1
        surprise[t + 1], expected[t + 1] = float(loss[t]), int(top[t])
    return surprise, expected


@contextlib.contextmanager
def _head_sees_only(model, pos: torch.Tensor):
    """The MLM head gets only the hidden state at ``pos[i]`` of row i: the vocabulary projection of every other
    position would be thrown away, and on a small model it costs about as much as the encoder."""
    rows = pos.new_tensor(range(len(pos)))

    def keep(module, args, out):
        out.last_hidden_state = out.last_hidden_state[rows, pos][:, None]
        return out

    handle = model.base_model.register_forward_hook(keep)
    try:
        yield
    finally:
        handle.remove()


@torch.inference_mode()
def pll_surprise(model, ids: torch.Tensor, special: list[int], mask_id: int) -> tuple[list, list]:
    """(surprise of each non-special token when it alone is masked, or None; the id the model expected, or None)."""
    seq = ids[0]
    positions = [t for t, i in enumerate(seq.tolist()) if i not in set(special)]
    surprise, expected = [None] * len(seq), [None] * len(seq)
    for first in range(0, len(positions), COPIES_PER_FORWARD):
        pos = torch.tensor(positions[first : first + COPIES_PER_FORWARD])
        copies = seq.repeat(len(pos), 1)
        copies[torch.arange(len(pos)), pos] = mask_id
        with causal_attention(model, copies, None, False) as attn, _head_sees_only(model, pos):
            logits = model(input_ids=copies, attention_mask=attn).logits[:, 0].float()  # bidirectional: own masks
        loss = F.cross_entropy(logits, seq[pos], reduction="none")
        for p, lo, top in zip(pos.tolist(), loss.tolist(), logits.argmax(-1).tolist(), strict=True):
            surprise[p], expected[p] = lo, top
    return surprise, expected


def _mean(values: list) -> tuple[float | None, int]:
    got = [v for v in values if v is not None]
    return (sum(got) / len(got) if got else None), len(got)


def _token(tokenizer, i: int | None) -> str | None:
    """The expected piece in words (``…irin``: it continues the word before it; no ``##``, ``▁`` or ``Ġ``)."""
    return None if i is None else piece_label(tokenizer, i)


VIEWS = {  # per-token view -> (model, row, tokenizer) -> (surprise, expected id), and what it adds to its name
    "next-token": (lambda model, row, tok: clm_surprise(model, row["ids"], row["doc_start"]), ""),
    "masked-alone": (
        lambda model, row, tok: pll_surprise(model, row["ids"], special_ids(tok), tok.mask_token_id),
        ", one token at a time",
    ),
}


def views() -> list[dict]:
    """The objectives read token by token, in the registry's order: name, what people call the view, colour."""
    out = []
    for o in objectives.all_objectives():
        if o.per_token and o.per_token not in VIEWS:
            raise SurpriseError(f"objective {o.name}: per-token view {o.per_token!r}; known: {', '.join(VIEWS)}")
        if o.per_token:
            out.append({"objective": o.name, "text": o.per_token_text, "note": VIEWS[o.per_token][1],
                        "colour": o.colour})  # fmt: skip
    return out


def surprise_of(tokenizer, model, text: str, max_tokens: int = MAX_TOKENS) -> dict:
    """Every view of one text for one loaded model (see the module docstring)."""
    row = encode(tokenizer, check_text(text), max_tokens)
    specials = special_ids(tokenizer)
    out = {
        "pieces": [list(p) for p in row["pieces"]],
        "special": [i in set(specials) for i in row["ids"][0].tolist()],
        "views": views(),
        "blind_guess": math.log(model.config.vocab_size),  # nats of a uniform guess over the vocabulary
        "truncated": row["truncated"],
    }
    for v in out["views"]:
        name = v["objective"]
        surprise, top = VIEWS[objectives.get(name).per_token][0](model, row, tokenizer)
        out[name], out[f"{name}_expected"] = surprise, [_token(tokenizer, i) for i in top]
        out[f"{name}_mean"], out[f"{name}_count"] = _mean(surprise)
    return out


def token_surprise(specs: list[str | ModelRef], text: str, max_tokens: int = MAX_TOKENS) -> list[dict]:
    """Per-token surprise under each view (next token, masked alone) of ``text`` for each model: a name (resolved
    here, once) or the ``ModelRef`` the caller resolved (models from the fill-mask cache)."""
    check_text(text)
    if not specs:
        raise SurpriseError("surprise: choose at least one model")
    refs = [resolve_model(s) for s in specs]
    return [{"model": ref.spec, **surprise_of(*get_model(ref), text, max_tokens)} for ref in refs]

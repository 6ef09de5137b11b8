"""Per-layer hidden states through forward hooks, pooling, and batched iteration over texts (for CKA).

Layer index convention — the same for every architecture (ModernBERT, BERT family):

* index 0 (``"embeddings"``): the output of the embeddings module, i.e. the input of block 0;
* index i >= 1 (``"block_{i-1}"``): the output of transformer block i-1, before any final norm
  (ModernBERT's ``final_norm`` is not a layer here).

A model with L blocks therefore has L + 1 indices. Hooks sit on ``base.embeddings`` and on each block
(ModernBERT blocks return a tensor, BERT layers a tensor or a tuple: element 0 is taken), so the result
does not depend on how a given transformers version assembles ``output_hidden_states``.

Pooling:

* ``mean``: attention-masked mean over each text's tokens (special tokens included, padding excluded):
  one row per text. This is the paper's protocol (500 held-out texts, max length 512).
* ``token``: one row per token that is neither padding nor a special token ([CLS], [SEP], ...).
  Rows of model A and model B must be the same tokens, so both models must tokenize every text
  identically: :func:`check_same_tokenization` says so clearly otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch

from backend.core.errors import DataError, ModelSpecError
from backend.engine.models import transformer_blocks

POOLINGS = ("mean", "token")
LAYER_CONVENTION = (
    "index 0 = output of the embeddings module (input of block 0); index i >= 1 = output of transformer "
    "block i-1, before any final norm; a model with L blocks has L + 1 indices"
)


def encoder_base(model) -> torch.nn.Module:
    """The bare encoder of a bare or head-carrying model (``.model`` for ModernBERT, ``.bert``/``.roberta``)."""
    for attr in ("model", "bert", "roberta"):
        base = getattr(model, attr, None)
        if isinstance(base, torch.nn.Module):
            return base
    return model


def capture_modules(model) -> list[torch.nn.Module]:
    """The modules whose outputs are the layer indices: embeddings, then every block."""
    base = encoder_base(model)
    emb = getattr(base, "embeddings", None)
    if not isinstance(emb, torch.nn.Module):
        raise ModelSpecError(f"cannot find the embeddings module in {type(model).__name__}")
    return [emb, *transformer_blocks(base)]


def layer_names(model) -> list[str]:
    """``["embeddings", "block_0", ..., "block_{L-1}"]``: the name of each layer index."""
    return ["embeddings"] + [f"block_{i}" for i in range(len(transformer_blocks(encoder_base(model))))]


def max_positions(model) -> int | None:
    """The longest input the model's position embeddings allow (None when unbounded)."""
    cfg = getattr(model, "config", None)
    mpe = getattr(cfg, "max_position_embeddings", None)
    if not mpe:
        return None
    if getattr(cfg, "model_type", "") in ("roberta", "camembert", "xlm-roberta"):
        return int(mpe) - 2  # positions start after padding_idx
    return int(mpe)


class LayerCapture:
    """Context manager: forward hooks on the embeddings and every block.

    After a forward pass, ``outputs[k]`` holds layer index k: the (batch x seq x d) hidden state, or
    ``reduce(hidden)`` when a reducer is given (pooling inside the hook keeps memory at one layer's
    full hidden state at a time).
    """

    def __init__(self, model, reduce: Callable[[torch.Tensor], torch.Tensor] | None = None):
        self.modules = capture_modules(model)
        self.reduce = reduce
        self.outputs: list[torch.Tensor | None] = [None] * len(self.modules)
        self._handles: list = []

    def _hook(self, k: int):
        def fn(_module, _inputs, output):
            h = output[0] if isinstance(output, (tuple, list)) else output
            if not isinstance(h, torch.Tensor) or h.dim() != 3:
                shape = tuple(h.shape) if isinstance(h, torch.Tensor) else type(h).__name__
                raise ModelSpecError(
                    f"layer {k}: expected a (batch x seq x hidden) output, got {shape} "
                    "(unpadded attention kernels are not supported for CKA; use sdpa or eager)"
                )
            self.outputs[k] = self.reduce(h) if self.reduce is not None else h.detach()

        return fn

    def __enter__(self) -> LayerCapture:
        self._handles = [m.register_forward_hook(self._hook(k)) for k, m in enumerate(self.modules)]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


def _device(model) -> torch.device:
    try:
        return next(model.parameters()).device
    except StopIteration:
        return torch.device("cpu")


@torch.inference_mode()
def layer_hidden_states(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> list:
    """One (batch x seq x d) tensor per layer index (see the module docstring for the convention)."""
    base = encoder_base(model)
    dev = _device(base)
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    with LayerCapture(base) as cap:
        base(input_ids=input_ids.to(dev), attention_mask=attention_mask.to(dev))
    return list(cap.outputs)


def encode_texts(tokenizer, texts: Sequence[str], max_len: int) -> dict[str, torch.Tensor]:
    """Tokenize a batch (padding to the longest, truncation at ``max_len`` tokens)."""
    enc = tokenizer(
        list(texts),
        padding=True,
        truncation=True,
        max_length=int(max_len),
        return_special_tokens_mask=True,
        return_tensors="pt",
    )
    return {k: enc[k] for k in ("input_ids", "attention_mask", "special_tokens_mask")}


def feature_mask(enc: dict[str, torch.Tensor], pooling: str) -> torch.Tensor:
    """Which positions contribute: attention mask for ``mean``; non-padding non-special tokens for ``token``."""
    if pooling not in POOLINGS:
        raise DataError(f"pooling: got {pooling!r}; use one of {', '.join(POOLINGS)}")
    mask = enc["attention_mask"].bool()
    if pooling == "token":
        mask = mask & ~enc["special_tokens_mask"].bool()
    return mask


def pool(hidden: torch.Tensor, mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """Rows for CKA from a (batch x seq x d) hidden state.

    ``mean``: one float64 row per text (masked mean). ``token``: the masked positions, batch-major, in the
    model's dtype (float64 conversion happens in the accumulator, chunk by chunk).
    """
    mask = mask.to(hidden.device)
    if pooling == "mean":
        m = mask.to(torch.float64).unsqueeze(-1)
        return (hidden.to(torch.float64) * m).sum(1) / m.sum(1).clamp_min(1.0)
    if pooling == "token":
        return hidden[mask]
    raise DataError(f"pooling: got {pooling!r}; use one of {', '.join(POOLINGS)}")


def batches(items: Sequence, batch_size: int) -> Iterator[Sequence]:
    if batch_size < 1:
        raise DataError(f"batch_size: got {batch_size}; use an integer >= 1")
    for s in range(0, len(items), batch_size):
        yield items[s : s + batch_size]


@torch.inference_mode()
def iter_layer_features(
    model,
    tokenizer,
    texts: Sequence[str],
    *,
    pooling: str = "mean",
    max_len: int = 512,
    batch_size: int = 8,
) -> Iterator[list[torch.Tensor]]:
    """For each batch of ``texts`` (in the given order), one row tensor per layer index.

    Two models compared with CKA must be given the same texts in the same order; their batch sizes may
    differ (rows are per text or per token, so the split only changes speed and memory).
    """
    if pooling not in POOLINGS:
        raise DataError(f"pooling: got {pooling!r}; use one of {', '.join(POOLINGS)}")
    base = encoder_base(model)
    dev = _device(base)
    for chunk in batches(texts, batch_size):
        enc = encode_texts(tokenizer, chunk, max_len)
        mask = feature_mask(enc, pooling).to(dev)
        with LayerCapture(base, reduce=lambda h, mask=mask: pool(h, mask, pooling)) as cap:
            base(input_ids=enc["input_ids"].to(dev), attention_mask=enc["attention_mask"].to(dev))
        yield [o.cpu() for o in cap.outputs]


def check_same_tokenization(
    tok_a,
    tok_b,
    texts: Sequence[str],
    max_len: int,
    *,
    labels: tuple[str, str] = ("A", "B"),
    batch_size: int = 64,
) -> None:
    """Token-level CKA pairs the rows of A and B token by token: both tokenizers must give the same ids
    (and the same special tokens) for every text. Raises a DataError naming the first text that differs."""
    if tok_a is tok_b:
        return
    for s in range(0, len(texts), batch_size):
        chunk = texts[s : s + batch_size]
        ea = tok_a(list(chunk), truncation=True, max_length=max_len, return_special_tokens_mask=True)
        eb = tok_b(list(chunk), truncation=True, max_length=max_len, return_special_tokens_mask=True)
        for k in range(len(chunk)):
            ia, ib = ea["input_ids"][k], eb["input_ids"][k]
            if ia != ib or ea["special_tokens_mask"][k] != eb["special_tokens_mask"][k]:
                preview = chunk[k][:60].replace("\n", " ")
                raise DataError(
                    f"pooling 'token' needs identical tokenizers: models {labels[0]} and {labels[1]} tokenize "
                    f"text #{s + k} ({preview!r}) differently ({len(ia)} vs {len(ib)} tokens; {labels[0]} reads "
                    f"{_as_read(tok_a, ia)!r}, {labels[1]} {_as_read(tok_b, ib)!r}). "
                    "Compare them with pooling 'mean' (one row per text, each model with its own tokenizer)."
                )


def _as_read(tokenizer, ids: list[int], words: int = 8) -> str:
    """The first ``words`` words of a text as a model's tokenizer cuts them, in words with their pieces marked
    (``as·p·ir·in reduce·s``), whatever marks its words (``##``, ``▁``, ``Ġ``)."""
    from backend.engine.token_words import pieces_in_words

    shown = pieces_in_words(tokenizer, ids).split(" ")
    return " ".join(shown[:words]) + (" …" if len(shown) > words else "")

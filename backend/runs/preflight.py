"""Checks that need the model config or the corpus, run before a run directory is created.

Cheap: reads config.json (not the weights) and enough of the corpus to know it fills a batch.
"""

from __future__ import annotations

import torch

from backend.core.errors import ConfigError, DataError
from backend.detour.attention import check_causal_supported
from backend.detour.recipe import build_phases, split_pair
from backend.engine.compiling import cpp_compiler, resolve_compile
from backend.engine.data import iter_documents, pack, split_documents, tokenize_documents
from backend.engine.models import load_config, load_tokenizer, resolve_model, resolve_tokenizer
from backend.engine.tokenstore import cached_info


def tokenizer_for(cfg: dict):
    m = cfg["model"]
    spec = m["tokenizer"] or m["name"]
    return load_tokenizer(resolve_tokenizer(spec), trust_remote_code=m["trust_remote_code"])


def num_layers(cfg: dict) -> int:
    m = cfg["model"]
    if m["name"] == "from_scratch":
        return int(m["from_scratch"].get("num_hidden_layers", 0))
    return int(load_config(resolve_model(m["name"]), m["trust_remote_code"]).num_hidden_layers)


def check(cfg: dict, check_data: bool = True) -> dict:
    """Raise a DetourError for anything that would fail after the run started. Returns facts found."""
    m = cfg["model"]
    if m["name"] != "from_scratch":
        mconf = load_config(resolve_model(m["name"]), m["trust_remote_code"])
        if cfg["recipe"] in ("clm_detour", "pair"):
            check_causal_supported(mconf)
        n_layers = int(mconf.num_hidden_layers)
    else:
        from transformers import AutoConfig

        arch = dict(m["from_scratch"])
        try:
            AutoConfig.for_model(arch.pop("model_type", "modernbert"), **arch)
        except Exception as exc:
            raise ConfigError("model.from_scratch", m["from_scratch"], f"not a valid architecture ({exc})") from exc
        n_layers = int(m["from_scratch"].get("num_hidden_layers", 0))
    # only where compile will really be on (auto is off on CPU, and off without a compiler on GPU)
    if resolve_compile(cfg["train"]["compile"], fsdp=cfg["train"]["fsdp"])[0] and cpp_compiler() is None:
        if not torch.cuda.is_available():
            raise ConfigError(
                "train.compile",
                True,
                "torch.compile on CPU needs a C++ compiler (g++ or clang++): install one or set false (or auto)",
            )
    if cfg["train"]["fsdp"] and not torch.cuda.is_available():
        import accelerate

        from backend.engine.precision import FSDP_NEEDS_GPU

        msg = FSDP_NEEDS_GPU.format(found="no CUDA device", version=accelerate.__version__)
        raise ConfigError("train.fsdp", True, msg)
    for _, run_cfg in split_pair(cfg):  # the phases each run will train, freeze ranges checked against the model
        build_phases(run_cfg, num_layers=n_layers)
    tok = tokenizer_for(cfg)
    if tok.mask_token_id is None:
        raise ConfigError("model.tokenizer", m["tokenizer"] or m["name"], "the tokenizer has no mask token")
    facts = {"num_layers": n_layers}
    if check_data:
        facts.update(_check_batch_fills(cfg, tok))
    return facts


def _check_batch_fills(cfg: dict, tok) -> dict:
    """The training split fills one batch: from a built token store if there is one, else by streaming the
    corpus only until one batch is certainly filled (the whole corpus is read only when it is small)."""
    d = cfg["data"]
    seq_len, bs = cfg["train"]["seq_len"], cfg["train"]["batch_size"]
    cached = cached_info(d, tok, seq_len)
    if cached is not None:
        n_seq, documents = cached["train_sequences"], cached["documents"]
    else:
        frac = 0.0 if d["heldout_file"] else d["heldout_fraction"]
        need = 4 * bs * (seq_len - 1) / (1 - frac)  # ~2 characters per token at most: a 4x margin, held-out docs aside
        sample, got, complete = [], 0, True
        for doc in iter_documents(d["corpus"], d["text_column"], d["hub_split"], d["max_documents"]):
            sample.append(doc)
            got += len(doc) // 2 + 1
            if got > need:
                complete = False
                break
        # the whole (small) corpus: its exact training split; else a prefix big enough with any held-out share
        train_docs = split_documents(sample, frac)[0] if complete and not d["heldout_file"] else sample
        n_seq = len(pack(tokenize_documents(train_docs, tok), seq_len, tok.cls_token_id, tok.sep_token_id))
        documents = len(sample) if complete else f">= {len(sample)} (read until one batch was certainly filled)"
    if n_seq < bs:
        raise DataError(
            f"data.corpus: {d['corpus']} gives {n_seq} training sequences of {seq_len} tokens, fewer than one "
            f"batch ({bs}); use more text, a smaller train.batch_size or a shorter train.seq_len"
        )
    return {"documents": documents}

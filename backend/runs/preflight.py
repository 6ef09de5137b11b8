"""Checks that need the model config or the corpus, run before a run directory is created.

Cheap: reads config.json (not the weights) and enough of the corpus to know it fills a batch.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch

from backend.core.errors import ConfigError, DataError, ModelSpecError
from backend.detour.attention import check_causal_supported
from backend.detour.budget import check_step_fits
from backend.detour.recipe import build_phases, first_causal_phase, split_pair
from backend.engine import model_files
from backend.engine.compiling import cpp_compiler, resolve_compile
from backend.engine.data import iter_documents, pack, skipped_for, split_documents, tokenize_documents
from backend.engine.heldout_guard import check_disjoint
from backend.engine.models import (
    load_config,
    load_tokenizer,
    resolve_attn_implementation,
    resolve_model,
    resolve_tokenizer,
    scratch_config,
)
from backend.engine.precision import check_runs_here
from backend.engine.tokenstore import cached_info
from backend.engine.trackers import check_installed

_ONCE: dict | None = None  # inside ``checks_once``: the expensive checks' answers by what they read


@contextlib.contextmanager
def checks_once():
    """Within it, the checks that read files (the model's config and weights' seal, the tokenizer, the corpus
    filling a batch, the held-out file apart from it) run once per distinct input: a sweep's 1,000 runs over one
    model and corpus were checked 1,000 times (minutes). A failed check is not kept: each run is refused alike."""
    global _ONCE
    outer = _ONCE
    _ONCE = {} if outer is None else outer
    try:
        yield
    finally:
        _ONCE = outer


def _once(key: tuple, check):
    if _ONCE is None:
        return check()
    if key not in _ONCE:
        _ONCE[key] = check()
    return _ONCE[key]


def tokenizer_for(cfg: dict):
    m = cfg["model"]
    spec = m["tokenizer"] or m["name"]
    return _once(("tokenizer", spec, m["tokenizer"], m["trust_remote_code"]), lambda: _tokenizer(spec, m))


def _tokenizer(spec: str, m: dict):
    try:
        return load_tokenizer(resolve_tokenizer(spec), trust_remote_code=m["trust_remote_code"])
    except ModelSpecError as exc:
        if not m["tokenizer"]:
            raise
        raise ModelSpecError(f"model.tokenizer: {exc}") from exc  # the key the user wrote, not model.name


def dense_mask_phase(cfg: dict) -> str | None:
    """The first phase of any run ``cfg`` trains whose rows attend per row (a prefix, or causal and bidirectional
    rows mixed), said in words; None when every phase takes the two masks of each layer kind. Such a phase gets dense
    masks (``attention.py``), which only sdpa and eager take."""
    for _, c in split_pair(cfg):
        for p in build_phases(c):
            if p.attention not in ("bidirectional", "causal"):  # a per-row prefix or per-row attention
                return f"phase '{p.name}' ({p.spec.title}) attends per row ({p.attention})"
    return None


def resolve_run_attention(cfg: dict, model_config) -> tuple[str, str]:
    """``model.attn_implementation`` for this run on this machine -> (implementation, why). ``auto`` is the model's
    choice (``resolve_attn_implementation``: flex or flash on CUDA) unless a phase needs dense per-row masks, then
    sdpa, said in the why; an explicit flex or flash with such a phase is refused, naming the phase."""
    requested = cfg["model"]["attn_implementation"]
    impl, why = resolve_attn_implementation(requested, model_config)  # refuses one that cannot train here
    if impl in ("sdpa", "eager") or (dense := dense_mask_phase(cfg)) is None:
        return impl, why
    if requested == "auto":
        return "sdpa", f"auto: {dense}, whose dense masks only sdpa and eager take (else {impl}: {why})"
    raise ConfigError("model.attn_implementation", requested,
                      f"{dense}: its masks are dense, set model.attn_implementation: auto, sdpa or eager")  # fmt: skip


def check(cfg: dict, check_data: bool = True) -> dict:
    """Raise a DetourError for anything that would fail after the run started. Returns facts found, with
    ``warnings`` (things that train but deserve a look).

    ``check_data`` (launch, ``validate``): also read the corpus and compare a run model's files with their
    manifest; without it (the Launch form, as you type) only the cheap checks run."""
    m = cfg["model"]
    check_installed(cfg["logging"]["report_to"])  # a missing tracker package fails here, before any run directory
    if m["name"] != "from_scratch":
        source, mconf = _once(("model", m["name"], m["trust_remote_code"], check_data),
                              lambda: _model(m, check_data))  # fmt: skip
        if clm := first_causal_phase(cfg):
            check_causal_supported(mconf, clm)
    else:
        try:
            mconf = scratch_config(m["from_scratch"])
        except Exception as exc:
            raise ConfigError("model.from_scratch", m["from_scratch"], f"not a valid architecture ({exc})") from exc
    n_layers = int(mconf.num_hidden_layers)  # from_scratch: the architecture's default when the mapping leaves it out
    resolve_run_attention(cfg, mconf)  # refuses one that cannot train here, or cannot take a phase's masks
    # only where compile will really be on (auto is off on CPU, and off without a compiler on GPU)
    if resolve_compile(cfg["train"]["compile"], fsdp=cfg["train"]["fsdp"])[0] and cpp_compiler() is None:
        if not torch.cuda.is_available():
            raise ConfigError(
                "train.compile",
                True,
                "torch.compile on CPU needs a C++ compiler (g++ or clang++): install one or set false (or auto)",
            )
    check_runs_here(cfg["train"]["precision"], "train.precision")  # fp16 on a CPU would run fp32, recorded fp16
    if cfg["train"]["fsdp"] and not torch.cuda.is_available():
        import accelerate

        from backend.engine.precision import FSDP_NEEDS_GPU

        msg = FSDP_NEEDS_GPU.format(found="no CUDA device", version=accelerate.__version__)
        raise ConfigError("train.fsdp", True, msg)
    tok = tokenizer_for(cfg)
    if tok.mask_token_id is None:
        raise ConfigError("model.tokenizer", m["tokenizer"] or m["name"], "the tokenizer has no mask token")
    pad_id = tok.pad_token_id if m["name"] == "from_scratch" else mconf.pad_token_id  # from_scratch: the tokenizer's
    warning = check_positions(mconf, cfg["train"]["seq_len"], pad_id)
    # after the positions: a seq_len the model cannot take is the error to show, not the step it makes
    for _, run_cfg in split_pair(cfg):  # the phases each run will train, freeze ranges checked against the model
        build_phases(run_cfg, num_layers=n_layers)
        check_step_fits(run_cfg)  # a step larger than a phase's budget is nonsense (and could not be cancelled)
    facts = {"num_layers": n_layers, "warnings": [warning] if warning else []}
    if check_data:
        d, t = cfg["data"], cfg["train"]
        key = (json.dumps(d, sort_keys=True, default=str), t["seq_len"], t["batch_size"], m["tokenizer"] or m["name"])
        facts.update(_once(("data", *key), lambda: _check_batch_fills(cfg, tok)))
        _once(("disjoint", key[0]), lambda: check_disjoint(d))  # a held-out file that is training text: memorised
    return facts


def _model(m: dict, check_data: bool):
    """The model ``model.name`` names, resolved, its config, and its files checked against their seal."""
    source = resolve_model(m["name"])
    mconf = load_config(source, m["trust_remote_code"])
    if source.kind != "hub":  # headers checked when resolved; the manifest too at launch (a hub model has none)
        model_files.verify_seal(Path(source.path), source.spec, checksums=check_data)
    return source, mconf


ABSOLUTE_POSITIONS = ("bert", "roberta", "camembert", "xlm-roberta", "distilbert", "electra", "albert")
PADDING_OFFSET = ("roberta", "camembert", "xlm-roberta")  # position ids start after the padding id


def check_positions(mconf, seq_len: int, pad_token_id: int | None = None) -> str | None:
    """A sequence longer than the model's learned position table fails at the first step (BERT family: "The
    expanded size of the tensor (256) must match the existing size (128)"): refused here. Rotary positions
    (ModernBERT) run past ``max_position_embeddings``, untrained that far: a warning, returned."""
    max_pos = getattr(mconf, "max_position_embeddings", None)
    model_type = getattr(mconf, "model_type", "")
    if not isinstance(max_pos, int):
        return None
    rotary = model_type == "modernbert" or getattr(mconf, "rope_parameters", None) or hasattr(mconf, "rope_theta")
    if rotary:
        if seq_len > max_pos:
            return (
                f"train.seq_len {seq_len} is beyond the model's max_position_embeddings {max_pos}: its rotary "
                "positions extend past it, but the model never saw positions that far"
            )
        return None
    absolute = model_type in ABSOLUTE_POSITIONS and getattr(mconf, "position_embedding_type", "absolute") == "absolute"
    if not absolute:
        return None
    offset = (pad_token_id or 0) + 1 if model_type in PADDING_OFFSET else 0
    if seq_len > max_pos - offset:
        skipped = (
            f", of which the first {offset} are never used: position ids start after the padding id" if offset else ""
        )
        raise ConfigError(
            "train.seq_len",
            seq_len,
            f"the model ({model_type}) has {max_pos - offset} learned absolute positions (max_position_embeddings "
            f"{max_pos}{skipped}); use train.seq_len <= {max_pos - offset}",
        )
    return None


def check_corpus(cfg: dict) -> dict:
    """The corpus part of ``check`` alone (what the Launch form runs in the background when the corpus changes):
    readable text that fills one batch and a held-out sequence. Raises a DataError naming ``data.corpus``."""
    return _check_batch_fills(cfg, tokenizer_for(cfg))


def _check_batch_fills(cfg: dict, tok) -> dict:
    """The training split fills one batch and the held-out text one sequence (an empty held-out set would log a
    held-out loss of 0): from a built token store if there is one, else by streaming the corpus only until one
    batch is certainly filled (the whole corpus is read only when it is small; a held-out file always is)."""
    d = cfg["data"]
    seq_len, bs = cfg["train"]["seq_len"], cfg["train"]["batch_size"]

    def n_rows(docs: list[str]) -> int:
        return len(pack(tokenize_documents(docs, tok), seq_len, tok.cls_token_id, tok.sep_token_id))

    cached = cached_info(d, tok, seq_len)
    n_held = None  # unknown without reading a large corpus whole: training refuses an empty split itself
    if cached is not None:
        n_seq, documents, n_held = cached["train_sequences"], cached["documents"], cached.get("heldout_sequences")
    else:
        frac = 0.0 if d["heldout_file"] else d["heldout_fraction"]
        need = 4 * bs * (seq_len - 1) / (1 - frac)  # ~2 characters per token at most: a 4x margin, held-out docs aside
        sample, got, complete = [], 0, True
        skipped = skipped_for(d)
        for doc in iter_documents(d["corpus"], d["text_column"], d["hub_split"], d["max_documents"], skipped=skipped):
            sample.append(doc)
            got += len(doc) // 2 + 1
            if got > need:
                complete = False
                break
        # the whole (small) corpus: its exact split; else a prefix big enough with any held-out share
        if complete and not d["heldout_file"]:
            train_docs, held_docs = split_documents(sample, frac)
            n_held = n_rows(held_docs)
        else:
            train_docs = sample
        n_seq = n_rows(train_docs)
        documents = len(sample) if complete else f">= {len(sample)} (read until one batch was certainly filled)"
        if d["heldout_file"]:
            try:
                n_held = n_rows(list(iter_documents(d["heldout_file"], d["text_column"], skipped=skipped)))
            except DataError as exc:  # the reader names the corpus key
                raise DataError(str(exc).replace("data.corpus", "data.heldout_file", 1)) from exc
    if n_seq < bs:
        raise DataError(
            f"data.corpus: {d['corpus']} gives {n_seq} training sequences of {seq_len} tokens, fewer than one "
            f"batch ({bs}); use more text, a smaller train.batch_size or a shorter train.seq_len"
        )
    if n_held == 0:
        key, what = (
            ("data.heldout_file", d["heldout_file"]) if d["heldout_file"] else ("data.heldout_fraction", d["corpus"])
        )
        raise DataError(
            f"{key}: the held-out text of {what} is shorter than one sequence of {seq_len} tokens (its loss would "
            f"read 0); use more held-out text, a larger data.heldout_fraction or a shorter train.seq_len"
        )
    return {"documents": documents}

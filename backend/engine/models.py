"""Load a model that ``engine.model_ref`` resolved (the one place a name becomes a model), safely.

Security defaults: weights only from safetensors, ``trust_remote_code`` off unless the
caller opts in per model. Offline-friendly: a hub id that cannot be reached gives a
specific error instead of a stack trace.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from backend.core.errors import ConfigError, ModelSpecError
from backend.engine import model_files
from backend.engine.model_ref import (  # noqa: F401 (the loaders' callers read them here too)
    ModelRef,
    bundled_models,
    resolve_model,
    resolve_tokenizer,
)

# Families whose attention we can make causal (see backend/attention.py).
CAUSAL_FAMILIES = {
    "modernbert": "modernbert",
    "bert": "bert",
    "roberta": "bert",
    "camembert": "bert",
    "xlm-roberta": "bert",
}


def _hub_guard(source: ModelRef, exc: Exception) -> ModelSpecError:
    from backend.engine.hub_cache import is_cached, not_available

    if not is_cached(source.spec):  # said plainly: neither cached nor reachable
        first = str(exc).splitlines()[0] if str(exc) else ""
        return ModelSpecError(f"{not_available(source.spec)} ({type(exc).__name__}: {first})")
    return ModelSpecError(
        f"model '{source.spec}': could not load from the Hugging Face hub ({type(exc).__name__}: "
        f"{str(exc).splitlines()[0] if str(exc) else ''}). Offline? Use a bundled model "
        f"({', '.join(bundled_models())}) or a local folder."
    )


# what a malformed local tokenizer.json raises inside transformers and tokenizers: '{}' a KeyError ('added_tokens'),
# a 3,000-deep nesting a RecursionError, a string where a list belongs an AttributeError, and the tokenizers
# library's own parse errors a bare Exception ("data did not match any variant of untagged enum ModelUntagged")
MALFORMED_FILE = (Exception, RecursionError)


@contextlib.contextmanager
def _loading(source: ModelRef, problem: str, malformed: tuple[type[BaseException], ...] = ()):
    """transformers' OSError/ValueError as one ModelSpecError: for a hub id the offline hint, else ``problem``
    (what was wrong with the local files) and the original message. ``malformed``: what a damaged local file makes
    the library raise besides (a local file's content is the user's to fix, not a bug of ours)."""
    try:
        yield
    except (OSError, ValueError) as exc:
        if source.kind == "hub":
            raise _hub_guard(source, exc) from exc
        raise ModelSpecError(f"model '{source.spec}': {problem} ({exc})") from exc
    except malformed as exc:
        if source.kind == "hub" and source.snapshot is None:
            raise
        what = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        raise ModelSpecError(f"model '{source.spec}': {problem}: a file there is malformed ({what})") from exc


def load_config(source: ModelRef, trust_remote_code: bool = False):
    from transformers import AutoConfig

    source = resolve_model(source)
    with _loading(source, "unreadable config.json"):
        return AutoConfig.from_pretrained(source.folder, trust_remote_code=trust_remote_code)


def model_family(config) -> str | None:
    """'modernbert' or 'bert' when attention can be made causal, else None."""
    return CAUSAL_FAMILIES.get(getattr(config, "model_type", ""))


def load_tokenizer(source: ModelRef | str, trust_remote_code: bool = False):
    """The model's own tokenizer; one shipped without a decoder gets the one its word marking implies
    (``token_words.complete_decoder``: a WordPiece tokenizer.json without one decoded ``asp ##irin``)."""
    from transformers import AutoTokenizer

    from backend.engine.token_words import complete_decoder

    source = resolve_tokenizer(source)
    if source.local:
        check_tokenizer_json(Path(source.folder), source.spec)
    with _loading(source, f"no usable tokenizer in {source.folder}", MALFORMED_FILE):
        return complete_decoder(AutoTokenizer.from_pretrained(source.folder, trust_remote_code=trust_remote_code))


def check_tokenizer_json(folder: Path, spec: str) -> None:
    """A tokenizer.json that is not the tokenizers library's file, named before transformers reads it: not JSON,
    nested past what a parser follows, or without the ``model`` and ``added_tokens`` every such file has."""
    import json

    p = folder / "tokenizer.json"
    if not p.is_file():
        return
    try:
        d = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        why = "nested too deep to read" if isinstance(exc, RecursionError) else f"not JSON ({exc})"
        raise ModelSpecError(f"model '{spec}': {p} is {why}; restore the tokenizer's files") from None
    missing = [k for k in ("model", "added_tokens") if not isinstance(d, dict) or k not in d]
    if missing:
        raise ModelSpecError(
            f"model '{spec}': {p} is not a tokenizer file (no {' and no '.join(repr(k) for k in missing)}); "
            "restore the tokenizer's files"
        )


def _load(
    auto_cls,
    source: ModelRef | str,
    *,
    dtype=None,
    attn_implementation: str | None = None,
    trust_remote_code: bool = False,
    **kwargs,
):
    source = resolve_model(source)
    if source.kind != "hub":  # a file altered since its run sealed it is named here, not deep inside transformers
        model_files.verify_seal(Path(source.path), source.spec)
    if attn_implementation == "auto":
        attn_implementation = resolve_attn_implementation("auto", load_config(source, trust_remote_code))[0]
    with _loading(source, f"could not load weights from {source.folder}"):
        model = auto_cls.from_pretrained(
            source.folder,
            dtype=dtype if dtype is not None else torch.float32,
            attn_implementation=attn_implementation,
            trust_remote_code=trust_remote_code,
            use_safetensors=True,
            **kwargs,
        )
    check_finite_weights(model, source.spec)
    return model


def check_finite_weights(model: torch.nn.Module, spec: str) -> None:
    """Refuse a model with NaN or infinite weights, for every loader alike (CKA, weight statistics, explain,
    evaluation, training): with them CKA printed '-' cells and exit 0, and fine-tuning trained on NaN."""
    bad = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_floating_point()
           and not bool(torch.isfinite(t).all())]  # fmt: skip
    if bad:
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise ModelSpecError(
            f"model '{spec}': its weights are not finite (NaN or infinity in {', '.join(bad[:3])}{more}); the model "
            "diverged or its file is damaged: use an earlier checkpoint or another model"
        )


def load_masked_lm(source: ModelRef | str, **kwargs):
    """An encoder with its MLM head (training, fill-mask)."""
    from transformers import AutoModelForMaskedLM

    return _load(AutoModelForMaskedLM, source, **kwargs)


def load_token_classifier(source: ModelRef | str, **kwargs):
    """A token-classification model with its own head (a fine-tuned or released NER tagger)."""
    from transformers import AutoModelForTokenClassification

    return _load(AutoModelForTokenClassification, source, **kwargs)


def load_encoder(source: ModelRef | str, **kwargs):
    """The bare encoder (hidden states for CKA)."""
    from transformers import AutoModel

    return _load(AutoModel, source, **kwargs)


def transformer_blocks(model) -> list[torch.nn.Module]:
    """The list of transformer blocks, for any supported family (bare or with a head)."""
    base = getattr(model, "model", None) or getattr(model, "bert", None) or getattr(model, "roberta", None) or model
    if hasattr(base, "layers"):  # ModernBERT
        return list(base.layers)
    enc = getattr(base, "encoder", None)
    if enc is not None and hasattr(enc, "layer"):  # BERT family
        return list(enc.layer)
    raise ModelSpecError(f"cannot find transformer blocks in {type(model).__name__}")


def parameter_groups(hf_model: torch.nn.Module) -> dict[str, list[str]]:
    """Parameter names by group: 'layer.<i>', 'embeddings' (with tied weights: the decoder matrix too), 'head'."""
    owner: dict[int, str] = {}
    for i, block in enumerate(transformer_blocks(hf_model)):
        for p in block.parameters():
            owner[id(p)] = f"layer.{i}"
    base = getattr(hf_model, "model", None) or getattr(hf_model, "bert", None) or getattr(hf_model, "roberta", None)
    emb = getattr(base, "embeddings", None)
    if emb is not None:
        for p in emb.parameters():
            owner.setdefault(id(p), "embeddings")
    groups: dict[str, list[str]] = {}
    for name, p in hf_model.named_parameters():
        groups.setdefault(owner.get(id(p), "head"), []).append(name)
    return groups


def special_token_ids(tokenizer) -> dict[str, int]:
    """pad/cls/sep/bos/eos/mask ids from the tokenizer: ModernBERT's defaults (50281-50284) are wrong
    for any other vocabulary."""
    ids = {
        "pad_token_id": tokenizer.pad_token_id,
        "cls_token_id": tokenizer.cls_token_id,
        "sep_token_id": tokenizer.sep_token_id,
        "bos_token_id": tokenizer.cls_token_id if tokenizer.bos_token_id is None else tokenizer.bos_token_id,
        "eos_token_id": tokenizer.sep_token_id if tokenizer.eos_token_id is None else tokenizer.eos_token_id,
    }
    return {k: v for k, v in ids.items() if v is not None}


def scratch_config(arch: dict, **extra):
    """The HF config of an architecture dict (``model_type`` picks the family, default ModernBERT)."""
    from transformers import AutoConfig

    arch = dict(arch)
    return AutoConfig.for_model(arch.pop("model_type", "modernbert"), **arch, **extra)


def build_from_scratch(arch: dict, tokenizer, attn_implementation: str = "sdpa"):
    """A randomly initialised MLM model from an architecture dict (``model_type`` picks the family).

    ``vocab_size`` and special-token ids always come from the tokenizer.
    """
    from transformers import AutoModelForMaskedLM

    config = scratch_config(arch, vocab_size=len(tokenizer), **special_token_ids(tokenizer))
    if attn_implementation == "auto":
        attn_implementation = resolve_attn_implementation("auto", config)[0]
    return AutoModelForMaskedLM.from_config(config, attn_implementation=attn_implementation)


# --- which attention kernel a model trains with (model.attn_implementation) -----------------------------------------


def flash_attn_status() -> tuple[bool, str]:
    """(usable, its version or why not): flash_attention_2 needs a CUDA device and flash-attn >= 2.3.3 that imports
    (transformers checks the version; a wheel built for another torch only fails when imported)."""
    from transformers.utils import is_flash_attn_2_available

    if not torch.cuda.is_available():
        return False, "no CUDA device"
    try:
        import flash_attn
    except Exception as exc:  # ImportError, or a broken build (undefined symbol) raising something else
        first = str(exc).splitlines()[0] if str(exc) else ""
        return False, f"flash_attn does not import ({type(exc).__name__}: {first})"
    if not is_flash_attn_2_available():
        return False, f"flash_attn {getattr(flash_attn, '__version__', '?')} is older than transformers accepts (2.3.3)"
    return True, f"flash_attn {getattr(flash_attn, '__version__', '?')}"


def model_config_of(model: dict):
    """The HF config that the ``model`` section of an experiment config will load with (no weights read)."""
    if model["name"] == "from_scratch":
        return scratch_config(model["from_scratch"] or {})
    return load_config(resolve_model(model["name"]), trust_remote_code=model.get("trust_remote_code", False))


def resolve_attn_implementation(requested: str, config, device: str | None = None) -> tuple[str, str]:
    """``model.attn_implementation`` -> (implementation to train with, why), decided on the machine that trains.

    ``auto``: for ModernBERT on CUDA, flash_attention_2 when flash-attn imports, else flex_attention (transformers'
    BlockMasks: local layers cost O(T*w) instead of sdpa's dense T x T mask, 1.5x at seq 8192 on an H100); anything
    else gets sdpa, the old default: on a CPU (torch has no flex_attention backward there), for BERT-family models
    (their causal switch is a 4D mask, which flash cannot take and flex would gain nothing from) and for a model with
    attention dropout (flex_attention has none). Explicit values are kept, but one that cannot train here is refused
    now, with the reason, rather than at the first step.
    """
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    modernbert = model_family(config) == "modernbert"
    dropout = float(getattr(config, "attention_dropout", 0.0) or 0.0)
    if requested != "auto":
        why_not = None
        if requested == "flex_attention" and device != "cuda":
            why_not = f"flex_attention trains only on CUDA (torch {torch.__version__} has no flex backward on CPU)"
        elif requested == "flex_attention" and dropout > 0:
            why_not = f"flex_attention has no attention dropout (the model's attention_dropout is {dropout})"
        elif requested == "flash_attention_2" and not (status := flash_attn_status())[0]:
            why_not = f"flash_attention_2 cannot run here: {status[1]} (pip install -r requirements-gpu.txt on a GPU)"
        if why_not:
            raise ConfigError("model.attn_implementation", requested, f"{why_not}; use auto or sdpa")
        return requested, "set in the config"
    if device != "cuda":
        return "sdpa", "auto: no CUDA device (flex_attention has no backward on CPU)"
    if not modernbert:
        return "sdpa", f"auto: {getattr(config, 'model_type', '?')} is not ModernBERT (no sliding windows to save)"
    flash_ok, flash_why = flash_attn_status()
    if flash_ok:
        return "flash_attention_2", f"auto: {flash_why} on CUDA"
    if dropout > 0:
        return "sdpa", f"auto: {flash_why}, and flex_attention has no attention dropout ({dropout})"
    return "flex_attention", f"auto: {flash_why}; flex_attention keeps the sliding windows sparse"


@contextlib.contextmanager
def quiet_transformers():
    """Silence transformers' warnings and progress bars while loading or saving (restored afterwards): logs and
    the app's output stay readable (no per-save bars, no benign shared-tensor or unused-weight notices)."""
    import logging

    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    acc_levels = {n: logging.getLogger(n).level for n in ("accelerate.utils.other", "accelerate.checkpointing")}
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    logging.getLogger("accelerate.utils.other").setLevel(logging.ERROR)
    logging.getLogger("accelerate.checkpointing").setLevel(logging.WARNING)
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
        for n, lv in acc_levels.items():
            logging.getLogger(n).setLevel(lv)

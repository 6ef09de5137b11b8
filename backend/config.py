"""Experiment config: defaults, YAML loading, ``--set key=value`` overrides and validation.

Validation runs before anything heavy (no model or data is loaded here except to check that a
path exists) and every error names the key, the bad value and what is allowed.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError
from .paths import DEFAULT_MODEL

RECIPES = ("clm_detour", "mlm", "pair", "pretrain")
PRECISIONS = ("fp32", "bf16", "fp16")
ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flash_attention_2")
DECAY_SHAPES = ("1-sqrt", "linear")

DEFAULTS: dict[str, Any] = {
    "name": "detour",
    "recipe": "pair",
    "model": {
        "name": DEFAULT_MODEL,  # bundled name | local dir | run dir | hub id | "from_scratch"
        "from_scratch": None,  # architecture dict (ModernBertConfig kwargs + model_type) when name == from_scratch
        "tokenizer": None,  # defaults to the model's own tokenizer
        "attn_implementation": "sdpa",
        "trust_remote_code": False,
    },
    "data": {
        "corpus": "demo",  # "demo" | file or folder (.txt/.jsonl/.parquet/.csv) | hub dataset id
        "text_column": "text",
        "hub_split": "train",
        "heldout_fraction": 0.05,
        "heldout_file": None,
        "max_documents": None,
    },
    "train": {
        "seq_len": 256,
        "batch_size": 16,
        "grad_accum": 1,
        "precision": "fp32",
        "seed": 0,
        # Data order; None = same as seed. A seed-noise control keeps it and changes ``seed`` only, so the two
        # runs see the same sequences in the same order and differ only in masks and initialisation noise.
        "data_seed": None,
        "lr": 2.0e-4,
        "betas": [0.9, 0.98],
        "eps": 1.0e-6,
        # Decoupled (Composer-style) weight decay: each step shrinks weights by wd * lr/peak_lr.
        "weight_decay": 1.0e-5,
        "warmup_tokens": None,  # default: 10% of the main phase
        "max_grad_norm": 1.0,
        "fsdp": False,
        # torch.compile the encoder (inductor), after a one-off compile per attention mode (about half a minute on
        # 2 cores). Measured here (bench/bench_train.py): MLM 1.2x tokens/s, CLM no gain.
        "compile": False,
    },
    "phases": {
        "warmup": {"tokens": 0, "steps": None, "mlm_probability": 0.30},
        "main": {
            "tokens": 200_000,
            "steps": None,
            "mlm_probability": 0.30,  # used by recipe mlm / pretrain; clm_detour trains next-token
            "freeze": {"layers": None, "embeddings": False, "head": False},
        },
        "decay": {
            "fraction": 0.10,
            "tokens": None,
            "steps": None,
            "mlm_probability": 0.15,
            "shape": "1-sqrt",
            "final_lr_ratio": 0.10,
            "freeze": {"layers": None, "embeddings": False, "head": False},
        },
    },
    "logging": {
        "log_every": 5,
        "eval_every": 25,
        "eval_batches": 8,
        "checkpoint_every": 100,
        "keep_checkpoints": 2,
    },
}


def default_config() -> dict:
    return copy.deepcopy(DEFAULTS)


def with_defaults(saved: dict) -> dict:
    """A run's saved config over today's defaults: keys added since the run was made take their default (which
    keeps the old behaviour: ``train.data_seed`` None follows the seed, ``train.compile`` is off)."""
    return _merge(default_config(), copy.deepcopy(saved))


def _merge(base: dict, over: dict, prefix: str = "") -> dict:
    for k, v in over.items():
        key = f"{prefix}{k}"
        if k == "_meta":
            base[k] = v
            continue
        if k not in base:
            raise ConfigError(key, v, f"unknown key; allowed here: {', '.join(sorted(base)) or '(none)'}")
        if isinstance(base[k], dict) and isinstance(v, dict) and k != "from_scratch":
            _merge(base[k], v, key + ".")
        else:
            base[k] = v
    return base


def parse_override(item: str) -> tuple[str, Any]:
    """``train.lr=1e-4`` -> ("train.lr", 0.0001); values are parsed as YAML scalars/lists."""
    if "=" not in item:
        raise ConfigError("--set", item, "expected key=value, e.g. train.lr=1e-4")
    key, raw = item.split("=", 1)
    key = key.strip()
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    # YAML 1.1 reads "1e-4" as a string: accept it as a float.
    if isinstance(value, str) and re.fullmatch(r"[-+]?\d+(\.\d*)?[eE][-+]?\d+", value):
        value = float(value)
    return key, value


def apply_override(cfg: dict, key: str, value: Any, scope: str | None = None) -> None:
    """Set a dotted ``key`` in a nested dict; only existing keys (``scope`` names the dict in errors)."""
    node = cfg
    parts = key.split(".")
    for i, p in enumerate(parts[:-1]):
        if not isinstance(node.get(p), dict):
            where = f" of the {scope}" if scope else ""
            raise ConfigError(key, value, f"'{'.'.join(parts[: i + 1])}' is not a section{where}")
        node = node[p]
    if parts[-1] not in node:
        raise ConfigError(
            key, value, f"unknown {scope + ' ' if scope else ''}key; allowed here: {', '.join(sorted(node))}"
        )
    node[parts[-1]] = value


def load_config(path: str | Path | dict | None = None, overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Defaults <- YAML file (or dict) <- ``--set`` overrides, then validated."""
    cfg = default_config()
    if isinstance(path, dict):
        _merge(cfg, copy.deepcopy(path))
    elif path is not None:
        p = Path(path)
        if not p.exists():
            raise ConfigError("config", str(path), "no such file")
        try:
            raw = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise ConfigError("config", str(path), f"not valid YAML ({exc})") from exc
        if not isinstance(raw, dict):
            raise ConfigError("config", str(path), "the top level must be a mapping")
        _merge(cfg, raw)
    for item in overrides:
        apply_override(cfg, *parse_override(item))
    return validate_config(cfg)


# --- validation -------------------------------------------------------------------------------


def _num(cfg: dict, key: str, *, lo=None, hi=None, lo_open=False, hi_open=False, integer=False, optional=False):
    node = cfg
    for p in key.split("."):
        node = node[p]
    v = node
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not float(v).is_integer()):
        raise ConfigError(key, v, f"expected {'an integer' if integer else 'a number'}")
    left, right = ("(" if lo_open else "["), (")" if hi_open else "]")
    rng = f"{left}{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}{right}"
    if lo is not None and (v < lo or (lo_open and v == lo)):
        raise ConfigError(key, v, f"must be in {rng}")
    if hi is not None and (v > hi or (hi_open and v == hi)):
        raise ConfigError(key, v, f"must be in {rng}")
    return int(v) if integer else float(v)


def _choice(value, key: str, allowed: tuple[str, ...]):
    if value not in allowed:
        raise ConfigError(key, value, f"allowed: {', '.join(allowed)}")
    return value


def parse_layer_range(value, key: str, num_layers: int | None = None) -> list[int]:
    """'0-7' -> [0..7]; '8-14' ; '3' ; [0, 1, 2]; None/'' -> []."""
    if value is None or value == "" or value == []:
        return []
    if isinstance(value, int) and not isinstance(value, bool):
        layers = [value]
    elif isinstance(value, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        layers = list(value)
    elif isinstance(value, str) and re.fullmatch(r"\s*\d+\s*(-\s*\d+\s*)?(,\s*\d+\s*(-\s*\d+\s*)?)*", value):
        layers = []
        for part in value.split(","):
            a, _, b = part.partition("-")
            lo, hi = int(a), int(b) if b.strip() else int(a)
            if hi < lo:
                raise ConfigError(key, value, "a range must go low-high, e.g. '0-7'")
            layers.extend(range(lo, hi + 1))
    else:
        raise ConfigError(key, value, "expected a layer range like '0-7', '8-14', '0-3,6' or a list of indices")
    if num_layers is not None:
        bad = [i for i in layers if i < 0 or i >= num_layers]
        if bad:
            raise ConfigError(key, value, f"the model has {num_layers} layers (0-{num_layers - 1}); {bad} outside it")
    return sorted(set(layers))


def validate_config(cfg: dict) -> dict:
    """Check types and ranges of every key; fill derived defaults. Returns the same dict."""
    from .rundir import check_run_name

    check_run_name(cfg["name"])
    _choice(cfg["recipe"], "recipe", RECIPES)

    m = cfg["model"]
    if not isinstance(m["name"], str) or not m["name"].strip():
        raise ConfigError(
            "model.name", m["name"], "give a bundled name, a local folder, a run directory, a hub id or 'from_scratch'"
        )
    if m["name"] == "from_scratch":
        if not isinstance(m["from_scratch"], dict) or not m["from_scratch"]:
            raise ConfigError(
                "model.from_scratch",
                m["from_scratch"],
                "with model.name: from_scratch, give an architecture mapping (e.g. num_hidden_layers, hidden_size)",
            )
        if m["tokenizer"] is None:
            raise ConfigError(
                "model.tokenizer", None, "from_scratch needs a tokenizer (a folder, a hub id, or a bundled model name)"
            )
    elif cfg["recipe"] == "pretrain":
        raise ConfigError(
            "recipe", "pretrain", "pretrain trains from scratch: set model.name: from_scratch and model.from_scratch"
        )
    _choice(m["attn_implementation"], "model.attn_implementation", ATTN_IMPLEMENTATIONS)
    if not isinstance(m["trust_remote_code"], bool):
        raise ConfigError("model.trust_remote_code", m["trust_remote_code"], "expected true or false")

    d = cfg["data"]
    if not isinstance(d["corpus"], str) or not d["corpus"].strip():
        raise ConfigError(
            "data.corpus", d["corpus"], "give 'demo', a file or folder (.txt/.jsonl/.parquet/.csv), or a hub dataset id"
        )
    _num(cfg, "data.heldout_fraction", lo=0, hi=0.5, hi_open=True)
    if d["heldout_file"] is not None and not Path(d["heldout_file"]).exists():
        raise ConfigError("data.heldout_file", d["heldout_file"], "no such file")
    if d["heldout_file"] is None and d["heldout_fraction"] == 0:
        raise ConfigError(
            "data.heldout_fraction", 0, "needs a held-out split: a fraction in (0, 0.5) or data.heldout_file"
        )
    _num(cfg, "data.max_documents", lo=1, integer=True, optional=True)

    t = cfg["train"]
    _num(cfg, "train.seq_len", lo=8, hi=65536, integer=True)
    _num(cfg, "train.batch_size", lo=1, integer=True)
    _num(cfg, "train.grad_accum", lo=1, integer=True)
    _choice(t["precision"], "train.precision", PRECISIONS)
    _num(cfg, "train.seed", lo=0, integer=True)
    _num(cfg, "train.data_seed", lo=0, integer=True, optional=True)
    _num(cfg, "train.lr", lo=0, lo_open=True, hi=1)
    if not (
        isinstance(t["betas"], list)
        and len(t["betas"]) == 2
        and all(isinstance(b, (int, float)) and 0 <= b < 1 for b in t["betas"])
    ):
        raise ConfigError("train.betas", t["betas"], "expected two numbers in [0, 1), e.g. [0.9, 0.98]")
    _num(cfg, "train.eps", lo=0, lo_open=True)
    _num(cfg, "train.weight_decay", lo=0)
    _num(cfg, "train.warmup_tokens", lo=0, integer=True, optional=True)
    _num(cfg, "train.max_grad_norm", lo=0, optional=True)
    for key in ("fsdp", "compile"):
        if not isinstance(t[key], bool):
            raise ConfigError(f"train.{key}", t[key], "expected true or false")
    if t["fsdp"] and t["compile"]:
        raise ConfigError("train.compile", True, "not supported together with train.fsdp here; set one of them false")

    ph = cfg["phases"]
    for name in ("warmup", "main", "decay"):
        for k in ("tokens", "steps"):
            _num(cfg, f"phases.{name}.{k}", lo=0, integer=True, optional=True)
        _num(cfg, f"phases.{name}.mlm_probability", lo=0, hi=1, lo_open=True, hi_open=True)
    if not (ph["main"]["tokens"] or ph["main"]["steps"]):
        raise ConfigError(
            "phases.main.tokens", ph["main"]["tokens"], "the main phase needs a budget > 0 (tokens or steps)"
        )
    _num(cfg, "phases.decay.fraction", lo=0, hi=1)
    _choice(ph["decay"]["shape"], "phases.decay.shape", DECAY_SHAPES)
    _num(cfg, "phases.decay.final_lr_ratio", lo=0, hi=1)
    for name in ("main", "decay"):
        fr = ph[name]["freeze"]
        if not isinstance(fr, dict):
            raise ConfigError(f"phases.{name}.freeze", fr, "expected a mapping with layers, embeddings, head")
        unknown = set(fr) - {"layers", "embeddings", "head"}
        if unknown:
            raise ConfigError(
                f"phases.{name}.freeze.{sorted(unknown)[0]}",
                fr[sorted(unknown)[0]],
                "allowed keys: layers, embeddings, head",
            )
        fr.setdefault("layers", None)
        fr.setdefault("embeddings", False)
        fr.setdefault("head", False)
        parse_layer_range(fr["layers"], f"phases.{name}.freeze.layers")
        for k in ("embeddings", "head"):
            if not isinstance(fr[k], bool):
                raise ConfigError(f"phases.{name}.freeze.{k}", fr[k], "expected true or false")

    for k in ("log_every", "eval_every", "eval_batches", "checkpoint_every"):
        _num(cfg, f"logging.{k}", lo=1, integer=True)
    _num(cfg, "logging.keep_checkpoints", lo=1, integer=True)
    return cfg


def config_to_yaml(cfg: dict) -> str:
    return yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True)

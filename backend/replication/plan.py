"""What a mini replication trains and measures, as data: the presets, the five encoders (keys, run names,
labels), the settings a preset resolves to (paths, the model's depth and its thirds), a time estimate, the run
configs and the names of the plan's steps.

It is the bottom of ``backend.replication``: the steps, the orchestration and the report all read it, and it
imports none of them, so the report can name runs and steps without importing the code that makes them.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

from backend.core.errors import ConfigError, DetourError
from backend.core.paths import BUNDLED_MODELS_DIR, DEFAULT_MODEL, DEMO_CORPUS, DEMO_NER_DIR, shared_data

VERSION = 1
RUN_PREFIX = "rep"

# Fine-tuning lr 1e-3 (the paper: 5e-5 for 150M+ models): calibrated on the 6-layer d=256 base, where 3e-4 barely
# learns NER from 160 sentences in 3 epochs (test F1 2-16) and 1e-3 reaches 37-39; on 800 sentences 5e-4 and 1e-3
# give 64.5 and 66.8 (one seed each).
# Small batches on purpose: the decay is 10% of the main phase (the paper's fraction), and at these budgets it
# must still be enough optimizer steps for the detour to get back to MLM (quick: 79 + 8 steps, mini: 245 + 25).
# Budgets are tokens of the main phase (CLM for the detour, MLM 30% for the baseline) per run; the decay phase
# (bidirectional MLM 15%, 1-sqrt LR decay) adds ``decay_fraction`` of it. Five runs are trained.
PRESETS: dict[str, dict] = {
    "quick": {
        "description": (
            "Demo with the bundled 6-layer base (--plan estimates its time from this machine's rate). Far too "
            "small to conclude anything about the paper; it shows the whole pipeline and which way the numbers lean."
        ),
        "corpus": "shared:craft_pmc_oa_text",
        "ner_data": "shared:ncbi_disease",
        "data": {"heldout_fraction": 0.1, "cka_min_words": 20, "split_seed": 0},
        "train": {
            "seq_len": 128,
            "batch_size": 4,
            "lr": 3.0e-4,
            "precision": "auto",  # bf16 only where this machine runs it fast (fp32 on most laptops)
            "seed": 0,
            "control_seed": 1,
            "main_tokens": 40_000,
            "decay_fraction": 0.10,
        },
        "logging": {"log_every": 5, "eval_every": 20, "eval_batches": 4, "checkpoint_every": 1000},
        "eval": {
            "seeds": 5,
            "epochs": 3,
            "lr": 1.0e-3,
            "batch_size": 16,
            "max_len": 128,
            "max_train_examples": 128,
            "max_eval_examples": 100,
            # The seed-noise control is not fine-tuned here (CKA uses it): 20 fine-tunes instead of 25 keep the
            # demo under 10 minutes on a busy 2-core machine. The mini preset fine-tunes every encoder.
            "models": ["mlm", "detour", "freeze_low", "freeze_mid"],
        },
        # measure: debiased CKA (unbiased at 100-500 texts); "linear" gives the paper's biased CKA
        "cka": {"n_texts": 100, "max_len": 128, "seeds": [0], "batch_size": 16, "measure": "debiased"},
    },
    "mini": {
        "description": (
            "The bundled 6-layer base at 10x the quick training budget (--plan estimates its time), NER on "
            "600 sentences over 5 seeds (the base included), CKA on 500 held-out paragraphs with 3 sampling seeds."
        ),
        "corpus": "shared:craft_pmc_oa_text",
        "ner_data": "shared:ncbi_disease",
        "data": {"heldout_fraction": 0.15, "cka_min_words": 20, "split_seed": 0},
        "train": {
            "seq_len": 256,
            "batch_size": 8,
            "lr": 3.0e-4,
            "precision": "auto",  # bf16 only where this machine runs it fast (fp32 on most laptops)
            "seed": 0,
            "control_seed": 1,
            "main_tokens": 500_000,
            "decay_fraction": 0.10,
        },
        "logging": {"log_every": 5, "eval_every": 25, "eval_batches": 8, "checkpoint_every": 100},
        "eval": {
            "seeds": 5,
            "epochs": 3,
            "lr": 1.0e-3,
            "batch_size": 16,
            "max_len": 128,
            "max_train_examples": 600,
            "max_eval_examples": 400,
            "models": ["base", "mlm", "detour", "mlm_s2", "freeze_low", "freeze_mid"],
        },
        "cka": {"n_texts": 500, "max_len": 128, "seeds": [0, 1, 2], "batch_size": 16, "measure": "debiased"},
    },
}

# The encoders trained (key -> how). Names are ``<prefix>-<suffix>``; the first two are one ``pair``.
RUNS: dict[str, dict] = {
    "mlm": {"suffix": "mlm", "label": "MLM", "recipe": "pair"},
    "detour": {"suffix": "detour", "label": "CLM detour", "recipe": "pair"},
    "mlm_s2": {"suffix": "mlm-seed2", "label": "MLM, 2nd seed (control)", "recipe": "mlm"},
    "freeze_low": {"suffix": "detour-freeze-low", "label": "Detour, low third frozen", "recipe": "clm_detour"},
    "freeze_mid": {"suffix": "detour-freeze-mid", "label": "Detour, mid third frozen", "recipe": "clm_detour"},
}
BASE_LABEL = "Base (no continued pretraining)"
LABELS = {"base": BASE_LABEL, **{k: v["label"] for k, v in RUNS.items()}}


class ReplicationError(DetourError):
    pass


class ReplicationCancelled(DetourError):
    pass


# The plan's steps in order (``backend.replication.steps.build_plan`` builds them; the report lists them).
STEP_NAMES = ["data", "prepare", *(f"train-{k}" for k in RUNS), "weights", "cka", "ner", "report"]


def run_names(prefix: str = RUN_PREFIX) -> dict[str, str]:
    return {k: f"{prefix}-{v['suffix']}" for k, v in RUNS.items()}


def layer_thirds(n_layers: int) -> tuple[list[int], list[int]]:
    """Lower and middle thirds of ``n_layers`` blocks: 0-1 / 2-3 for 6, 0-7 / 8-14 for 22 (the paper's split)."""
    if n_layers < 3:
        raise ReplicationError(f"the model has {n_layers} layer(s); the freeze interventions need at least 3")
    a, b = math.ceil(n_layers / 3), math.ceil(2 * n_layers / 3)
    return list(range(0, a)), list(range(a, b))


def layer_range(layers: list[int]) -> str:
    return f"{layers[0]}-{layers[-1]}" if len(layers) > 1 else str(layers[0])


def _resolve_data(spec: str, what: str, flag: str) -> Path:
    if spec.startswith("shared:"):
        name = spec.split(":", 1)[1]
        p = shared_data(name)
        if p is None:
            raise ReplicationError(f"{what}: ../shared/data/{name} is absent; pass {flag} PATH")
        return p.resolve()
    if spec == "demo":
        return (DEMO_CORPUS if what == "corpus" else DEMO_NER_DIR).resolve()
    p = Path(spec).expanduser()
    if not p.exists():
        raise ReplicationError(f"{what}: '{spec}' does not exist (pass {flag} PATH)")
    return p.resolve()


def _resolve_model(spec: str) -> tuple[str, int]:
    """(model spec the run configs use, number of transformer blocks); a clear error when it is not there."""
    from backend.engine.models import load_config, resolve_model

    if spec == DEFAULT_MODEL and not (BUNDLED_MODELS_DIR / spec / "config.json").exists():
        raise ReplicationError(
            f"model: the bundled base '{DEFAULT_MODEL}' is not installed yet ({BUNDLED_MODELS_DIR / spec}); build it "
            "with `python -m backend build-assets`, or pass --model PATH (a model folder or a run directory)"
        )
    src = resolve_model(spec)
    n = int(load_config(src).num_hidden_layers)
    return (spec if src.kind in ("bundled", "hub") else src.path), n


def _check_cka(c: dict) -> None:
    """The CKA step's measure and text count, refused at planning rather than after the five trainings."""
    from backend.analysis.cka_guard import check_n_texts
    from backend.analysis.measures import MEASURES

    c.setdefault("measure", "debiased")
    if c["measure"] not in MEASURES:
        raise ConfigError("cka.measure", c["measure"], f"use one of {', '.join(MEASURES)} (linear: the paper's CKA)")
    check_n_texts(c.get("n_texts"), c["measure"], "mean", what="cka.n_texts")


def resolve_settings(
    preset: str | dict = "quick",
    *,
    model: str | None = None,
    corpus: str | None = None,
    ner_data: str | None = None,
    seeds: int | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> dict:
    """A preset (name or dict) with ``overrides`` (``train.main_tokens=30000``) applied, paths resolved, the
    model's depth read and its thirds computed. Raises a DetourError naming what is wrong."""
    from backend.engine.config import apply_override, parse_override

    if isinstance(preset, str):
        if preset not in PRESETS:
            raise ConfigError("preset", preset, f"use one of: {', '.join(PRESETS)}")
        s = copy.deepcopy(PRESETS[preset])
        s["preset"] = preset
    else:
        s = copy.deepcopy(preset)
        s.setdefault("preset", "custom")
    for item in overrides:
        apply_override(s, *parse_override(item), scope="preset")
    _check_values(s)  # train.lr=abc is refused here, not printed as a plan and found when training starts
    if seeds is not None:
        s["eval"]["seeds"] = seeds
    n_seeds = s["eval"]["seeds"]
    if isinstance(n_seeds, bool) or not isinstance(n_seeds, int) or n_seeds < 2:
        raise ConfigError("seeds", n_seeds, "use at least 2 fine-tuning seeds (paired CIs need 2; the paper uses 5)")
    models = s["eval"]["models"]
    known = ["base", *RUNS]
    if not isinstance(models, list) or not {"mlm", "detour"} <= set(models) or set(models) - set(known):
        raise ConfigError("eval.models", models, f"a list of {', '.join(known)} with at least mlm and detour")
    s["eval"]["models"] = [k for k in known if k in models]  # a fixed order: the comparisons read the same
    _check_cka(s["cka"])
    t = s["train"]
    if t["seed"] == t["control_seed"]:
        raise ConfigError("train.control_seed", t["control_seed"], "the seed-noise control needs another seed")
    if not isinstance(t["main_tokens"], int) or t["main_tokens"] < t["batch_size"] * t["seq_len"]:
        raise ConfigError("train.main_tokens", t["main_tokens"], "give at least one batch of tokens")
    s["corpus"] = str(_resolve_data(corpus or s["corpus"], "corpus", "--corpus"))
    s["ner_data"] = str(_resolve_data(ner_data or s["ner_data"], "NER data", "--ner-data"))
    s["model"], n_layers = _resolve_model(model or s.get("model") or DEFAULT_MODEL)
    low, mid = layer_thirds(n_layers)
    s["layers"] = {"n": n_layers, "low": low, "mid": mid, "low_range": layer_range(low), "mid_range": layer_range(mid)}
    s["version"] = VERSION
    return s


def estimate(settings: dict, train_rate: float | None = None) -> dict:
    """Rough wall-clock seconds on this project's 2-core CPU with the 6-layer d=256 base, fitted on the quick preset
    run with 1 thread beside other jobs (training ~2.3k tokens/s, NER ~33 training sentences/s, CKA forward
    ~10k tokens/s); a guide, not a promise. ``train_rate``: this machine's measured training tokens/s for the base
    (``machine_train_rate``), in place of the fitted 2.3k."""
    t, e, c = settings["train"], settings["eval"], settings["cka"]
    train_s = len(RUNS) * (t["main_tokens"] * (1 + t["decay_fraction"]) / (train_rate or 2300) + 8)
    n_models = len(e["models"])
    n_train, n_eval = e["max_train_examples"] or 5400, e["max_eval_examples"] or 940
    per_ft = 1 + e["epochs"] * (0.03 * n_train + 0.012 * n_eval) + 0.012 * n_eval
    ner_s = n_models * e["seeds"] * per_ft
    cka_s = 11 * len(c["seeds"]) * (c["n_texts"] * min(c["max_len"], 150) / 10000 + 0.4)
    return {"train_s": train_s, "ner_s": ner_s, "cka_s": cka_s, "report_s": 10, "total_s": train_s + ner_s + cka_s + 10}


# a preset value -> the config key that checks it (the one schema: types, ranges, exact integers)
SCHEMA_OF = {
    "train.seq_len": "train.seq_len",
    "train.batch_size": "train.batch_size",
    "train.lr": "train.lr",
    "train.precision": "train.precision",
    "train.seed": "train.seed",
    "train.control_seed": "train.seed",
    "train.main_tokens": "phases.main.tokens",
    "train.decay_fraction": "phases.decay.fraction",
    **{f"logging.{k}": f"logging.{k}" for k in ("log_every", "eval_every", "eval_batches", "checkpoint_every")},
}
EVAL_HPARAMS = ("epochs", "lr", "batch_size", "max_len", "max_train_examples", "max_eval_examples")


def _check_values(s: dict) -> None:
    """Every preset value a run or a fine-tune uses, checked (and normalised) as the config and the evaluation check
    it, naming the preset's key: a plan is printed only for settings that will train."""
    import dataclasses

    from backend.engine.config import check_key
    from backend.engine.schema import BY_KEY
    from backend.evaluation.finetune import resolve_hparams

    for key, schema_key in SCHEMA_OF.items():
        section, leaf = key.split(".")
        if isinstance(s.get(section), dict) and leaf in s[section]:
            s[section][leaf] = check_key(dataclasses.replace(BY_KEY[schema_key], key=key), s[section][leaf])
    e = s.get("eval") or {}
    try:
        resolve_hparams("ner", **{k: e[k] for k in EVAL_HPARAMS if k in e})
    except ConfigError as exc:
        raise ConfigError(f"eval.{exc.key}", exc.value, exc.allowed) from None


def machine_train_rate(settings: dict) -> float | None:
    """This machine's last measured training rate (tokens/s, the slower objective) for the preset's base model at its
    precision: the rate behind the Launch form's estimate (``engine.throughput.last_rate``); None before one was
    measured here."""
    import torch

    from backend.core.paths import DEFAULT_MODEL
    from backend.engine.config import default_config
    from backend.engine.models import model_config_of
    from backend.engine.precision import resolve_precision
    from backend.engine.throughput import last_rate
    from backend.runs.doctor import parameter_count

    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        precision = resolve_precision(settings["train"]["precision"], device)[0]
        model = {**default_config()["model"], "name": settings.get("model") or DEFAULT_MODEL}
        rate = last_rate(parameter_count(model_config_of(model)), precision, device)
    except Exception:  # an estimate never stands in the way: the fitted rate is used
        return None
    return rate["tokens_per_s"] if rate else None


def train_configs(settings: dict, data_dir: Path) -> list[dict]:
    """Validated configs for ``prepare_runs``: the pair (detour + MLM), the MLM control seed and the two freezes."""
    from backend.engine.config import load_config

    t, lg = settings["train"], settings["logging"]
    common = {
        "model": {"name": settings["model"]},
        "data": {"corpus": str(data_dir / "train.txt"), "heldout_file": str(data_dir / "heldout.txt")},
        "train": {
            "seq_len": t["seq_len"],
            "batch_size": t["batch_size"],
            "lr": t["lr"],
            "precision": t["precision"],
            "seed": t["seed"],
            # Fixed data order for every run: the seed-noise control then differs from the MLM run only in its
            # masks (the paper's control: "identical data order ... differ only in dropout and masking").
            "data_seed": t["seed"],
        },
        "phases": {"main": {"tokens": t["main_tokens"]}, "decay": {"fraction": t["decay_fraction"]}},
        "logging": {**lg, "keep_checkpoints": 1},
    }

    def make(name: str, recipe: str, seed: int | None = None, freeze: str | None = None) -> dict:
        c = copy.deepcopy(common)
        c["name"], c["recipe"] = name, recipe
        if seed is not None:
            c["train"]["seed"] = seed
        if freeze is not None:
            c["phases"]["main"]["freeze"] = {"layers": freeze}
        return load_config(c)

    L = settings["layers"]
    return [
        make(RUN_PREFIX, "pair"),
        make(f"{RUN_PREFIX}-{RUNS['mlm_s2']['suffix']}", "mlm", seed=t["control_seed"]),
        make(f"{RUN_PREFIX}-{RUNS['freeze_low']['suffix']}", "clm_detour", freeze=L["low_range"]),
        make(f"{RUN_PREFIX}-{RUNS['freeze_mid']['suffix']}", "clm_detour", freeze=L["mid_range"]),
    ]

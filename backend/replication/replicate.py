"""Mini replication of the paper's three findings (``python -m backend replicate``), at a scale a CPU can do.

From one base encoder and one domain corpus, the plan below trains five encoders, fine-tunes them on NER over
several seeds, measures CKA divergence and weight change per layer, and writes a report
(``backend.replication.report``):

1. detour > MLM downstream: a CLM detour and an MLM baseline trained as a *pair* (same seed, same data order,
   same token budget), compared on NER test F1, paired by fine-tuning seed;
2. low-layer divergence well above seed noise: CKA(detour, MLM) per layer against the seed-noise control,
   an extra MLM run with another seed;
3. freeze interventions: the detour with the lower third of the layers frozen during CLM (the paper: the gain
   disappears) and with the middle third frozen (the paper: the gain stays).

The plan is an ordered list of named steps. Each step writes its outputs, then a marker
``OUT/steps/<step>.json`` holding a digest of the settings it used; a step whose marker exists with the same
digest is skipped, so a rerun resumes where the last one stopped and never recomputes a finished step. A
training step interrupted half-way resumes from the run's last checkpoint. A failed step writes
``OUT/steps/<step>.failed.json``; the steps that need it are skipped ("blocked"), the others still run, and the
report says what is missing. Every event goes to ``OUT/steps.jsonl``; ``OUT/status.json`` tells an app what
is running.

Layout of ``OUT`` (default ``reports/<preset>``, gitignored)::

    settings.json        resolved preset (paths, model, budgets, layer thirds)
    status.json          state running|done|failed|cancelled, pid, current step
    steps.jsonl          start / done / skipped / failed / blocked rows, with timings
    steps/<step>.json    markers
    data/                train.txt, heldout.txt (whole documents held out), cka_texts.txt, info.json
    runs/<prefix>-*      run directories (docs/run-directory.md)
    analysis/            cka.json, weights.json
    ner/                 evaluate_models output (results.json, results.md, per-seed metrics)
    report.json, report.html, report.md, figures/*.png, figures/*.json
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import random
import re
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from backend.core import atomic
from backend.core.errors import ConfigError, DetourError
from backend.core.paths import (
    BUNDLED_MODELS_DIR,
    DEFAULT_MODEL,
    DEMO_CORPUS,
    DEMO_NER_DIR,
    shared_data,
)
from backend.core.process import FileLock, pid_alive, spawn_detached

VERSION = 1
RUN_PREFIX = "rep"
LOG_NAME = "replicate.log"

# ---------------------------------------------------------------------------------------------- presets
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
            "Demo: about 8-10 minutes on 2 CPU cores with the bundled 6-layer base. Far too small to conclude "
            "anything about the paper; it shows the whole pipeline and which way the numbers lean."
        ),
        "corpus": "shared:craft_pmc_oa_text",
        "ner_data": "shared:ncbi_disease",
        "data": {"heldout_fraction": 0.1, "cka_min_words": 20, "split_seed": 0},
        "train": {
            "seq_len": 128,
            "batch_size": 4,
            "lr": 3.0e-4,
            "precision": "bf16",
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
        "cka": {"n_texts": 100, "max_len": 128, "seeds": [0], "batch_size": 16},
    },
    "mini": {
        "description": (
            "About an hour on 2 CPU cores with the bundled 6-layer base: 10x the quick training budget, NER on "
            "600 sentences over 5 seeds (the base included), CKA on 500 held-out paragraphs with 3 sampling seeds."
        ),
        "corpus": "shared:craft_pmc_oa_text",
        "ner_data": "shared:ncbi_disease",
        "data": {"heldout_fraction": 0.15, "cka_min_words": 20, "split_seed": 0},
        "train": {
            "seq_len": 256,
            "batch_size": 8,
            "lr": 3.0e-4,
            "precision": "bf16",
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
        "cka": {"n_texts": 500, "max_len": 128, "seeds": [0, 1, 2], "batch_size": 16},
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


# ---------------------------------------------------------------------------------------------- settings
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


def estimate(settings: dict) -> dict:
    """Rough wall-clock seconds on this project's 2-core CPU with the 6-layer d=256 base, fitted on the quick preset
    run with 1 thread beside other jobs (training ~2.3k tokens/s, NER ~33 training sentences/s, CKA forward
    ~10k tokens/s); a guide, not a promise."""
    t, e, c = settings["train"], settings["eval"], settings["cka"]
    train_s = len(RUNS) * (t["main_tokens"] * (1 + t["decay_fraction"]) / 2300 + 8)
    n_models = len(e["models"])
    n_train, n_eval = e["max_train_examples"] or 5400, e["max_eval_examples"] or 940
    per_ft = 1 + e["epochs"] * (0.03 * n_train + 0.012 * n_eval) + 0.012 * n_eval
    ner_s = n_models * e["seeds"] * per_ft
    cka_s = 11 * len(c["seeds"]) * (c["n_texts"] * min(c["max_len"], 150) / 10000 + 0.4)
    return {"train_s": train_s, "ner_s": ner_s, "cka_s": cka_s, "report_s": 10, "total_s": train_s + ner_s + cka_s + 10}


# ---------------------------------------------------------------------------------------------- data
# Files beside a corpus that are not corpus text: licenses, read-mes, provenance notes.
_META_FILE = re.compile(r"(?i)^(readme|source|sources|manifest|copying|notice)$|licen[cs]e")


def split_corpus(corpus: str | Path, out_dir: str | Path, heldout_fraction: float, min_words: int, seed: int) -> dict:
    """Hold out whole documents (a folder: one file per document, license / read-me files skipped; one file: one
    paragraph per document) and write ``train.txt`` / ``heldout.txt`` (one paragraph per line) and
    ``cka_texts.txt`` (held-out paragraphs of at least ``min_words`` words). Deterministic; the held-out text is
    never trained on."""
    from backend.engine.data import TEXT_SUFFIXES, read_documents

    corpus, out_dir = Path(corpus), Path(out_dir)
    if corpus.is_dir():
        files = sorted(
            p
            for p in corpus.rglob("*")
            if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES and not _META_FILE.search(p.stem)
        )
        if not files:
            raise ReplicationError(f"corpus '{corpus}': no {'/'.join(TEXT_SUFFIXES)} files")
        groups = [read_documents(str(f)) for f in files]
        unit = "files"
    else:
        groups = [[d] for d in read_documents(str(corpus))]
        unit = "paragraphs"
    if len(groups) < 2:
        raise ReplicationError(f"corpus '{corpus}': one document only; a held-out split needs at least 2")
    order = list(range(len(groups)))
    random.Random(seed).shuffle(order)
    n_held = min(len(groups) - 1, max(1, round(len(groups) * heldout_fraction)))
    held_idx = set(order[:n_held])

    def clean(d: str) -> str:
        return " ".join(d.split())

    train = [clean(d) for i, g in enumerate(groups) if i not in held_idx for d in g if d.strip()]
    held = [clean(d) for i, g in enumerate(groups) if i in held_idx for d in g if d.strip()]
    cka = [d for d in held if len(d.split()) >= min_words]
    if len(cka) < 2:
        raise ReplicationError(
            f"corpus '{corpus}': only {len(cka)} held-out paragraph(s) of >= {min_words} words for CKA; "
            "use a larger corpus or a larger data.heldout_fraction"
        )
    for name, docs in (("train.txt", train), ("heldout.txt", held), ("cka_texts.txt", cka)):
        atomic.write_text(out_dir / name, "\n".join(docs) + "\n")
    info = {
        "corpus": str(corpus),
        "unit": unit,
        "units": len(groups),
        "heldout_units": n_held,
        "train_paragraphs": len(train),
        "heldout_paragraphs": len(held),
        "cka_paragraphs": len(cka),
        "train_words": sum(len(d.split()) for d in train),
        "heldout_words": sum(len(d.split()) for d in held),
        "heldout_fraction": heldout_fraction,
        "cka_min_words": min_words,
        "split_seed": seed,
    }
    atomic.write_json(out_dir / "info.json", info)
    return info


# ---------------------------------------------------------------------------------------------- run configs
def run_names(prefix: str = RUN_PREFIX) -> dict[str, str]:
    return {k: f"{prefix}-{v['suffix']}" for k, v in RUNS.items()}


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


# ---------------------------------------------------------------------------------------------- steps
@dataclass
class Step:
    name: str
    title: str
    fn: Callable[[Context], dict | None]
    key: dict
    deps: list[str] = field(default_factory=list)
    strict: bool = False  # a changed key is an error (training): otherwise the step is recomputed


@dataclass
class Context:
    out: Path
    settings: dict
    command: list[str] | None
    log: Callable[[str], None]

    @property
    def data_dir(self) -> Path:
        return self.out / "data"

    @property
    def runs_root(self) -> Path:
        return self.out / "runs"

    def run_dir(self, key: str) -> Path:
        return self.runs_root / run_names()[key]


def digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _flat(d, prefix: str = "") -> dict:
    if not isinstance(d, dict):
        return {prefix: d}
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}."))
    return {k.rstrip("."): v for k, v in out.items()}


def _changed(old: dict, new: dict) -> list[str]:
    a, b = _flat(old), _flat(new)
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def step_data(ctx: Context) -> dict:
    d = ctx.settings["data"]
    info = split_corpus(
        ctx.settings["corpus"], ctx.data_dir, d["heldout_fraction"], d["cka_min_words"], d["split_seed"]
    )
    ctx.log(
        f"data: {info['units']} {info['unit']}, {info['heldout_units']} held out; {info['train_words']:,} training "
        f"words, {info['cka_paragraphs']} held-out paragraphs for CKA"
    )
    return info


def step_prepare(ctx: Context) -> dict:
    from backend.runs.train import prepare_runs

    names = run_names()
    existing = [n for n in names.values() if (ctx.runs_root / n).exists()]
    if existing:
        raise ReplicationError(
            f"{ctx.runs_root} already holds {', '.join(existing)} but no record that they were prepared here; "
            f"delete {ctx.out} (or use another --out) to start over"
        )
    made = []
    for cfg in train_configs(ctx.settings, ctx.data_dir):
        made += [p.name for p in prepare_runs(cfg, root=ctx.runs_root, command=ctx.command)]
    ctx.log(f"prepared {len(made)} runs under {ctx.runs_root}: {', '.join(made)}")
    return {"runs": made}


def _train_one(ctx: Context, key: str) -> dict:
    from backend.engine.rundir import list_checkpoints, read_status
    from backend.runs.train import train_run

    run_dir = ctx.run_dir(key)
    if not (run_dir / "config.yaml").exists():
        raise ReplicationError(f"{run_dir} is missing: delete {ctx.out / 'steps' / 'prepare.json'} to prepare it again")
    st = read_status(run_dir)
    if st.get("state") == "done" and (run_dir / "final" / "config.json").exists():
        ctx.log(f"{run_dir.name}: already trained")
        return {"run": run_dir.name, "trained_now": False}
    resume = bool(list_checkpoints(run_dir))
    ctx.log(f"{run_dir.name}: training{' (resuming from its last checkpoint)' if resume else ''}")
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        st = train_run(run_dir, resume=resume)
    finally:  # train_run installs its own stop-at-next-step handlers; put ours back
        # A stop asked after the run's last step check is swallowed by its handler: read it from there.
        flag = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
        stop_asked = getattr(flag, "signal", None)
        for s, h in handlers.items():
            signal.signal(s, h)
    if st.get("state") == "cancelled":
        raise ReplicationCancelled(f"{run_dir.name} stopped at a checkpoint")
    if st.get("state") != "done":
        raise ReplicationError(
            f"{run_dir.name}: training {st.get('state')}: {st.get('error')} (log: {run_dir}/train.log)"
        )
    stale = ctx.out / "ner" / "models" / key  # fine-tunes of an older model with this name are no longer valid
    if stale.exists():
        import shutil

        shutil.rmtree(stale)
    out = {"run": run_dir.name, "trained_now": True, "tokens": st.get("tokens_seen"), "steps": st.get("step")}
    return {**out, "stop_requested": stop_asked} if stop_asked else out


def _models_for_eval(ctx: Context) -> tuple[list[str], list[str]]:
    keys = list(ctx.settings["eval"]["models"])
    specs = [ctx.settings["model"] if k == "base" else str(ctx.run_dir(k) / "final") for k in keys]
    return keys, specs


def step_ner(ctx: Context) -> dict:
    from backend.evaluation.runner import evaluate_models

    e = ctx.settings["eval"]
    keys, specs = _models_for_eval(ctx)
    hp = {k: e[k] for k in ("epochs", "lr", "batch_size", "max_len", "max_train_examples", "max_eval_examples")}
    ctx.log(f"NER: {len(keys)} models x {e['seeds']} seeds on {ctx.settings['ner_data']} ({hp})")
    try:
        res = evaluate_models(
            specs,
            task="ner",
            data=ctx.settings["ner_data"],
            seeds=list(range(e["seeds"])),
            out_dir=ctx.out / "ner",
            labels=keys,
            keep_models=False,
            **hp,
        )
    except ConfigError as exc:
        if exc.key == "out":
            raise ReplicationError(
                f"NER: {ctx.out / 'ner'} holds fine-tunes made with other settings; delete that folder to "
                "evaluate again with the new ones"
            ) from exc
        raise
    if res["status"] != "complete":
        fails = res.get("failures", [])
        first = fails[0] if fails else {}
        raise ReplicationError(
            f"NER: {len(fails)} fine-tune(s) failed (first: {first.get('model')} seed {first.get('seed')}: "
            f"{first.get('error')}); see {ctx.out / 'ner' / 'results.md'}; rerun to retry them"
        )
    return {"status": res["status"], "runs": sum(len(m["runs"]) for m in res["models"])}


def _end_main_model(run_dir: Path) -> str | None:
    from backend.engine.rundir import checkpoint_state, list_checkpoints

    for ck in list_checkpoints(run_dir):
        try:
            if checkpoint_state(ck).get("tag") == "end-main" and (ck / "model" / "config.json").exists():
                return str(ck / "model")
        except (OSError, ValueError):
            continue
    return None


def step_cka(ctx: Context) -> dict:
    from backend.analysis.api import cka_between

    c = ctx.settings["cka"]
    texts = str(ctx.data_dir / "cka_texts.txt")
    kw = dict(n_texts=c["n_texts"], max_len=c["max_len"], batch_size=c["batch_size"], seeds=c["seeds"])
    final = {k: str(ctx.run_dir(k) / "final") for k in RUNS}
    out: dict = {"texts": texts, "settings": c}
    ctx.log("CKA: detour vs MLM with the seed-noise control (MLM 2nd seed vs MLM)")
    out["detour_vs_mlm"] = cka_between(
        final["detour"], final["mlm"], texts, control=(final["mlm"], final["mlm_s2"]), **kw
    )
    ctx.log("CKA: control matrix, freeze runs vs MLM")
    out["control"] = cka_between(final["mlm_s2"], final["mlm"], texts, **kw)
    out["freeze_low_vs_mlm"] = cka_between(final["freeze_low"], final["mlm"], texts, **kw)
    out["freeze_mid_vs_mlm"] = cka_between(final["freeze_mid"], final["mlm"], texts, **kw)
    a, b = _end_main_model(ctx.run_dir("detour")), _end_main_model(ctx.run_dir("mlm"))
    if a and b:  # before the decay: does the divergence survive the return to MLM?
        ctx.log("CKA: detour vs MLM at the end of the main phase (before the decay)")
        out["end_main_detour_vs_mlm"] = cka_between(a, b, texts, **kw)
    atomic.write_json(ctx.out / "analysis" / "cka.json", out)
    return {"file": "analysis/cka.json"}


def step_weights(ctx: Context) -> dict:
    from backend.analysis.api import weight_change_between

    final = {k: str(ctx.run_dir(k) / "final") for k in RUNS}
    out = {"from_base": {k: weight_change_between(ctx.settings["model"], final[k]) for k in RUNS}}
    out["detour_vs_mlm"] = weight_change_between(final["mlm"], final["detour"])
    out["control"] = weight_change_between(final["mlm"], final["mlm_s2"])
    atomic.write_json(ctx.out / "analysis" / "weights.json", out)
    return {"file": "analysis/weights.json"}


def step_report(ctx: Context) -> dict:
    from backend.replication.report import build_report

    rep = build_report(ctx.out, log=ctx.log)
    return {"files": rep.get("files", {}), "verdicts": {f["id"]: f["verdict"] for f in rep.get("findings", [])}}


def build_plan(settings: dict) -> list[Step]:
    """The ordered steps; each key holds exactly the settings its output depends on."""
    data_key = {"corpus": settings["corpus"], **settings["data"]}
    train_key = {
        "data": data_key,
        "model": settings["model"],
        "train": settings["train"],
        "logging": settings["logging"],
        "layers": settings["layers"],
    }
    train_steps = [f"train-{k}" for k in RUNS]
    steps = [
        Step("data", "Split the corpus (held-out documents for CKA and eval loss)", step_data, data_key),
        Step("prepare", "Create the five run directories", step_prepare, train_key, ["data"], strict=True),
    ]
    for k in RUNS:
        steps.append(
            Step(
                f"train-{k}", f"Train {LABELS[k]}", lambda ctx, _k=k: _train_one(ctx, _k), train_key, ["prepare"], True
            )
        )
    steps += [
        Step("weights", "Weight change per layer", step_weights, train_key, train_steps),
        Step(
            "cka",
            "CKA divergence per layer with the seed-noise control",
            step_cka,
            {"train": train_key, "cka": settings["cka"]},
            train_steps,
        ),
        Step(
            "ner",
            "Fine-tune and evaluate every encoder on NER",
            step_ner,
            {"train": train_key, "eval": settings["eval"], "ner_data": settings["ner_data"]},
            train_steps,
        ),
        Step(
            "report",
            "Write report.json, report.html and the figures",
            step_report,
            {"settings": settings, "report_version": VERSION},
        ),
    ]
    return steps


# ---------------------------------------------------------------------------------------------- runner
def read_settings(out: str | Path) -> dict | None:
    try:
        return json.loads((Path(out) / "settings.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None


def read_markers(out: str | Path) -> dict[str, dict]:
    d = Path(out) / "steps"
    found = {}
    if d.exists():
        for p in sorted(d.glob("*.json")):
            try:
                found[p.name[: -len(".json")]] = json.loads(p.read_text())
            except (OSError, json.JSONDecodeError):
                continue
    return found


def read_state(out: str | Path) -> dict:
    """status.json of a replication folder, with a crashed 'running' one shown as failed."""

    try:
        st = json.loads((Path(out) / "status.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {"state": "none"}
    if st.get("state") == "running" and not pid_alive(st.get("pid")):
        st["state"] = "failed"
        st["error"] = st.get("error") or "the replication process died without saying why (see replicate.log)"
    return st


def start_detached(out: Path, preset: str, extra_args: list[str] | None = None):
    """Start ``python -m backend replicate --preset P --out OUT`` in its own session (what the app's Reports tab
    launches): it outlives the app, with its output in ``OUT/replicate.log``. Returns the ``Popen``."""
    out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "backend", "replicate", "--preset", preset, "--out", str(out), *(extra_args or [])]
    return spawn_detached(argv, out / LOG_NAME)


def _stamp_log(echo: Callable[[str], None] | None) -> Callable[[str], None]:
    def log(msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        (echo or print)(line)
        sys.stdout.flush()

    return log


def replicate(
    settings: dict,
    out: str | Path,
    *,
    command: list[str] | None = None,
    log: Callable[[str], None] | None = None,
    report_only: bool = False,
) -> dict:
    """Run (or resume) the plan in ``out``. Returns ``{"state", "ran", "skipped", "failed", "blocked", "report"}``.

    ``state`` is ``done`` (every step done), ``failed`` (some step failed: the report says which, and a rerun
    retries it) or ``cancelled`` (Ctrl-C / SIGTERM: a rerun resumes). Steps already done are never redone.
    """
    out = Path(out).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    logf = _stamp_log(log)
    plan = build_plan(settings)
    with FileLock(out / ".lock", str(out), "another replication is already running in {what} (pid {pid})"):
        markers = read_markers(out)
        for step in plan:  # before anything is written: runs trained with other settings are never mixed in
            marker = markers.get(step.name)
            if step.strict and marker and marker.get("key") != digest(step.key):
                changed = _changed(marker.get("settings", {}), step.key)
                raise ReplicationError(
                    f"{out} holds runs trained with other settings (changed: {', '.join(changed[:6]) or '?'}); "
                    f"use another --out, or delete {out} to start over"
                )
        if read_settings(out) != json.loads(json.dumps(settings)):
            atomic.write_json(out / "settings.json", settings)
        ran: list[str] = []
        dirty: set[str] = set()
        skipped: list[str] = []
        failed: dict[str, str] = {}
        blocked: list[str] = []
        t_all = time.time()
        state = {"state": "running", "pid": os.getpid(), "preset": settings.get("preset"), "started_at": t_all}
        state.update({"finished_at": None, "error": None, "steps_total": len(plan), "out": str(out)})

        def status(**kw):
            state.update(kw, updated_at=time.time())
            atomic.write_json(out / "status.json", state)

        def event(step: str, ev: str, **kw):
            atomic.append_jsonl(out / "steps.jsonl", {"step": step, "event": ev, "time": time.time(), **kw})

        prev_term = signal.getsignal(signal.SIGTERM)

        def on_term(signum, frame):
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, on_term)
        status(current_step=None, steps_done=0)
        ctx = Context(out, settings, command, logf)
        cancelled = None
        try:
            for i, step in enumerate(plan, 1):
                if report_only and step.name != "report":
                    continue
                marker = markers.get(step.name)
                key = digest(step.key)
                # a step whose inputs changed in this invocation is recomputed (not a training step: its key says)
                upstream_ran = not step.strict and (
                    any(d in dirty for d in step.deps) or (step.name == "report" and bool(dirty or failed))
                )
                bad_deps = [d for d in step.deps if d in failed or d in blocked]
                if bad_deps and step.name != "report":
                    blocked.append(step.name)
                    event(step.name, "blocked", by=bad_deps)
                    logf(f"[{i}/{len(plan)}] {step.name}: skipped, needs {', '.join(bad_deps)} (failed)")
                    continue
                if marker and marker.get("key") == key and not upstream_ran and not report_only:
                    skipped.append(step.name)
                    event(step.name, "skipped")
                    logf(f"[{i}/{len(plan)}] {step.name}: done earlier ({marker.get('elapsed_s', 0):.0f}s), skipped")
                    continue
                logf(f"[{i}/{len(plan)}] {step.name}: {step.title}")
                status(current_step=step.name, steps_done=i - 1)
                event(step.name, "start")
                t0 = time.time()
                try:
                    result = step.fn(ctx) or {}
                except (KeyboardInterrupt, ReplicationCancelled) as exc:
                    cancelled = f"{step.name}: {str(exc) or 'interrupted'}"
                    event(step.name, "cancelled", elapsed_s=time.time() - t0)
                    break
                except Exception as exc:  # noqa: BLE001 - recorded, reported, the independent steps go on
                    err = f"{type(exc).__name__}: {exc}"
                    failed[step.name] = err
                    tb = "".join(traceback.format_exception(exc)[-8:])
                    atomic.write_json(
                        out / "steps" / f"{step.name}.failed.json",
                        {"step": step.name, "error": err, "traceback": tb, "time": time.time()},
                    )
                    (out / "steps" / f"{step.name}.json").unlink(missing_ok=True)
                    event(step.name, "failed", error=err, elapsed_s=time.time() - t0)
                    logf(f"[{i}/{len(plan)}] {step.name}: FAILED: {err}")
                    if not isinstance(exc, DetourError):
                        logf(tb.rstrip())
                    continue
                elapsed = time.time() - t0
                m = {"step": step.name, "key": key, "settings": step.key, "finished_at": time.time()}
                m.update({"elapsed_s": elapsed, "result": result})
                atomic.write_json(out / "steps" / f"{step.name}.json", m)
                (out / "steps" / f"{step.name}.failed.json").unlink(missing_ok=True)
                markers[step.name] = m
                ran.append(step.name)
                if result.get("trained_now") is not False:  # a run found already trained changes nothing
                    dirty.add(step.name)
                event(step.name, "done", elapsed_s=elapsed)
                logf(f"[{i}/{len(plan)}] {step.name}: done in {elapsed:.0f}s")
                if result.get("stop_requested"):  # SIGTERM/SIGINT arrived as this step was finishing
                    cancelled = f"{result['stop_requested']} after {step.name}"
                    break
        except KeyboardInterrupt:
            cancelled = "interrupted"
        finally:
            signal.signal(signal.SIGTERM, prev_term)
        if cancelled:
            final_state, error = "cancelled", f"cancelled ({cancelled}); rerun the same command to resume"
        elif failed:
            final_state = "failed"
            error = "; ".join(f"{k}: {v}" for k, v in failed.items())
        else:
            final_state, error = "done", None
        status(
            state=final_state,
            error=error,
            finished_at=time.time(),
            current_step=None,
            steps_done=len([k for k in read_markers(out) if not k.endswith(".failed")]),
        )
        report = out / "report.html"
        logf(
            f"replication {final_state} in {time.time() - t_all:.0f}s: {len(ran)} step(s) run, {len(skipped)} "
            f"skipped, {len(failed)} failed, {len(blocked)} blocked"
            + (f"; report: {report}" if report.exists() else "")
        )
        return {
            "state": final_state,
            "error": error,
            "ran": ran,
            "skipped": skipped,
            "failed": failed,
            "blocked": blocked,
            "report": str(report) if report.exists() else None,
            "out": str(out),
        }

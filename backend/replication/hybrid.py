"""The second paper's study at small scale (``python -m backend replicate --study hybrid-splits``), on the sweep
machinery (``backend.sweeps``).

"Should We Still Pretrain Encoders with MLM?" (Gisserot-Boukhlef et al. 2025) trains encoders from scratch with
five objective splits, CLM first then MLM (100% MLM, 25/75, 50/50, 75/25, 100% CLM) at fixed budgets and finds
the hybrids better than pure MLM downstream; then continues an equally sized CLM-pretrained and MLM-pretrained
model with MLM at 40% masking for the same budget and finds the CLM-started one better.

Here: tiny from-scratch ModernBERT encoders (bundled tokenizer) on the shared biomedical corpus.

1. ``splits/``: a sweep ``hybrid.clm_share`` (5 values) x ``hybrid.tokens`` (2 budgets) x seeds (``recipe:
   hybrid``), every cell fine-tuned on NER over fine-tuning seeds; each hybrid and pure CLM compared with pure MLM
   of the same budget and seed (paired).
2. ``cpt/``: a sweep over the starting model (the pure-MLM and the pure-CLM run of the first budget, same seed),
   each continued with MLM at 40% (``recipe: mask_schedule`` with one rate) for that budget, fine-tuned on NER;
   CLM-started minus MLM-started, paired by seed.

Both sweeps resume: rerunning the same command re-queues what did not finish and reuses every measurement.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from pathlib import Path

from backend.core import atomic
from backend.core.paths import BUNDLED_TOKENIZER_DIR
from backend.replication.inputs import ReplicationError, resolve_data

SHARES = [0.0, 0.25, 0.5, 0.75, 1.0]
CPT_MLM_PROBABILITY = 0.40

# Tiny from-scratch encoders: budgets in tokens (tokens per step = batch_size x seq_len). The verdict is a t over
# pretraining seeds: 2 seeds (1 degree of freedom) could detect next to nothing, so the quick preset runs 4 seeds of
# three splits (pure MLM, 50/50, pure CLM) rather than 2 of five; its time is ``hybrid_estimate``'s (this machine's
# measured rates), never a fixed string.
HYBRID_PRESETS: dict[str, dict] = {
    "quick": {
        "description": (
            "Demo: 2-layer d=128 encoders, 3 splits (pure MLM, 50/50, pure CLM) x 2 budgets (16k, 32k tokens) x 4 "
            "seeds, the suite on 128 sentences per task, then the 40% MLM continuation. Far too small to conclude; it "
            "runs the whole study and shows which way the numbers lean."
        ),
        "corpus": "shared:craft_pmc_oa_text",
        "arch": {
            "model_type": "modernbert",
            "num_hidden_layers": 2,
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_attention_heads": 4,
            "local_attention": 64,
            "global_attn_every_n_layers": 2,
            "max_position_embeddings": 256,
        },
        "train": {"seq_len": 128, "batch_size": 8, "lr": 1.0e-3, "precision": "fp32", "seed": 0},
        "budgets": [16_384, 32_768],
        "shares": [0.0, 0.5, 1.0],
        "cpt": True,  # the 40% MLM continuation of the first budget's pure MLM and pure CLM runs
        "seeds": 4,
        "max_concurrent": 2,
        "logging": {"log_every": 8, "eval_every": 1000, "eval_batches": 4, "checkpoint_every": 1000},
        "eval": {  # lr 3e-3: at 1e-3 these barely-trained encoders fine-tune to F1 0 on 128 sentences
            "seeds": 1,
            "epochs": 3,
            "lr": 3.0e-3,
            "batch_size": 16,
            "max_len": 128,
            "max_train_examples": 128,
            "max_eval_examples": 100,
        },
    },
    "mini": {
        "description": (
            "4-layer d=192 encoders, 5 splits x 2 budgets (131k, 262k tokens) x 5 "
            "seeds, the suite on 400 sentences per task, 1 fine-tuning seed, then the 40% MLM continuation."
        ),
        "corpus": "shared:craft_pmc_oa_text",
        "arch": {
            "model_type": "modernbert",
            "num_hidden_layers": 4,
            "hidden_size": 192,
            "intermediate_size": 384,
            "num_attention_heads": 4,
            "local_attention": 64,
            "global_attn_every_n_layers": 2,
            "max_position_embeddings": 256,
        },
        "train": {"seq_len": 128, "batch_size": 16, "lr": 1.0e-3, "precision": "auto", "seed": 0},
        "budgets": [131_072, 262_144],
        "shares": [0.0, 0.25, 0.5, 0.75, 1.0],
        "cpt": True,
        "seeds": 5,
        "max_concurrent": 2,
        "logging": {"log_every": 10, "eval_every": 1000, "eval_batches": 8, "checkpoint_every": 50},
        "eval": {
            "seeds": 1,
            "epochs": 3,
            "lr": 1.0e-3,
            "batch_size": 16,
            "max_len": 128,
            "max_train_examples": 400,
            "max_eval_examples": 200,
        },
    },
}


def resolve_hybrid(
    preset: str,
    corpus: str | None = None,
    seeds: int | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    budgets: list[int] | None = None,
    suite: str | None = None,
    drop_weights: bool | None = None,
) -> dict:
    """The preset with paths resolved and ``--set`` overrides (``train.lr=...``, ``budgets=[...]``,
    ``shares=[0.0,0.5,1.0]``, ``cpt=false``) applied. ``budgets``: the budget axis (any list of token counts);
    every run is fine-tuned on a task suite (``suite``, bio-ner by default; a suite of one task fine-tunes on that
    task alone); ``eval`` holds the fine-tuning seeds and caps that replace the suite's."""
    from backend.engine.config import apply_override, parse_override

    if preset not in HYBRID_PRESETS:
        raise ReplicationError(f"preset {preset!r}: one of {', '.join(HYBRID_PRESETS)}")
    s = copy.deepcopy(HYBRID_PRESETS[preset])
    s["preset"] = preset
    for item in overrides:
        apply_override(s, *parse_override(item), scope="preset")
    s["corpus"] = str(resolve_data(corpus or s["corpus"], "corpus", "--corpus"))
    if seeds is not None:  # 0 was skipped silently (and a negative count planned negative tokens)
        s["seeds"] = seeds
    s.setdefault("shares", list(SHARES))
    s.setdefault("cpt", True)
    check_hybrid(s, "--budgets" if budgets else "budgets", budgets)
    from backend.evaluation.suite import load_suite
    from backend.replication.budget_study import SUITE

    s["suite"] = load_suite(suite or SUITE)["path"]
    if drop_weights is not None:
        s["drop_weights"] = bool(drop_weights)
    s.setdefault("drop_weights", False)
    from backend.sweeps.sweep import _evaluation as check_evaluation

    check_evaluation(_evaluation(s))  # eval.* as the sweeps will read them: a bad or misspelt setting refused now
    return s


def check_hybrid(s: dict, flag: str, budgets: list | None) -> None:
    """Every value a flag or a ``--set`` gave the study, checked as the runs will read it, before a plan is printed
    or anything queued: the budgets as ``--budgets`` are (whole, distinct, one step at least), the CLM shares (numbers
    in [0, 1], each once, 0.0 among them), whole seed and slot counts >= 1, cpt a yes or no; then the run settings
    as a run's config reads them."""
    from backend.engine.config import load_config
    from backend.replication.inputs import check_budgets

    t = s["train"]
    per_step = t["batch_size"] * t["seq_len"] if all(type(t.get(k)) is int for k in ("batch_size", "seq_len")) else 1
    s["budgets"] = check_budgets(budgets or s["budgets"], per_step, flag, "one optimizer step")
    shares = s["shares"]
    numbers = isinstance(shares, list) and all(isinstance(x, int | float) and not isinstance(x, bool) for x in shares)
    if not numbers or 0.0 not in shares or any(not 0.0 <= x <= 1.0 for x in shares) or len(set(shares)) < len(shares):
        raise ReplicationError(f"shares {shares!r}: a list of CLM shares between 0 and 1, each once, with 0.0 (pure "
                               "MLM, the reference), e.g. --set shares=[0.0,0.5,1.0]")  # fmt: skip
    s["shares"] = sorted(float(x) for x in shares)
    e = s.get("eval") if isinstance(s.get("eval"), dict) else {}
    for what, v in (("seeds (--pretrain-seeds)", s.get("seeds")), ("max_concurrent", s.get("max_concurrent")),
                    ("eval.seeds (--seeds)", e.get("seeds", 1))):  # fmt: skip
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ReplicationError(f"{what} {v!r}: a whole number, at least 1")
    if not isinstance(s["cpt"], bool):
        raise ReplicationError(f"cpt {s['cpt']!r}: true or false (the 40% MLM continuation, or not)")
    load_config(base_config(s))  # train.*, logging.*, arch: refused now, not per run


_N_PARAMS: dict[str, int] = {}


def n_params(s: dict) -> int:
    """Parameters of the study's from-scratch encoder (a meta-device build, once per architecture)."""
    from backend.engine.models import model_config_of
    from backend.runs.doctor import parameter_count

    arch = json.dumps(s["arch"], sort_keys=True)
    if arch not in _N_PARAMS:  # the page asks on every load
        _N_PARAMS[arch] = parameter_count(model_config_of(base_config(s)["model"]))
    return _N_PARAMS[arch]


def hybrid_estimate(preset: str | dict) -> dict:
    """How long the study takes here (``study_time``): its training tokens at the rate this machine measured for an
    encoder of its size, precision, sequence length and batch, plus its fine-tunes on the suite at the seconds per
    fine-tune measured here (else fitted). ``{'rate', 'n_params', 'precision', 'train_tokens', 'finetunes',
    'train_s', 'ner_s', 'total_s', ...}``; ``rate`` and the seconds are None before this machine has trained a model
    of this size (the study's first runs record one)."""
    from backend.engine.precision import resolve_precision
    from backend.replication import study_time

    if isinstance(preset, str):
        from backend.replication.budget_study import SUITE

        s = {**HYBRID_PRESETS[preset], "preset": preset, "corpus": "", "suite": SUITE}
    else:  # resolved settings: the command line's budgets, shares and suite counted
        s = preset
    device = study_time.device()
    precision = resolve_precision(s["train"]["precision"], device)[0]
    seeds, budgets = s["seeds"], s["budgets"]
    shares = s.get("shares") or SHARES
    n_cpt = 2 * seeds if s.get("cpt", True) else 0
    train_tokens = len(shares) * sum(budgets) * seeds + n_cpt * budgets[0]  # the splits, then the 2 continuations
    runs = len(shares) * len(budgets) * seeds + n_cpt
    tasks = study_time.suite_tasks(s["suite"], s["eval"])
    finetunes = runs * sum(t["seeds"] for t in tasks)
    t = s["train"]
    tr = study_time.training(n_params(s), precision, device, t["seq_len"], t["batch_size"], train_tokens, runs,
                             int(s.get("max_concurrent") or 1))  # fmt: skip
    ft = study_time.finetune_seconds(tasks, n_params(s), device)
    ner_s = finetunes * ft["seconds"] / max(1, int(s.get("measure_jobs") or 1))
    return {"rate": tr["rate"], "rate_pick": tr["pick"], "n_params": n_params(s), "precision": precision,
            "device": device, "train_tokens": train_tokens, "finetunes": finetunes, "train_s": tr["train_s"],
            "ner_s": ner_s, "finetune_text": ft["text"], "start_text": tr["start_text"],
            "total_s": None if tr["train_s"] is None else tr["train_s"] + ner_s}  # fmt: skip


def estimate_text(est: dict) -> str:
    """The estimate in one sentence, saying what it stands on, or that no rate is measured here yet."""
    from backend.engine.rates import describe

    size = f"{est['n_params'] / 1e6:.1f}M-parameter encoder ({est['precision']}, {est['device']})"
    if est["rate"] is None:
        return (f"No training rate is measured on this machine yet for this study's {size}, so no time is "
                f"estimated; its first runs record one ({est['train_tokens']:,} training tokens, "
                f"{est['finetunes']} fine-tunes).")  # fmt: skip
    return (f"~{max(1, round(est['total_s'] / 60))} min: {est['train_tokens']:,} training tokens for its {size} at "
            f"{est['rate']:,.0f} tokens/s ({describe(est['rate_pick'])}; {est['start_text']}), plus "
            f"{est['finetunes']} fine-tunes ({est['finetune_text']}).")  # fmt: skip


def base_config(s: dict) -> dict:
    """The splits sweep's base config: a from-scratch tiny encoder, ``recipe: hybrid`` at the first budget."""
    return {
        "name": f"hybrid-{s['preset']}",
        "recipe": "hybrid",
        "model": {"name": "from_scratch", "tokenizer": str(BUNDLED_TOKENIZER_DIR), "from_scratch": dict(s["arch"])},
        "data": {"corpus": s["corpus"], "heldout_fraction": 0.1},
        "train": dict(s["train"]),
        "hybrid": {"clm_share": 0.0, "tokens": s["budgets"][0]},
        "logging": dict(s["logging"]),
    }


def _evaluation(s: dict) -> dict:
    """Every task of the suite, with the preset's seeds and caps in place of the suite's."""
    return {"suite": s["suite"], "hparams": dict(s["eval"]), "drop_weights": s.get("drop_weights", False)}


def splits_manifest(s: dict) -> dict:
    from backend.sweeps.sweep import plan_sweep

    return plan_sweep(
        base_config(s),
        grid=[
            f"hybrid.clm_share={','.join(str(x) for x in s.get('shares') or SHARES)}",
            f"hybrid.tokens={','.join(map(str, s['budgets']))}",
        ],
        seeds=s["seeds"],
        name="splits",
        reference="0.0",
        evaluation=_evaluation(s),
        max_concurrent=s["max_concurrent"],
        max_runs=None,  # the study's size is its plan's (replicate --plan says it)
    )


def _start_run(splits: dict, share: float, budget: int) -> str:
    """The splits run of ``share`` at ``budget`` with ``{seed}`` left in its name, for the CPT axis."""
    for c in splits["cells"]:
        if c["values"]["hybrid.clm_share"] == share and c["values"]["hybrid.tokens"] == budget:
            return next(iter(c["runs"].values())).rsplit("-s", 1)[0] + "-s{seed}"
    raise ReplicationError(f"no splits cell for clm_share={share}, tokens={budget}")


def cpt_manifest(s: dict, out: Path, splits: dict) -> dict:
    """Continue the pure-MLM and the pure-CLM run of the first budget (each seed its own) with MLM at 40%."""
    from backend.sweeps.sweep import plan_sweep

    budget = s["budgets"][0]
    runs = out / "splits" / "runs"
    starts = [str(runs / _start_run(splits, share, budget)) for share in (0.0, 1.0)]  # MLM-started first: reference
    cfg = base_config(s)
    cfg["name"] = f"cpt-{s['preset']}"
    cfg["recipe"] = "mask_schedule"
    cfg["model"] = {"name": starts[0].replace("{seed}", "0")}
    cfg.pop("hybrid")
    cfg["mask_schedule"] = {"rates": [CPT_MLM_PROBABILITY], "tokens": budget}
    return plan_sweep(
        cfg,
        grid=[f"model.name={','.join(starts)}"],
        seeds=s["seeds"],
        name="cpt",
        evaluation=_evaluation(s),
        max_concurrent=s["max_concurrent"],
        max_runs=None,  # the study's size is its plan's (replicate --plan says it)
    )


def steps(s: dict) -> list[str]:
    """What status.json counts: the splits, the continuation (unless ``cpt`` is false), fine-tuning and the report."""
    return ["splits", *(["cpt"] if s.get("cpt", True) else []), "measure", "report"]


def run_hybrid(s: dict, out: str | Path, log: Callable[[str], None] | None = None, command: list[str] | None = None,
               resume: list[str] | None = None) -> dict:  # fmt: skip
    """Run (or resume) the study into ``out`` and write its report; returns the report. One process at a time, and
    a signal stops it with its runs cancelled (``study_run.running``)."""
    import os

    from backend.replication.study_run import running, study_log

    # the cells train side by side: one BLAS thread pool each over this machine's cores, not each over all of them
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 2) // s["max_concurrent"])))
    out = Path(out).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = log or study_log(out)
    with running(out, "hybrid-splits", steps(s), resume, log) as run:
        return _run_hybrid(s, out, command, run)


def _run_hybrid(s: dict, out: Path, command: list[str] | None, run) -> dict:
    from backend.replication import study_time
    from backend.replication.budget_report import load_now, machine
    from backend.sweeps import sweep

    settings_file = out / "settings.json"
    if settings_file.exists() and json.loads(settings_file.read_text()).get("study") != "hybrid-splits":
        raise ReplicationError(f"{out} holds another study; pick another --out")
    atomic.write_json(settings_file, {**s, "study": "hybrid-splits"})
    times = {}
    t0, load0 = time.time(), load_now()
    t = run.stage("splits", f"train {len(s['shares'])} splits x {len(s['budgets'])} budgets x seeds")
    splits = splits_manifest(s)
    sweep.launch(splits, out / "splits", part_of=out)
    sweep.wait(out / "splits", progress=lambda st: run.log(f"   splits: {sweep._counts_line(st['counts'])}"))
    run.check(out / "splits")
    study_time.record_trained(n_params(s), study_time.device(), out / "splits", t)
    times["splits_train_s"] = time.time() - t
    if s.get("cpt", True):
        t = run.stage("cpt", "continue pure CLM and pure MLM with MLM 40%")
        cpt = cpt_manifest(s, out, splits)
        sweep.launch(cpt, out / "cpt", part_of=out)
        sweep.wait(out / "cpt", progress=lambda st: run.log(f"   cpt: {sweep._counts_line(st['counts'])}"))
        run.check(out / "cpt")
        times["cpt_train_s"] = time.time() - t
    t = run.stage("measure", "every run fine-tuned on the suite")
    jobs = int(s.get("measure_jobs") or 1)
    tasks = study_time.suite_tasks(s["suite"], s["eval"])
    for part in ("splits", *(["cpt"] if s.get("cpt", True) else [])):
        t_part = time.time()
        sweep.finish(out / part, run.log, jobs=jobs)
        study_time.record_measure_rate(n_params(s), out / part, time.time() - t_part, jobs, tasks)
    times["eval_s"] = time.time() - t
    run.stage("report", "the report")
    times["wall_s"] = time.time() - t0
    atomic.write_json(out / "timing.json", {"wall_s": times["wall_s"], "load_start": load0, "load_end": load_now(),
                                            "machine": machine(), "command": command})  # fmt: skip
    return write_hybrid_report(out, times)


def write_hybrid_report(out: Path, times: dict | None = None, rebuild_sweeps: bool = False) -> dict:
    """The study's report from ``out`` (``hybrid_report.write_hybrid_report``)."""
    from backend.replication import hybrid_report

    return hybrid_report.write_hybrid_report(out, times, rebuild_sweeps)

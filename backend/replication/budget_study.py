"""The detour study on the sweep and suite machinery (``python -m backend replicate``, ``--budgets``, ``--preset
quick|standard|gpu|paper``): the paper's three findings, at one budget or over several.

One sweep: ``arm`` x ``phases.main.tokens`` (the budgets) x pretraining seeds, every run fine-tuned on every task of
a suite (``configs/suites/bio-ner.yaml`` by default) over fine-tuning seeds. The arms (``ARMS``):

* ``mlm``, the baseline (the reference every other arm is compared with, same seed and budget);
* ``clm_detour``, the detour: finding 1 is its suite aggregate against MLM (mean delta, IQM, P(improvement), wins
  per task; ``evaluation.aggregate.compare``);
* ``mlm-control``, the seed-noise control: MLM again on seed s's data order with another seed (other masks), so
  CKA(control, MLM) is what seed noise alone gives; finding 2 is the detour's divergence in the lower layers
  against it, per CKA measure (debiased, and linear for the paper's numbers);
* ``freeze-low`` / ``freeze-mid``, the interventions: the detour with the lower / middle third of the blocks fixed
  during the CLM phase; finding 3 is their suite aggregate against MLM (the paper: the gain goes with the low
  third frozen, stays with the middle third frozen).

Same seed = same data order in every arm, same budget = same tokens. Over budgets the report states where the sign
of each comparison changes (``crossover``). The sweep resumes (rerun the same command) and runs on Slurm
(``--executor slurm``). With ``drop_weights`` the runs' weights are deleted once measured: the folder (metrics,
results, reports) can then be copied back from a GPU box without checkpoints.

Layout of ``OUT``: ``settings.json``, ``data/`` (train / held-out / CKA texts split off the corpus by whole
documents), ``sweep/`` (the sweep folder: runs, results, suites, its own report), ``report.md|html|json``,
``figures/crossover.html|png``, ``timing.json`` (wall time, load average, machine).
"""

from __future__ import annotations

import copy
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

from backend.core import atomic
from backend.core.errors import ConfigError
from backend.core.paths import DEFAULT_MODEL
from backend.replication.budget_report import load_now
from backend.replication.detour_presets import (  # noqa: F401  (the study's definition, read from here too)
    ARMS,
    BUDGET_PRESETS,
    CKA_MEASURES,
    PAIR_ARMS,
    PAPER,
    PAPER_DELTAS,
    SUITE,
)
from backend.replication.inputs import (  # noqa: F401  (parse_budgets: the command line reads it from here)
    ReplicationError,
    check_budgets,
    check_cka,
    layer_range,
    layer_thirds,
    parse_budgets,
    resolve_base,
    resolve_data,
)


def resolve_budget_study(
    preset: str,
    *,
    model: str | None = None,
    corpus: str | None = None,
    suite: str | None = None,
    budgets: list[int] | None = None,
    seeds: int | None = None,
    finetune_seeds: int | None = None,
    drop_weights: bool | None = None,
    cka: str | None = None,
    measure_jobs: int | None = None,
    interventions: bool | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> dict:
    """The preset with the command line's choices applied and checked; raises a DetourError naming what is wrong.
    ``cka``: one CKA measure (debiased, linear) instead of both. ``interventions`` False: the MLM / detour pair
    alone (no seed-noise control, no freezes)."""
    from backend.engine.config import apply_override, parse_override
    from backend.evaluation.suite import load_suite

    if preset not in BUDGET_PRESETS:
        raise ConfigError("preset", preset, f"use one of: {', '.join(BUDGET_PRESETS)}")
    s = copy.deepcopy(BUDGET_PRESETS[preset])
    s["preset"] = preset
    for item in overrides:
        apply_override(s, *parse_override(item), scope="preset")
    t = s["train"]
    per_step = t["batch_size"] * t["seq_len"]
    # the decay phase (decay_fraction of the budget) must hold one optimizer step too
    s["budgets"] = check_budgets(budgets or s["budgets"], math.ceil(per_step / min(1.0, t["decay_fraction"] or 1.0)),
                                 "--budgets" if budgets else "budgets")  # fmt: skip
    if seeds is not None:
        s["seeds"] = seeds
    if isinstance(s["seeds"], bool) or not isinstance(s["seeds"], int) or s["seeds"] < 1:
        raise ConfigError("--pretrain-seeds" if seeds is not None else "seeds", s["seeds"],
                          "a whole number of pretraining seeds, at least 1 (3 by default)")  # fmt: skip
    if finetune_seeds is not None:
        s["finetune"]["seeds"] = finetune_seeds
    if drop_weights is not None:
        s["drop_weights"] = drop_weights
    if measure_jobs is not None:
        if isinstance(measure_jobs, bool) or not isinstance(measure_jobs, int) or measure_jobs < 1:
            raise ConfigError("--measure-jobs", measure_jobs, "a whole number of runs fine-tuned at once, at least 1")
        s["measure_jobs"] = measure_jobs
    s.setdefault("drop_weights", False)
    s["cka"] = {"n_texts": 200, "max_len": 128, **(s.get("cka") or {})}
    if cka:
        s["cka"]["measures"] = [cka]
    for measure in s["cka"]["measures"]:
        check_cka({**s["cka"], "measure": measure})
    s["suite"] = load_suite(suite or SUITE)["path"]  # every key of the file checked now, not after training
    s["corpus"] = str(resolve_data(corpus or "shared:craft_pmc_oa_text", "corpus", "--corpus"))
    s["model"], n_layers = resolve_base(model or DEFAULT_MODEL)
    s["interventions"] = s.get("interventions", True) if interventions is None else bool(interventions)
    s["arms"] = list(ARMS) if s["interventions"] else list(PAIR_ARMS)
    if s["interventions"]:
        if n_layers < 3:
            raise ConfigError("--model", s["model"], f"a base with at least 3 blocks for the freeze interventions "
                              f"(this one has {n_layers}); or pass --no-interventions")  # fmt: skip
        low, mid = layer_thirds(n_layers)
        s["layers"] = {"n": n_layers, "low_range": layer_range(low), "mid_range": layer_range(mid)}
    s["study"] = "detour-budgets"
    check_run_settings(s)
    return s


def check_run_settings(s: dict) -> None:
    """Every run setting a ``--set`` may have changed (train.*, logging.*, finetune.*) checked now, as the runs and
    fine-tunes will read them: a bad value is refused before a plan is printed or a run queued."""
    from backend.engine.config import load_config
    from backend.sweeps.sweep import _evaluation

    load_config(base_config({**s, "cka": None}))
    _evaluation({"suite": s["suite"], "hparams": s["finetune"]})


def arm_overrides(s: dict) -> dict[str, dict]:
    """Each arm's config overrides (``grid.run_config`` applies them per seed)."""
    arms = {"mlm": {"recipe": "mlm"}, "clm_detour": {"recipe": "clm_detour"},
            # the paper's control: seed s's data order (data_seed), another seed for masks and initialised parts
            "mlm-control": {"recipe": "mlm", "train.data_seed": "{seed}", "train.seed": "{seed+1000}"}}  # fmt: skip
    if s.get("layers"):
        for arm, third in (("freeze-low", "low_range"), ("freeze-mid", "mid_range")):
            arms[arm] = {"recipe": "clm_detour", "phases.main.freeze.layers": s["layers"][third]}
    return {a: arms[a] for a in s.get("arms") or PAIR_ARMS}


def base_config(s: dict) -> dict:
    """With CKA, the corpus split the replication uses (whole documents held out, ``OUT/data``), so the CKA texts are
    never trained on; without, the trainer's own held-out fraction."""
    t = s["train"]
    data = {"corpus": s["corpus"], "heldout_fraction": 0.1}
    if s.get("cka"):
        d = Path(s["data_dir"])
        data = {"corpus": str(d / "train.txt"), "heldout_file": str(d / "heldout.txt")}
    return {
        "name": "detour",
        "recipe": "mlm",
        "model": {"name": s["model"]},
        "data": data,
        "train": {k: t[k] for k in ("seq_len", "batch_size", "lr", "precision")} | {"seed": 0},
        "phases": {"main": {"tokens": s["budgets"][0]}, "decay": {"fraction": t["decay_fraction"]}},
        "logging": {**s["logging"], "keep_checkpoints": 1},
    }


def manifest(s: dict, executor: str = "queue") -> dict:
    from backend.sweeps.sweep import plan_sweep

    arms = arm_overrides(s)
    return plan_sweep(
        base_config(s),
        grid=[f"arm={','.join(arms)}", f"phases.main.tokens={','.join(map(str, s['budgets']))}"],
        seeds=s["seeds"],
        name="detour-budgets",
        reference="mlm",
        evaluation={
            "suite": s["suite"],
            "hparams": s["finetune"],
            "drop_weights": s["drop_weights"],
            **cka_evaluation(s),
        },  # fmt: skip
        executor=executor,
        max_concurrent=s["max_concurrent"],
        arms=arms,
        max_runs=None,  # the study's size is its plan's (replicate --plan says it)
    )


def cka_evaluation(s: dict) -> dict:
    c = s.get("cka")
    if not c:
        return {}
    return {"cka_texts": str(Path(s["data_dir"]) / "cka_texts.txt"), "cka_n_texts": c["n_texts"],
            "cka_max_len": c.get("max_len", 128), "cka_measures": c.get("measures") or [c["measure"]]}  # fmt: skip


def prepare_data(s: dict, out: Path) -> None:
    """``OUT/data``: train / held-out / CKA texts split off the corpus by whole documents (once; a rerun reuses it)."""
    from backend.replication.corpus import split_corpus

    d = out / "data"
    s["data_dir"] = str(d)
    if not (d / "cka_texts.txt").exists():
        split_corpus(s["corpus"], d, heldout_fraction=0.1, min_words=20, seed=0)


# ------------------------------------------------------------------------------------------------ the plan


def n_params(s: dict) -> int:
    """The base's parameter count (built on the meta device: no weights read), once per base."""
    from backend.engine.models import model_config_of
    from backend.runs.doctor import parameter_count

    if s["model"] not in _N_PARAMS:
        _N_PARAMS[s["model"]] = parameter_count(model_config_of({"name": s["model"]}))
    return _N_PARAMS[s["model"]]


_N_PARAMS: dict[str, int] = {}


def plan(s: dict, device: str | None = None) -> dict:
    """Tokens, runs and fine-tunes of the study and the time they take here (``study_time``): training at the rate
    this machine measured for the base at the preset's precision, sequence length and batch (None, and said, before
    one was measured), fine-tuning at the seconds per fine-tune measured here at these settings (else fitted)."""
    import torch

    from backend.engine.precision import resolve_precision
    from backend.replication import study_time

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    n_arms = len(s.get("arms") or PAIR_ARMS)
    runs = n_arms * len(s["budgets"]) * s["seeds"]
    tokens = sum(n_arms * s["seeds"] * b * (1 + s["train"]["decay_fraction"]) for b in s["budgets"])
    tasks = study_time.suite_tasks(s["suite"], s["finetune"])
    fts = runs * sum(t["seeds"] for t in tasks)
    try:
        precision = resolve_precision(s["train"]["precision"], device)[0]
    except Exception:  # noqa: BLE001 - e.g. bf16 asked on a CPU: no rate, and the plan says so
        precision = None
    slots = max(1, int(s["max_concurrent"])) if device == "cpu" else 1
    t = s["train"]
    tr = study_time.training(n_params(s), precision, device, t["seq_len"], t["batch_size"], tokens, runs, slots)
    ft = study_time.finetune_seconds(tasks, n_params(s), device)
    ft_s = fts * ft["seconds"] / max(1, int(s.get("measure_jobs") or 1))  # --measure-jobs at once
    total = (tr["train_s"] + ft_s) if tr["train_s"] is not None else None
    return {"preset": s["preset"], "device": device, "precision": precision, "runs": runs, "tokens": int(tokens),
            "finetunes": fts, "rate": tr["rate"], "rate_pick": tr["pick"], "train_s": tr["train_s"],
            "start_text": tr["start_text"], "finetune_s": ft_s, "finetune_text": ft["text"], "total_s": total,
            "slots": slots, "together": tr["together"]}  # fmt: skip


def plan_text(p: dict) -> str:
    """The plan's size and time in one paragraph, each part with what it stands on."""
    from backend.engine.progress import hms
    from backend.engine.rates import describe

    head = (f"{p['preset']}: {p['runs']} runs, {p['tokens']:,} training tokens, {p['finetunes']} fine-tunes "
            f"({p['device']}, {p['precision'] or 'precision not available here'})")  # fmt: skip
    if p["rate"] is None:
        return (f"{head}; no training rate measured on this machine yet for this base and precision, so no time "
                f"is estimated (fine-tuning alone ~{hms(p['finetune_s'])}: {p['finetune_text']}); a run of this base "
                f"of 20 steps or more records one (`python bench/bench_plan_time.py` trains one first)")  # fmt: skip
    side = f" per run, {p['together']} side by side" if p.get("together", 1) > 1 else ""
    return (f"{head}; ~{hms(p['total_s'])}: training {hms(p['train_s'])} at {p['rate']:,.0f} tokens/s{side} "
            f"({describe(p['rate_pick'])}; {p['start_text']}), fine-tuning and CKA ~{hms(p['finetune_s'])} "
            f"({p['finetune_text']})")  # fmt: skip


# ------------------------------------------------------------------------------------------------ run and report


STEPS = ["data", "train", "measure", "report"]  # what status.json counts


def run_study(s: dict, out: Path, executor: str = "queue", command: list[str] | None = None,
              log: Callable[[str], None] | None = None, resume: list[str] | None = None) -> dict:  # fmt: skip
    """Run (or resume) the study into ``out`` and write its report; returns the report. One process at a time
    (``study_run.running``: a second one is refused while the first holds ``out/study.lock``); a signal stops it
    with its runs cancelled (``StudyStopped``). ``resume``: the ``replicate`` arguments that resume it."""
    from backend.replication.study_run import running, study_log

    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 2) // max(1, s["max_concurrent"]))))
    out = Path(out).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = log or study_log(out)
    with running(out, "detour", STEPS, resume, log) as run:
        return _run_study(s, out, executor, command, run)


def _run_study(s: dict, out: Path, executor: str, command: list[str] | None, run) -> dict:
    from backend.replication import study_time
    from backend.replication.budget_report import machine
    from backend.sweeps import sweep

    old = atomic.read_json(out / "settings.json")
    if old and old.get("study") != s["study"]:
        raise ReplicationError(f"{out} holds another study ({old.get('study', 'the detour replication')}); "
                               "pick another --out")  # fmt: skip
    atomic.write_json(out / "settings.json", s)
    t0, load0 = time.time(), load_now()
    run.stage("data", "the corpus split into training, held-out and CKA texts (by whole documents)")
    if s.get("cka"):
        prepare_data(s, out)
        atomic.write_json(out / "settings.json", s)
    m = manifest(s, executor)
    n = sum(len(c["runs"]) for c in m["cells"])
    run.stage("train", f"{n} runs on the sweep in {out / 'sweep'}")
    sweep.launch(m, out / "sweep", part_of=out)
    sweep.wait(out / "sweep", progress=lambda st: run.log(f"   sweep: {sweep._counts_line(st['counts'])}"))
    run.check(out / "sweep")
    t_train = time.time() - t0
    study_time.record_trained(n_params(s), study_time.device(), out / "sweep", t0)
    t_measure = run.stage("measure", "every run fine-tuned on the suite and compared with MLM layer by layer")
    jobs = int(s.get("measure_jobs") or 1)
    sweep.finish(out / "sweep", run.log, jobs=jobs)
    tasks = study_time.suite_tasks(s["suite"], s["finetune"])
    study_time.record_measure_rate(n_params(s), out / "sweep", time.time() - t_measure, jobs, tasks)
    run.stage("report", "the report")
    timing = {"wall_s": time.time() - t0, "train_wall_s": t_train, "load_start": load0, "load_end": load_now(),
              "machine": machine(), "cpus": os.cpu_count(), "command": command}  # fmt: skip
    prev = atomic.read_json(out / "timing.json") or {}
    timing["previous"] = prev if prev else None
    atomic.write_json(out / "timing.json", timing)
    return write_report(out)


def write_report(out: Path, rebuild_sweep: bool = False) -> dict:
    """The study's report from ``out`` (``detour_report.write_report``)."""
    from backend.replication import detour_report

    return detour_report.write_report(out, rebuild_sweep)

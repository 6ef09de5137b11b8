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
from backend.replication.plan import ReplicationError, _resolve_data

SHARES = [0.0, 0.25, 0.5, 0.75, 1.0]
CPT_MLM_PROBABILITY = 0.40

PAPER = {
    "splits": (
        "From scratch, at every budget (12k, 22k and 42k steps; 210M-1B parameters), the CLM-then-MLM hybrids "
        "(25/75, 50/50, 75/25) beat pure MLM downstream; pure CLM is behind on the tasks that need bidirectional "
        "context."
    ),
    "cpt": (
        "Continuing an equally sized CLM-pretrained and MLM-pretrained model (610M, same data) with MLM at 40% "
        "masking for 22k steps: the CLM-started model ends better."
    ),
}

# Tiny from-scratch encoders: budgets in tokens (tokens per step = batch_size x seq_len). The quick preset is 20 + 4
# runs of 16-32 optimizer steps and one NER fine-tune per run and seed; its time is ``hybrid_estimate``'s (this
# machine's measured rate), never a fixed string.
HYBRID_PRESETS: dict[str, dict] = {
    "quick": {
        "description": (
            "Demo: 2-layer d=128 encoders, 5 splits x 2 budgets (16k, 32k tokens) x 2 "
            "seeds, NER on 128 sentences, then the 40% MLM continuation. Far too small to conclude; it runs the "
            "whole study and shows which way the numbers lean."
        ),
        "corpus": "shared:craft_pmc_oa_text",
        "ner_data": "shared:ncbi_disease",
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
        "shares": [0.0, 0.25, 0.5, 0.75, 1.0],
        "cpt": True,  # the 40% MLM continuation of the first budget's pure MLM and pure CLM runs
        "seeds": 2,
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
            "4-layer d=192 encoders, 5 splits x 2 budgets (131k, 262k tokens) x 3 "
            "seeds, NER on 400 sentences over 2 fine-tuning seeds, then the 40% MLM continuation."
        ),
        "corpus": "shared:craft_pmc_oa_text",
        "ner_data": "shared:ncbi_disease",
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
        "seeds": 3,
        "max_concurrent": 2,
        "logging": {"log_every": 10, "eval_every": 1000, "eval_batches": 8, "checkpoint_every": 50},
        "eval": {
            "seeds": 2,
            "epochs": 3,
            "lr": 1.0e-3,
            "batch_size": 16,
            "max_len": 128,
            "max_train_examples": 400,
            "max_eval_examples": 200,
        },
    },
}


def _hybrids_outcome(hybrids: list[dict]) -> tuple[dict, str]:
    """Finding 1 of the second paper from its comparisons: replicated when every hybrid beats pure MLM, not
    replicated when some are worse and none better, else inconclusive (one rule for both forms of the study)."""
    counts = {v: sum(c["verdict"] == v for c in hybrids) for v in ("better", "worse", "inconclusive")}
    if hybrids and counts["better"] == len(hybrids):
        return counts, "replicated"
    if counts["worse"] and not counts["better"]:
        return counts, "not replicated"
    return counts, "inconclusive"


def resolve_hybrid(
    preset: str,
    corpus: str | None = None,
    ner_data: str | None = None,
    seeds: int | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    budgets: list[int] | None = None,
    suite: str | None = None,
    drop_weights: bool | None = None,
    single_task: bool = False,
) -> dict:
    """The preset with paths resolved and ``--set`` overrides (``train.lr=...``, ``budgets=[...]``,
    ``shares=[0.0,0.5,1.0]``, ``cpt=false``) applied. ``budgets``: the budget axis (any list of token counts);
    every run is fine-tuned on a task suite (``suite``, bio-ner by default; ``eval`` then holds its seeds and caps),
    or on the one NER set with ``single_task``."""
    from backend.engine.config import apply_override, parse_override

    if preset not in HYBRID_PRESETS:
        raise ReplicationError(f"preset {preset!r}: one of {', '.join(HYBRID_PRESETS)}")
    s = copy.deepcopy(HYBRID_PRESETS[preset])
    s["preset"] = preset
    for item in overrides:
        apply_override(s, *parse_override(item), scope="preset")
    s["corpus"] = str(_resolve_data(corpus or s["corpus"], "corpus", "--corpus"))
    s["ner_data"] = str(_resolve_data(ner_data or s["ner_data"], "NER data", "--ner-data"))
    if seeds:
        s["seeds"] = int(seeds)
    if budgets:
        from backend.replication.budget_study import check_budgets

        s["budgets"] = check_budgets(budgets, s["train"]["batch_size"] * s["train"]["seq_len"])
    s.setdefault("shares", list(SHARES))
    if 0.0 not in s["shares"] or any(not 0.0 <= x <= 1.0 for x in s["shares"]):
        raise ReplicationError(f"shares {s['shares']}: CLM shares between 0 and 1, with 0.0 (pure MLM, the reference)")
    s["shares"] = sorted(float(x) for x in s["shares"])
    s.setdefault("cpt", True)
    if single_task and suite:
        raise ReplicationError("--single-task fine-tunes on one NER set (--ner-data); --suite asks for a suite")
    if not single_task:
        from backend.evaluation.suite import load_suite
        from backend.replication.budget_study import SUITE

        s["suite"] = load_suite(suite or SUITE)["path"]
    s.setdefault("suite", None)
    if drop_weights is not None:
        s["drop_weights"] = bool(drop_weights)
    s.setdefault("drop_weights", False)
    return s


_N_PARAMS: dict[str, int] = {}


def hybrid_estimate(preset: str | dict) -> dict:
    """How long the study takes here: its training tokens over this machine's last measured rate for an encoder of
    its size and precision (``engine.throughput.last_rate``, what the Launch form's estimate uses), plus its NER
    fine-tunes at the replication plan's per-sentence rates. ``{'rate', 'n_params', 'precision', 'train_tokens',
    'finetunes', 'train_s', 'ner_s', 'total_s'}``; ``rate`` and the seconds are None before this machine has trained
    a model of this size (the study's first runs record one)."""
    import torch

    from backend.engine.models import model_config_of
    from backend.engine.precision import resolve_precision
    from backend.engine.throughput import last_rate
    from backend.runs.doctor import parameter_count

    if isinstance(preset, str):
        s = {**HYBRID_PRESETS[preset], "preset": preset, "corpus": "", "ner_data": ""}
    else:  # resolved settings: the command line's budgets, shares and suite counted
        s = preset
    device = "cuda" if torch.cuda.is_available() else "cpu"
    precision = resolve_precision(s["train"]["precision"], device)[0]
    arch = json.dumps(s["arch"], sort_keys=True)
    if arch not in _N_PARAMS:  # a meta-device build, once per architecture (the page asks on every load)
        _N_PARAMS[arch] = parameter_count(model_config_of(base_config(s)["model"]))
    n_params = _N_PARAMS[arch]
    found = last_rate(n_params, precision, device)
    rate = found["tokens_per_s"] if found else None
    seeds, budgets = s["seeds"], s["budgets"]
    shares = s.get("shares") or SHARES
    train_tokens = len(shares) * sum(budgets) * seeds + 2 * seeds * budgets[0]  # the splits, then the 2 continuations
    n_cpt = 2 * seeds if s.get("cpt", True) else 0
    train_tokens -= 0 if n_cpt else 2 * seeds * budgets[0]
    n_tasks = 1
    if s.get("suite"):
        from backend.evaluation.suite import load_suite

        n_tasks = len(load_suite(s["suite"])["tasks"])
    finetunes = (len(shares) * len(budgets) * seeds + n_cpt) * s["eval"]["seeds"] * n_tasks
    e = s["eval"]
    per_ft = 1 + e["epochs"] * (0.03 * e["max_train_examples"] + 0.012 * e["max_eval_examples"])  # plan.estimate's
    out = {"rate": rate, "n_params": n_params, "precision": precision, "device": device,
           "train_tokens": train_tokens, "finetunes": finetunes, "train_s": None, "ner_s": finetunes * per_ft,
           "total_s": None, "measured_at": found.get("measured_at") if found else None}  # fmt: skip
    if rate:
        out["train_s"] = train_tokens / rate + 8 * (len(shares) * len(budgets) + 2) * seeds  # 8 s a run to start
        out["total_s"] = out["train_s"] + out["ner_s"]
    return out


def estimate_text(est: dict) -> str:
    """The estimate in one sentence, saying where it comes from, or that no rate is measured here yet."""
    size = f"{est['n_params'] / 1e6:.1f}M-parameter encoder ({est['precision']}, {est['device']})"
    if est["rate"] is None:
        return (f"No training rate is measured on this machine yet for this study's {size}, so no time is "
                f"estimated; its first runs record one ({est['train_tokens']:,} training tokens, "
                f"{est['finetunes']} NER fine-tunes).")  # fmt: skip
    return (f"~{max(1, round(est['total_s'] / 60))} min: {est['train_tokens']:,} training tokens at this machine's "
            f"last measured {est['rate']:,.0f} tokens/s for its {size}, plus {est['finetunes']} NER fine-tunes at "
            "the plan's rates.")  # fmt: skip


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
    e = s["eval"]
    if s.get("suite"):  # every task of the suite, with the preset's seeds and caps in place of the suite's
        return {"suite": s["suite"], "hparams": dict(e), "drop_weights": s.get("drop_weights", False)}
    return {
        "task": "ner",
        "data": s["ner_data"],
        "seeds": e["seeds"],
        "hparams": {k: v for k, v in e.items() if k != "seeds"},
    }


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
    )


STAGES = ("splits", "cpt", "report")


def _status(out: Path, state: str, step: str | None, **extra) -> None:
    """status.json in the detour replication's words (state, current_step, pid, steps_total): the Reports tab
    reads both studies' folders alike."""
    import os

    from backend.core.process import identity

    st = {"state": state, "current_step": step, "pid": os.getpid(), "pid_identity": identity()}
    cpt = (atomic.read_json(out / "settings.json") or {}).get("cpt", True)
    st["steps_total"] = len(STAGES) - (0 if cpt else 1)  # cpt=false: no continuation step to wait for
    atomic.write_json(out / "status.json", {**st, "study": "hybrid-splits", "updated_at": time.time(), **extra})


def _stage(out: Path, step: str, title: str, log: Callable[[str], None]) -> float:
    log(f"== {step}: {title}")
    _status(out, "running", step)
    return time.time()


def _done(out: Path, step: str, t0: float) -> float:
    """A step marker (``steps/<step>.json``, what the Reports tab counts) with the step's wall time."""
    took = time.time() - t0
    atomic.write_json(out / "steps" / f"{step}.json", {"elapsed_s": took, "finished_at": time.time()})
    return took


def run_hybrid(s: dict, out: str | Path, log: Callable[[str], None] = print, command: list[str] | None = None) -> dict:
    """Run (or resume) the study into ``out`` and write its report; returns the report."""
    import os

    from backend.sweeps import sweep

    # the cells train side by side: one BLAS thread pool each over this machine's cores, not each over all of them
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 2) // s["max_concurrent"])))
    out = Path(out).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    settings_file = out / "settings.json"
    if settings_file.exists() and json.loads(settings_file.read_text()).get("study") != "hybrid-splits":
        raise ReplicationError(f"{out} holds another study; pick another --out")
    atomic.write_json(settings_file, {**s, "study": "hybrid-splits"})
    times = {}
    from backend.replication.budget_study import load_now

    t0, load0 = time.time(), load_now()
    t = _stage(out, "splits", f"train {len(s['shares'])} splits x {len(s['budgets'])} budgets x seeds", log)
    splits = splits_manifest(s)
    sweep.launch(splits, out / "splits")
    sweep.wait(out / "splits", progress=lambda st: log(f"   splits: {sweep._counts_line(st['counts'])}"))
    times["splits_train_s"] = _done(out, "splits", t)
    if s.get("cpt", True):
        t = _stage(out, "cpt", "continue pure CLM and pure MLM with MLM 40%", log)
        cpt = cpt_manifest(s, out, splits)
        sweep.launch(cpt, out / "cpt")
        sweep.wait(out / "cpt", progress=lambda st: log(f"   cpt: {sweep._counts_line(st['counts'])}"))
        times["cpt_train_s"] = _done(out, "cpt", t)
    t = _stage(out, "report", "fine-tuning of every run and the reports", log)
    jobs = int(s.get("measure_jobs") or 1)
    sweep.finish(out / "splits", log, jobs=jobs)
    if s.get("cpt", True):
        sweep.finish(out / "cpt", log, jobs=jobs)
    times["eval_s"] = time.time() - t
    times["wall_s"] = time.time() - t0
    from backend.replication.budget_report import machine

    atomic.write_json(out / "timing.json", {"wall_s": times["wall_s"], "load_start": load0, "load_end": load_now(),
                                            "machine": machine(), "command": command})  # fmt: skip
    rep = write_hybrid_report(out, times)
    _done(out, "report", t)
    _status(out, "done", None)
    return rep


# ------------------------------------------------------------------------------------------------ the report


def _rows(rep: dict) -> list[dict]:
    key = "finetune" if "finetune" in rep["tables"] else rep["primary"]
    return rep["tables"].get(key, []) if key else []


def _ci(ci) -> str:
    return "-" if not ci else f"[{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"


def _verdict(d: dict) -> str:
    if d["verdict"] == "inconclusive" and d.get("seeds_needed"):
        return f"inconclusive (~{d['seeds_needed']} seeds would detect it)"
    return d["verdict"]


def hybrid_findings(splits_rep: dict, cpt_rep: dict | None) -> dict:
    """The two findings as this run measured them, each with its paired deltas and a one-word outcome."""
    rows = _rows(splits_rep)
    comps = []
    for r in rows:
        if r["delta"]:
            x = r["values"]["hybrid.clm_share"]
            comps.append(
                {
                    "split": f"{100 * x:.0f}% CLM / {100 * (1 - x):.0f}% MLM" if x < 1 else "100% CLM",
                    "clm_share": x,
                    "tokens": r["values"]["hybrid.tokens"],
                    **r["delta"],
                }
            )
    hybrids = [c for c in comps if 0 < c["clm_share"] < 1]
    counts, outcome = _hybrids_outcome(hybrids)
    f1 = {"title": "Hybrids beat pure MLM at every budget", "paper": PAPER["splits"], "comparisons": comps}
    f1.update({"counts": counts, "verdict": outcome})
    f2 = {"title": "CLM-started beats MLM-started after MLM 40% continuation", "paper": PAPER["cpt"]}
    crow = [r for r in _rows(cpt_rep) if r["delta"]] if cpt_rep else []
    if crow:
        d = crow[0]["delta"]
        f2.update(
            {
                "delta": d,
                "verdict": {"better": "replicated", "worse": "not replicated"}.get(d["verdict"], "inconclusive"),
            }
        )
    else:
        f2.update({"delta": None, "verdict": "not measured"})
    return {"splits": f1, "cpt": f2}


def split_name(share: float) -> str:
    return "100% CLM" if share >= 1 else f"{100 * share:.0f}% CLM / {100 * (1 - share):.0f}% MLM"


def _word(c: dict) -> str:
    """'better' / 'worse' / 'inconclusive' from a suite comparison's verdict (``aggregate.compare``)."""
    v = str(c.get("verdict") or "")
    return "better" if v == f"{c.get('a')} better" else "worse" if v == f"{c.get('b')} better" else "inconclusive"


def suite_findings(budget: dict, cpt_rep: dict | None) -> dict:
    """The two findings from the suite aggregates: each hybrid split vs pure MLM at each budget, and the
    CLM-started minus MLM-started continuation."""
    comps = []
    for arm, pts in budget["panels"].items():
        for p in pts:
            v = p["verdict"] if p["verdict"] in ("better", "worse") else "inconclusive"
            comps.append({"split": arm, "tokens": p["tokens"], "mean": p["mean_delta"]["value"],
                          "ci95": p["mean_delta"]["ci95"], "verdict": v})  # fmt: skip
    hybrids = [c for c in comps if c["split"] not in ("100% CLM",)]
    counts, outcome = _hybrids_outcome(hybrids)
    f1 = {"title": "Hybrids beat pure MLM at every budget", "paper": PAPER["splits"], "comparisons": comps,
          "counts": counts, "verdict": outcome}  # fmt: skip
    f2 = {"title": "CLM-started beats MLM-started after MLM 40% continuation", "paper": PAPER["cpt"], "delta": None,
          "verdict": "not measured"}  # fmt: skip
    comps2 = ((cpt_rep or {}).get("suite") or {}).get("comparisons") or []
    if comps2:
        c = comps2[0]
        agg = (c.get("aggregate") or {}).get("mean_delta") or {}
        f2["delta"] = {"mean": agg.get("value"), "ci95": agg.get("ci95"), "verdict": _word(c), "points": True}
        f2["verdict"] = {"better": "replicated", "worse": "not replicated"}.get(_word(c), "inconclusive")
    return {"splits": f1, "cpt": f2}


def render_hybrid(rep: dict) -> str:
    if rep.get("budget"):
        return render_hybrid_budgets(rep)
    f1, f2 = rep["findings"]["splits"], rep["findings"]["cpt"]
    metric = rep["metric"]
    lines = [
        f"# The second paper's study, preset {rep['preset']}",
        "",
        rep["description"],
        "",
        f"Metric: {metric}, mean over fine-tuning seeds per pretraining seed; deltas in points (x100), paired by "
        "pretraining seed, 95% paired t intervals; 'inconclusive' when the interval contains 0, with the paired "
        "seeds a two-sided t test (alpha 0.05, power 0.8) would need at the observed spread.",
        "",
        rep["splits_summary"],
        "",
        f"## 1. {f1['title']}: **{f1['verdict'].upper()}**",
        "",
        f"Paper: {f1['paper']}",
        "",
        f"This run: of {sum(f1['counts'].values())} hybrid-vs-MLM comparisons, {f1['counts']['better']} better, "
        f"{f1['counts']['worse']} worse, {f1['counts']['inconclusive']} inconclusive.",
        "",
        "| budget (tokens) | split | delta vs 100% MLM | 95% CI | n | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for c in f1["comparisons"]:
        lines.append(
            f"| {c['tokens']:,} | {c['split']} | {100 * c['mean']:+.2f} | {_ci(c['ci95'])} | {c['n']} | {_verdict(c)} |"
        )
    lines += ["", "Per cell (mean, 95% CI over pretraining seeds):", "", "| cell | mean | 95% CI |", "|---|---|---|"]
    for r in rep["splits_rows"]:
        ci = r["ci95"]
        lines.append(
            f"| {r['label']} | {100 * r['mean']:.2f} | {'-' if not ci else f'[{100 * ci[0]:.2f}, {100 * ci[1]:.2f}]'} |"
            if r["mean"] is not None
            else f"| {r['label']} | - | - |"
        )
    lines += ["", f"## 2. {f2['title']}: **{f2['verdict'].upper()}**", "", f"Paper: {f2['paper']}", ""]
    if f2["delta"]:
        d = f2["delta"]
        lines.append(
            f"This run: CLM-started minus MLM-started {100 * d['mean']:+.2f} points, 95% CI {_ci(d['ci95'])}, "
            f"n = {d['n']} seeds: {_verdict(d)}."
        )
    else:
        lines.append("This run: not measured (the continuation did not finish; see cpt/report.md).")
    lines += _loss_section(rep.get("loss_rows") or [])
    lines += [
        "",
        "Figures: `splits/figures/finetune.html` (F1 vs CLM share, one line per budget), "
        "`splits/figures/heldout_mlm_loss.html`; full sweep reports in `splits/report.md` and `cpt/report.md`.",
        "",
        f"Time: {', '.join(f'{k} {v:.0f} s' for k, v in rep['times'].items())}.",
        "",
    ]
    return "\n".join(lines)


def _loss_section(rows: list[dict]) -> list[str]:
    """The held-out MLM loss against pure MLM of the same budget: what a tiny from-scratch encoder does measure
    (CLM-heavy splits see fewer masked tokens, so pure MLM is expected to lead here; the paper's claim is
    downstream)."""
    deltas = [r for r in rows if r["delta"]]
    if not deltas:
        return []
    lines = ["", "### Held-out MLM loss (lower is better), each split minus pure MLM of its budget", ""]
    lines += ["| cell | loss | delta | 95% CI | verdict |", "|---|---|---|---|---|"]
    for r in rows:
        d = r["delta"]
        ci = "-" if not d or not d["ci95"] else f"[{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]"
        mean = "-" if r["mean"] is None else f"{r['mean']:.3f}"
        delta = "-" if not d or d["mean"] is None else f"{d['mean']:+.3f}"
        lines.append(f"| {r['label']} | {mean} | {delta} | {ci} | {_verdict(d) if d else 'reference'} |")
    return lines


def write_hybrid_report(out: Path, times: dict | None = None, rebuild_sweeps: bool = False) -> dict:
    """report.md / .html / .json of the study from its two sweeps' reports (``--report-only`` rebuilds it, the
    sweeps' own reports first with ``rebuild_sweeps``: from their small files, as this version writes them)."""
    from backend.reporting.html_page import md_to_html
    from backend.sweeps.report import figure, write_report

    if rebuild_sweeps:
        for part in ("splits", "cpt"):
            if (out / part / "report.json").exists():
                write_report(out / part)
    s = json.loads((out / "settings.json").read_text())
    splits_rep = json.loads((out / "splits" / "report.json").read_text())
    cpt_path = out / "cpt" / "report.json"
    cpt_rep = json.loads(cpt_path.read_text()) if cpt_path.exists() else None
    if times is None and (out / "report.json").exists():
        times = json.loads((out / "report.json").read_text()).get("times")
    rep = {
        "study": "hybrid-splits",
        "preset": s["preset"],
        "description": s["description"],
        "metric": "NER test F1 (entity level)" if "finetune" in splits_rep["tables"] else "held-out MLM loss",
        "splits_summary": splits_rep["summary"],
        "splits_rows": _rows(splits_rep),
        "loss_rows": splits_rep["tables"].get("heldout_mlm_loss", []),
        "findings": hybrid_findings(splits_rep, cpt_rep),
        "times": times or {},
    }
    if splits_rep.get("suite"):  # a suite: each split against pure MLM per budget, and where the sign changes
        from backend.replication import budget_report

        title = f"Hybrid splits vs pure MLM over token budgets ({s['preset']}, {Path(s['suite']).stem})"
        rep["budget"] = budget_report.build(out, out / "splits", split_name, "100% MLM",
                                            lambda arm: f"the {arm} split", title)  # fmt: skip
        rep["budget"]["title"] = title
        rep["findings"] = suite_findings(rep["budget"], cpt_rep)
        rep["metric"] = f"suite {Path(s['suite']).stem} (test scores in points)"
        rep["timing"] = atomic.read_json(out / "timing.json") or {}
        rep["settings"] = s
    md = render_hybrid(rep)
    atomic.write_json(out / "report.json", rep)
    atomic.write_text(out / "report.md", md)
    figs = [figure(splits_rep, k) for k in splits_rep["tables"]]
    atomic.write_text(out / "report.html", md_to_html(md, figs, f"hybrid-splits {s['preset']}"))
    return rep


def render_hybrid_budgets(rep: dict) -> str:
    """The study's report when every run was fine-tuned on a suite: per split and budget the suite aggregate against
    pure MLM, where its sign changes, the losses and the continuation."""
    from backend.replication.budget_report import render as budget_sections
    from backend.replication.budget_study import timing_lines
    from backend.replication.crossover import tokens_text

    s, b, tm = rep["settings"], rep["budget"], rep.get("timing") or {}
    f1, f2 = rep["findings"]["splits"], rep["findings"]["cpt"]
    e = s["eval"]
    lines = [f"# {b.get('title') or 'Hybrid splits over token budgets'}", "",
             f"Preset `{s['preset']}` with these settings (budgets, splits and fine-tuning as run):", "",
             f"- from-scratch encoders: {s['arch']['num_hidden_layers']} layers, d={s['arch']['hidden_size']}; "
             f"splits (CLM share, CLM first): {', '.join(split_name(x) for x in s['shares'])}",
             f"- budgets (tokens per run): {', '.join(tokens_text(x) for x in s['budgets'])}; pretraining seeds "
             f"{b['seeds']}; corpus `{s['corpus']}`",
             f"- suite `{s['suite']}`; fine-tuning: " + ", ".join(f"{k} {v}" for k, v in e.items()), "",
             rep["splits_summary"], "",
             f"## 1. {f1['title']}: **{f1['verdict'].upper()}**", "", f"Paper: {f1['paper']}", "",
             f"This run: of {sum(f1['counts'].values())} hybrid-vs-MLM comparisons (split x budget, suite mean delta), "
             f"{f1['counts']['better']} better, {f1['counts']['worse']} worse, {f1['counts']['inconclusive']} "
             "inconclusive.", "", "## Where the sign changes", ""]  # fmt: skip
    lines += budget_sections(b)
    lines += [f"## 2. {f2['title']}: **{f2['verdict'].upper()}**", "", f"Paper: {f2['paper']}", ""]
    d = f2.get("delta")
    if d and d.get("mean") is not None:
        ci = d.get("ci95")
        ci_t = "-" if not ci else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"
        lines.append(f"This run (budget {tokens_text(s['budgets'][0])}): CLM-started minus MLM-started "
                     f"{d['mean']:+.2f} points over the suite, 95% CI {ci_t}: {d['verdict']}.")  # fmt: skip
    else:
        lines.append("This run: not measured (the continuation was not run or did not finish).")
    lines += ["", "Chart: `figures/crossover.html` (and `.png`): against tokens (log scale) each split's suite mean "
              "and IQM delta against pure MLM (points, 95% intervals), P(improvement), and the held-out MLM and CLM "
              "losses of every split. Full sweep reports: `splits/report.md`" + (", `cpt/report.md`" if
              s.get("cpt", True) else "") + ".", ""]  # fmt: skip
    lines += timing_lines(tm)
    return "\n".join(lines)

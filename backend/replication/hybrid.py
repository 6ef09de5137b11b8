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
    from backend.evaluation.suite import load_suite
    from backend.replication.budget_study import SUITE

    s["suite"] = load_suite(suite or SUITE)["path"]
    if drop_weights is not None:
        s["drop_weights"] = bool(drop_weights)
    s.setdefault("drop_weights", False)
    return s


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
    from backend.replication.budget_report import machine
    from backend.replication.budget_study import load_now
    from backend.sweeps import sweep

    settings_file = out / "settings.json"
    if settings_file.exists() and json.loads(settings_file.read_text()).get("study") != "hybrid-splits":
        raise ReplicationError(f"{out} holds another study; pick another --out")
    atomic.write_json(settings_file, {**s, "study": "hybrid-splits"})
    times = {}
    t0, load0 = time.time(), load_now()
    t = run.stage("splits", f"train {len(s['shares'])} splits x {len(s['budgets'])} budgets x seeds")
    splits = splits_manifest(s)
    sweep.launch(splits, out / "splits")
    sweep.wait(out / "splits", progress=lambda st: run.log(f"   splits: {sweep._counts_line(st['counts'])}"))
    run.check(out / "splits")
    study_time.record_trained(n_params(s), study_time.device(), out / "splits", t)
    times["splits_train_s"] = time.time() - t
    if s.get("cpt", True):
        t = run.stage("cpt", "continue pure CLM and pure MLM with MLM 40%")
        cpt = cpt_manifest(s, out, splits)
        sweep.launch(cpt, out / "cpt")
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


# ------------------------------------------------------------------------------------------------ the report


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


def write_hybrid_report(out: Path, times: dict | None = None, rebuild_sweeps: bool = False) -> dict:
    """report.md / .html / .json of the study from its two sweeps' reports (``--report-only`` rebuilds it, the
    sweeps' own reports first with ``rebuild_sweeps``: from their small files, as this version writes them)."""
    from backend.replication import budget_report
    from backend.reporting.html_page import md_to_html
    from backend.sweeps.report import figure, write_report

    s = json.loads((out / "settings.json").read_text())
    if not s.get("suite"):  # fine-tuned on one NER set by the retired one-task form: its files stay as they are
        raise ReplicationError(f"{out}: a study fine-tuned on one NER set by an older version; its report files stay "
                               "readable as they are and are not rebuilt (rerun it into a new --out to measure "
                               "it on a suite, or on a suite of one task)")  # fmt: skip
    if rebuild_sweeps:
        for part in ("splits", "cpt"):
            if (out / part / "report.json").exists():
                write_report(out / part)
    splits_rep = json.loads((out / "splits" / "report.json").read_text())
    cpt_path = out / "cpt" / "report.json"
    cpt_rep = json.loads(cpt_path.read_text()) if cpt_path.exists() else None
    if times is None and (out / "report.json").exists():
        times = json.loads((out / "report.json").read_text()).get("times")
    title = f"Hybrid splits vs pure MLM over token budgets ({s['preset']}, {Path(s['suite']).stem})"
    budget = budget_report.build(out, out / "splits", split_name, "100% MLM", lambda arm: f"the {arm} split", title)
    budget["title"] = title
    rep = {
        "study": "hybrid-splits",
        "preset": s["preset"],
        "description": s["description"],
        "metric": f"suite {Path(s['suite']).stem} (test scores in points)",
        "splits_summary": splits_rep["summary"],
        "budget": budget,
        "findings": suite_findings(budget, cpt_rep),
        "times": times or {},
        "timing": atomic.read_json(out / "timing.json") or {},
        "settings": s,
    }
    md = render_hybrid_budgets(rep)
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

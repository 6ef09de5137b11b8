"""The sweep report: per cell the metric as mean with a 95% t interval over seeds, drawn as the seed paper draws it
(metric against the first axis, one line per value of the second), and each cell's paired delta against the
reference cell of its line (paired by seed) with the interval and verdict of the one rule the suite aggregate and the
replication verdicts use too (``evaluation.delta_verdict``: paired t, or t over pretraining-seed means when the
cells were fine-tuned with several seeds each), the variance levels the counts do not measure, and, where the
verdict is inconclusive, how many seeds a two-sided paired t test (alpha 0.05, power 0.8) needs to detect the
observed delta at the observed spread. Written as report.json, report.md, report.html and figures/<metric>.html|png.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from backend.core import atomic
from backend.core.errors import DetourError
from backend.evaluation.aggregate import seed_levels, t_summary, task_delta
from backend.evaluation.stats import mean_std, seeds_needed, t_interval
from backend.evaluation.suite_report import clip_to_scale
from backend.reporting import figure_style  # noqa: F401  (the lab's template: plotly's default once imported)
from backend.reporting.figure_files import export_pngs, write_html
from backend.reporting.html_page import md_to_html
from backend.sweeps.measure import METRICS, _line_key, read_results

ALPHA, POWER = 0.05, 0.8


def _fmt(v, digits: int = 4) -> str:
    return "-" if v is None else f"{v:.{digits}g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.2e}"


def _fmt_ci(ci) -> str:
    return "-" if not ci else f"[{_fmt(ci[0])}, {_fmt(ci[1])}]"


SCALE = {"finetune": 100.0}  # fine-tuned scores in points (F1 in percent), as evaluate prints them


def _cell_scores(m: dict, results: dict[str, dict], metric: str) -> dict[int, dict]:
    """cell index -> key -> value: the pretraining seed, or (pretraining seed, fine-tuning seed) for fine-tuned
    scores when the runs recorded each fine-tuning seed (a cell then keeps both levels and pairs on both)."""
    scale = SCALE.get(metric, 1.0)
    out = {}
    for c in m["cells"]:
        vals = {}
        for s, r in c["runs"].items():
            rec = results.get(r) or {}
            if metric == "finetune" and rec.get("finetune_by_seed"):
                vals.update({(int(s), int(f)): scale * v for f, v in rec["finetune_by_seed"].items()})
            elif rec.get(metric) is not None:
                vals[int(s)] = scale * rec[metric]
        out[c["index"]] = vals
    return out


def _cell_interval(vals: dict) -> tuple[list[float] | None, str]:
    """The cell mean's 95% t interval the data supports: over pretraining-seed means when there are two or more
    (fine-tuning seeds averaged within each), else over the fine-tuning seeds of the one pretraining seed."""
    keys = list(vals)
    if keys and isinstance(keys[0], tuple):
        by: dict = {}
        for (p, _), v in vals.items():
            by.setdefault(p, []).append(v)
        if len(by) > 1:
            return t_summary([statistics.fmean(v) for v in by.values()])["ci95"], "over pretraining seeds"
        return t_summary(list(vals.values()))["ci95"], "over fine-tuning seeds (pretraining variance not measured)"
    return t_interval(list(vals.values())), "over seeds"


def metric_table(m: dict, results: dict[str, dict], metric: str) -> list[dict]:
    """One row per cell: per-seed values, mean, sample std, 95% t interval, and the paired delta vs the reference
    (paired by pretraining seed, and by fine-tuning seed too where the runs were fine-tuned with several)."""
    _, higher = METRICS[metric]
    ref_key = m["axes"][0]["key"]
    per_cell = _cell_scores(m, results, metric)
    refs = {_line_key(m, c): c["index"] for c in m["cells"] if repr(c["values"][ref_key]) == repr(m["reference"])}
    rows = []
    for c in m["cells"]:
        vals = per_cell[c["index"]]
        ms = mean_std(list(vals.values()))
        ci, how = _cell_interval(vals)
        if metric == "finetune":  # a score in points: a t interval past [0, 100] is clipped and says so
            ci, cut = clip_to_scale(ci)
            how += "; clipped to [0, 100] (too few seeds to bound it within the scale)" if cut else ""
        row = {
            "cell": c["index"],
            "label": c["label"],
            "values": c["values"],
            "tokens": c["tokens"],
            "per_seed": {"/".join(map(str, k)) if isinstance(k, tuple) else k: v for k, v in vals.items()},
            "n": ms["n"],
            "mean": ms["mean"],
            "std": ms["std"],
            "ci95": ci,
            "interval": how,
            "reference": False,
            "delta": None,
        }
        ref_idx = refs.get(_line_key(m, c))
        if ref_idx == c["index"]:
            row["reference"] = True
        elif ref_idx is not None:
            td = task_delta(vals, per_cell[ref_idx], "cell", "reference", seed_level="pretraining")
            v = {"cell better": "up", "reference better": "down"}.get(td["verdict"], "inconclusive")
            if v != "inconclusive":
                v = ("better" if (v == "up") == higher else "worse") if higher is not None else {"up": "higher",
                     "down": "lower"}[v]  # fmt: skip
            row["delta"] = {
                "vs": next(x["label"] for x in m["cells"] if x["index"] == ref_idx),
                "n": td["n"],
                "mean": td["delta"],
                "std": td["sd"],
                "ci95": td["ci95"],
                "interval": td["interval"],
                "p_value": td["p_value"],
                "unmeasured": td["unmeasured"],
                "verdict": v,
                "seeds_needed": seeds_needed(td["delta"], td["sd"], ALPHA, POWER) if v == "inconclusive" else None,
                "seed_levels": seed_levels({k: vals[k] - per_cell[ref_idx][k] for k in vals if k in per_cell[ref_idx]})[
                    "advice"
                ]
                if isinstance(next(iter(vals), None), tuple)
                else None,
            }
        rows.append(row)
    return rows


def _direction(ci) -> str:
    if ci is None or ci[0] <= 0 <= ci[1]:
        return "inconclusive"
    return "higher" if ci[0] > 0 else "lower"


def metrics_present(m: dict, results: dict[str, dict]) -> list[str]:
    return [k for k in METRICS if any(r.get(k) is not None for r in results.values())]


def primary_metric(m: dict, results: dict[str, dict]) -> str | None:
    """Fine-tuning when the sweep fine-tunes, else the held-out MLM loss."""
    present = metrics_present(m, results)
    for k in ("finetune", "heldout_mlm_loss", "cka_divergence"):
        if k in present:
            return k
    return None


def build_report(out: str | Path) -> dict:
    from backend.sweeps.manifest import sweep_status

    out = Path(out)
    st = sweep_status(out)
    results = read_results(out)
    tables = {k: metric_table(st, results, k) for k in metrics_present(st, results)}
    # a run measured and then copied without its folder (a study brought back from a GPU box) has its results
    # here: it finished, and the report reads it
    not_done = {r: s for r, s in st["run_states"].items() if s != "done" and r not in results}
    summary = _summary_as_run(out, st)
    rep_suite = suite_section(st, results)
    return {
        "suite": rep_suite,
        "name": st["name"],
        "out": str(out),
        "axes": st["axes"],
        "seeds": st["seeds"],
        "reference": st["reference"],
        "summary": summary,
        "matched": st["matched"],
        "evaluation": st["evaluation"],
        "primary": primary_metric(st, results),
        "metrics": {k: {"label": METRICS[k][0], "higher_is_better": METRICS[k][1]} for k in tables},
        "tables": tables,
        "not_done": not_done,
        "stats": (
            f"Means with a 95% Student t interval (scipy) over seeds; fine-tuned scores are in points (an interval "
            f"past [0, 100] is clipped, and says so) and keep both seed levels: a cell's interval is over its "
            f"pretraining seeds' means when it has two or more, else over its fine-tuning seeds (pretraining variance "
            f"then not measured). Deltas are cell - reference, paired by pretraining seed and fine-tuning seed; their "
            f"interval is the one rule the suite aggregate uses: a paired t interval, or with fine-tuning seeds under "
            f"two or more pretraining seeds a t interval over the pretraining-seed means (they are the independent "
            f"units; never a bootstrap, which is too narrow at a few seeds); a verdict is better/worse only when that "
            f"interval excludes 0, else inconclusive. The 'seeds needed' column: paired seeds for a two-sided paired t "
            f"test at alpha {ALPHA} to "
            f"detect the observed delta with power {POWER} if the seed-to-seed spread of the differences is the "
            f"observed one (shown for inconclusive deltas)."
        ),
    }


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def figure(rep: dict, metric: str):
    """Metric against the first axis, one line per value of the second, 95% CI as error bars."""
    import plotly.graph_objects as go

    rows = rep["tables"][metric]
    ax = rep["axes"]
    x_key = ax[0]["key"]
    numeric = all(_is_num(v) for v in ax[0]["values"])
    lines = ax[1]["values"] if len(ax) > 1 else [None]
    fig = go.Figure()
    for lv in lines:
        pts = [r for r in rows if lv is None or repr(r["values"][ax[1]["key"]]) == repr(lv)]
        pts = [r for r in pts if r["mean"] is not None]
        xs = [r["values"][x_key] if numeric else str(r["values"][x_key]) for r in pts]
        ys = [r["mean"] for r in pts]
        up = [(r["ci95"][1] - r["mean"]) if r["ci95"] else 0 for r in pts]
        lo = [(r["mean"] - r["ci95"][0]) if r["ci95"] else 0 for r in pts]
        name = f"{ax[1]['key'].rsplit('.', 1)[-1]}={lv}" if lv is not None else rep["name"]
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines+markers",
                name=name,
                error_y={"type": "data", "array": up, "arrayminus": lo, "visible": True},
            )
        )
    fig.update_layout(
        title=f"{rep['metrics'][metric]['label']} (mean, 95% CI over {len(rep['seeds'])} seeds)",
        xaxis_title=x_key,
        yaxis_title=rep["metrics"][metric]["label"],
        height=420,
        width=760,
        legend_title=ax[1]["key"] if len(ax) > 1 else None,
    )
    return fig


def write_figures(rep: dict, fig_dir: Path, png: bool = True) -> dict:
    """figures/<metric>.html (plotly, standalone, offline) and, where kaleido finds a Chromium, figures/<metric>.png."""
    fig_dir.mkdir(parents=True, exist_ok=True)
    figs = {k: figure(rep, k) for k in rep["tables"]}
    files = {"html": [], "png": [], "png_error": None}
    for k, f in figs.items():
        files["html"].append(str(write_html(f, fig_dir / f"{k}.html")))  # standalone: opens offline
    if png and figs:
        files["png"], files["png_error"] = export_pngs(figs, fig_dir)
    return files


def _verdict_text(d: dict | None) -> str:
    return "reference" if d is None else d["verdict"]


def suite_section(m: dict, results: dict[str, dict]) -> dict | None:
    """With ``--eval-suite``: cells x tasks (points, mean ± sd over pretraining x fine-tuning seeds), and each cell
    against the reference cell of its line over the suite (``evaluation.suite_report.panel``)."""
    from backend.evaluation.suite_report import panel

    if not any(r.get("suite_scores") for r in results.values()):
        return None
    tasks = list(dict.fromkeys(t for r in results.values() for t in (r.get("suite_scores") or {})))
    metrics = next(r["suite_metrics"] for r in results.values() if r.get("suite_metrics"))
    scores = {t: {} for t in tasks}
    for c in m["cells"]:
        for t in tasks:
            vals = {}
            for s, run in c["runs"].items():
                for f, v in ((results.get(run) or {}).get("suite_scores") or {}).get(t, {}).items():
                    vals[(int(s), int(f))] = 100.0 * v
            if vals:
                scores[t][c["label"]] = vals
    constant = _constant_cells(m, results, tasks)
    key = m["axes"][0]["key"]
    refs = {_line_key(m, c): c["label"] for c in m["cells"] if repr(c["values"][key]) == repr(m["reference"])}
    pairs = [(c["label"], refs[_line_key(m, c)]) for c in m["cells"]
             if _line_key(m, c) in refs and refs[_line_key(m, c)] != c["label"]]  # fmt: skip
    labels = [c["label"] for c in m["cells"]]
    return {"suite": m["evaluation"].get("suite"), "tasks": tasks, "metrics": metrics, "labels": labels,
            **panel(scores, labels, pairs, constant)}  # fmt: skip


def _constant_cells(m: dict, results: dict[str, dict], tasks: list[str]) -> dict[str, set[str]]:
    """task -> the cells every fine-tune of which (every pretraining x fine-tuning seed) gave one constant answer
    there, from the runs' ``suite_constant`` records."""
    out: dict[str, set[str]] = {}
    for c in m["cells"]:
        recs = [results.get(run) or {} for run in c["runs"].values()]
        for t in tasks:
            seen = [(set(r.get("suite_constant", {}).get(t, [])), set((r.get("suite_scores") or {}).get(t, {})))
                    for r in recs]  # fmt: skip
            if recs and all(scored and scored <= const for const, scored in seen):
                out.setdefault(t, set()).add(c["label"])
    return out


def suite_markdown(su: dict) -> list[str]:
    from backend.evaluation.report import METRIC_NAMES
    from backend.evaluation.suite_report import comparison_md, table_md

    metric = {t: METRIC_NAMES.get(su["metrics"].get(t), su["metrics"].get(t)) for t in su["tasks"]}
    lines = [f"## Suite `{su['suite']}` (test scores in points; mean ± sd over pretraining x fine-tuning seeds)", ""]
    lines += table_md(su, su["labels"], su["tasks"], metric)
    for c in su["comparisons"]:
        lines += comparison_md(c)
    return [*lines, ""]


def render_markdown(rep: dict) -> str:
    lines = [f"# Sweep {rep['name']}", "", rep["summary"], ""]
    axes = ", ".join(f"`{a['key']}` = {a['values']}" for a in rep["axes"])
    lines += [f"Axes: {axes}; seeds {rep['seeds']}; reference: `{rep['axes'][0]['key']}` = {rep['reference']}.", ""]
    if rep["not_done"]:
        lines += [f"Not finished (left out): {', '.join(f'{r} ({s})' for r, s in rep['not_done'].items())}.", ""]
    for k, rows in rep["tables"].items():
        meta = rep["metrics"][k]
        better = {True: "higher is better", False: "lower is better", None: "no better side"}
        better = better[meta["higher_is_better"]]
        lines += [f"## {meta['label']} ({better})", ""]
        lines += [
            "| cell | tokens | n | mean | 95% CI | delta vs ref | 95% CI | verdict | seeds needed |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            d = r["delta"]
            need = (d.get("seeds_needed") or "-") if d else "-"
            lines.append(
                f"| {r['label']} | {r['tokens']:,} | {r['n']} | {_fmt(r['mean'])} | {_fmt_ci(r['ci95'])} | "
                f"{_fmt(d['mean']) if d else '-'} | {_fmt_ci(d['ci95']) if d else '-'} | {_verdict_text(d)} | {need} |"
            )
        advice = sorted({d["seed_levels"] for r in rows if (d := r["delta"]) and d.get("seed_levels")})
        lines += ["", *(f"Seed levels: {a}." for a in advice)] if advice else []
        gaps = sorted({u for r in rows if (d := r["delta"]) for u in d.get("unmeasured") or []})
        lines += ["", *(f"Not measured at these counts: {u}." for u in gaps)] if gaps else []
        if any("clipped" in (r.get("interval") or "") for r in rows):
            lines += ["", "An interval clipped to [0, 100]: the seeds are too few to bound the score within the scale."]
        lines.append("")
    if rep.get("suite"):
        lines += suite_markdown(rep["suite"])
    lines += [rep["stats"], ""]
    return "\n".join(lines)


def write_report(out: str | Path, png: bool = True) -> dict:
    """report.json, report.md, report.html and the figures; returns the report dict."""
    out = Path(out)
    rep = build_report(out)
    rep["figures"] = write_figures(rep, out / "figures", png=png)
    suite_figs = {}
    if rep.get("suite"):  # per comparison the per-task deltas, as the suite report draws them
        from backend.evaluation.suite_report import delta_figure

        suite_figs = {f"suite-deltas-{i + 1}": delta_figure(c) for i, c in enumerate(rep["suite"]["comparisons"])}
        for k, f in suite_figs.items():
            rep["figures"]["html"].append(str(write_html(f, out / "figures" / f"{k}.html")))
        if png and suite_figs:
            files, err = export_pngs(suite_figs, out / "figures")
            rep["figures"]["png"] += files
            rep["figures"]["png_error"] = rep["figures"]["png_error"] or err
    md = render_markdown(rep)
    atomic.write_json(out / "report.json", rep)
    atomic.write_text(out / "report.md", md)
    figs = [figure(rep, k) for k in rep["tables"]] + list(suite_figs.values())
    atomic.write_text(out / "report.html", md_to_html(md, figs, f"Sweep {rep['name']}"))
    return rep


def _summary_as_run(out: Path, st: dict) -> str:
    """The plan's data-order and compute sentence, kept only where what ran is what was planned: each done run's
    recorded config (its config.yaml) against the hash it was queued with (the manifest's ``config_sha256``). A run
    that trained another config makes the compute line say so, naming it, instead of promising the plan."""
    from backend.engine.config import validate_config
    from backend.engine.resume_guard import fixed_config
    from backend.engine.rundir import read_config
    from backend.sweeps.manifest import read_manifest

    planned = read_manifest(out).get("config_sha256") or {}
    differs = []
    for run, state in st["run_states"].items():
        if state != "done" or run not in planned:
            continue
        try:
            sha = fixed_config(validate_config(read_config(out / "runs" / run)))[1]
        except DetourError:
            sha = None
        if sha != planned[run]:
            differs.append(run)
    if not differs:
        return st["summary"]
    head = st["summary"].split(" Compute:")[0]
    return (
        f"{head} Compute: NOT as planned: {', '.join(sorted(differs))} trained a config other than the one queued "
        "(its config.yaml changed); the cells' token counts cannot be taken as matched."
    )

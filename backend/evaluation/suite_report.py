"""The suite report as the papers print it: a models x tasks table (test metric in points, mean ± sd over seeds)
with the average column and the best of each column in bold; per model and task the 95% CI and the fine-tuning
stability; each model against the first (the reference) the paired delta per task with its CI and wins, and the
aggregate panel (mean delta, IQM, P(improvement), stratified bootstrap CIs: ``aggregate.py``) with a plain verdict;
a per-task delta figure. Written as suite.json, suite.md, suite.html and figures/deltas.html|png; every model
named with its identity (resolved path, weights sha256).
"""

from __future__ import annotations

import json
from pathlib import Path

from backend.core import atomic
from backend.evaluation.aggregate import compare, stability, t_summary
from backend.evaluation.identity import recorded_identity, short
from backend.evaluation.report import METRIC_NAMES
from backend.reporting.figure_style import TEMPLATE


def _task_results(out: Path, spec: dict) -> dict[str, dict]:
    found = {}
    for t in spec["tasks"]:
        p = out / "tasks" / t["name"] / "results.json"
        if p.exists():
            found[t["name"]] = json.loads(p.read_text(encoding="utf-8"))
    return found


def scores_by_task(results: dict[str, dict]) -> dict[str, dict[str, dict[int, float]]]:
    """task -> model label -> seed -> test score of the task's primary metric, in points."""
    out = {}
    for name, res in results.items():
        m = res["primary_metric"]
        out[name] = {
            e["label"]: {r["seed"]: 100 * r["test"][m] for r in e["runs"]
                         if r.get("status") == "ok" and (r.get("test") or {}).get(m) is not None}
            for e in res["models"]
        }  # fmt: skip
    return out


def _task_meta(name: str, res: dict) -> dict:
    keep = ("task", "data", "seeds", "data_sizes", "status")
    return {"name": name, "metric": res["primary_metric"], **{k: res.get(k) for k in keep}}


def panel(scores: dict, labels: list[str], pairs: list[tuple[str, str]]) -> dict:
    """The table and the comparisons from ``scores`` (task -> label -> key -> points): per label x task the mean,
    sd and t CI, the average over tasks and the best per column, and ``compare(a, b)`` for each (a, b) of ``pairs``.
    Shared by the suite report and a sweep's report (cells as labels, (pretraining, fine-tuning) seeds as keys)."""
    tasks = list(scores)
    cells = {}
    for n in tasks:
        for lab in labels:
            if lab in scores[n]:
                vals = scores[n][lab]
                cells[f"{lab}|{n}"] = {
                    **t_summary(list(vals.values())),
                    "per_seed": {str(k): v for k, v in vals.items()},
                }
    avg = {}
    for lab in labels:
        means = [cells.get(f"{lab}|{n}", {}).get("mean") for n in tasks]
        avg[lab] = sum(means) / len(means) if means and all(v is not None for v in means) else None
    best = {n: max((lab for lab in labels if cells.get(f"{lab}|{n}", {}).get("mean") is not None),
                   key=lambda lab, n=n: cells[f"{lab}|{n}"]["mean"], default=None) for n in tasks}  # fmt: skip
    have = [lab for lab in labels if avg[lab] is not None]
    best["average"] = max(have, key=lambda lab: avg[lab]) if have else None
    return {"cells": cells, "average": avg, "best": best, "comparisons": [compare(scores, a, b) for a, b in pairs]}


def build_suite_report(out: str | Path, spec: dict) -> dict:
    out = Path(out)
    results = _task_results(out, spec)
    tasks = [t["name"] for t in spec["tasks"] if t["name"] in results]
    labels = list(dict.fromkeys(e["label"] for n in tasks for e in results[n]["models"]))
    scores = scores_by_task(results)
    pan = panel(scores, labels, [(lab, labels[0]) for lab in labels[1:]])
    ident = {}
    for n in tasks:
        for e in results[n]["models"]:
            ident.setdefault(e["label"], recorded_identity(e))
            if f"{e['label']}|{n}" in pan["cells"]:
                pan["cells"][f"{e['label']}|{n}"]["stability"] = stability(e["runs"], results[n]["primary_metric"])
    cells, avg, best, comps = pan["cells"], pan["average"], pan["best"], pan["comparisons"]
    return {
        "suite": spec["name"],
        "suite_file": spec["path"],
        "out": str(out),
        "tasks": [_task_meta(n, results[n]) for n in tasks],
        "missing_tasks": [t["name"] for t in spec["tasks"] if t["name"] not in results],
        "models": [{"label": lab, "identity": ident.get(lab)} for lab in labels],
        "cells": cells,
        "average": avg,
        "best": best,
        "comparisons": comps,
        "units": "test metric in points (F1 and accuracy in percent)",
    }


def _f(v, d: int = 2) -> str:
    return "–" if v is None else f"{v:.{d}f}"


def _ci(ci) -> str:
    return "–" if not ci else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"


def _ci_plain(ci, d: int = 2) -> str:
    return "–" if not ci else f"[{ci[0]:.{d}f}, {ci[1]:.{d}f}]"


def render_markdown(rep: dict) -> str:
    tasks = [t["name"] for t in rep["tasks"]]
    metric = {t["name"]: METRIC_NAMES.get(t["metric"], t["metric"]) for t in rep["tasks"]}
    lines = [f"# Suite {rep['suite']}", "", f"Suite file `{rep['suite_file']}`; results in `{rep['out']}`.", ""]
    lines += [
        "Test scores in points (F1 in percent): mean ± sample sd over fine-tuning seeds; **bold** is the best of "
        "each column; Average is the mean over tasks.",
        "",
    ]
    lines += table_md(rep, [m["label"] for m in rep["models"]], tasks, metric)
    lines += ["", "## Per model and task: 95% CI over seeds and fine-tuning stability", ""]
    lines += ["| Model | Task | n | Mean | 95% CI (t) | sd | range | failed | diverged | constant answer |",
              "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for m in rep["models"]:
        for n in tasks:
            c = rep["cells"].get(f"{m['label']}|{n}")
            if not c:
                continue
            st = c.get("stability") or {}
            seeds = lambda xs: ", ".join(map(str, xs)) if xs else "0"  # noqa: E731
            lines.append(
                f"| {m['label']} | {n} | {c['n']} | {_f(c['mean'])} | {_ci_plain(c['ci95'])} | {_f(st['sd'])} | "
                f"{_ci_plain(st['range'], 1)} | {seeds(st['failed'])} | {seeds(st['diverged'])} | "
                f"{seeds(st['constant'])} |"
            )
    for c in rep["comparisons"]:
        lines += comparison_md(c)
    lines += ["", "## Models measured (resolved path, sha256 of the weights)", ""]
    lines += [f"- {m['label']}: {short(m['identity'])}" for m in rep["models"]]
    if rep["missing_tasks"]:
        lines += ["", f"Tasks without results yet: {', '.join(rep['missing_tasks'])}."]
    lines += [
        "",
        "Statistics: per-task deltas are paired by seed with a 95% paired t interval (scipy); the aggregate "
        "intervals are percentile stratified bootstrap intervals (seeds resampled within each task, the same draw "
        "for both models; nested when there are pretraining seeds) over 5000 resamples; IQM and P(A > B) as "
        "defined by Agarwal et al. 2021 (rliable). A verdict is 'better' only when the interval of the mean delta "
        "excludes 0.",
    ]
    return "\n".join(lines) + "\n"


def table_md(rep: dict, labels: list[str], tasks: list[str], metric: dict) -> list[str]:
    """Models x tasks, mean ± sd, the average column, the best of each column in bold."""
    head = ["Model", *(f"{n} ({metric[n]})" for n in tasks), "Average"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for lab in labels:
        row = [lab]
        for n in tasks:
            c = rep["cells"].get(f"{lab}|{n}", {})
            txt = _f(c.get("mean")) + (f" ± {_f(c['sd'])}" if c.get("sd") is not None else "")
            row.append(f"**{txt}**" if rep["best"].get(n) == lab else txt)
        a = _f(rep["average"].get(lab))
        row.append(f"**{a}**" if rep["best"].get("average") == lab else a)
        lines.append("| " + " | ".join(row) + " |")
    return lines


def comparison_md(c: dict) -> list[str]:
    a, b = c["a"], c["b"]
    lines = ["", f"## {a} vs {b} (Δ = {a} − {b}, points)", ""]
    lines += ["| Task | n | Δ mean | 95% CI | wins A / B / ties | verdict |", "|---|---|---|---|---|---|"]
    for n, d in c["per_task"].items():
        v = d["verdict"] + (f" (~{d['seeds_needed']} seeds to detect)" if d.get("seeds_needed") else "")
        lines.append(
            f"| {n} | {d['n']} | {d['delta']:+.2f} | {_ci(d['ci95'])} | {d['wins_a']} / {d['wins_b']} / "
            f"{d['ties']} | {v} |"
        )
    if "aggregate" not in c:
        return [*lines, "", f"Verdict: {c['verdict']}."]
    g = c["aggregate"]
    w = c["task_wins"]
    lines += [
        "",
        "Aggregate over tasks x seeds (95% stratified bootstrap CIs):",
        "",
        "| statistic | value | 95% CI |",
        "|---|---|---|",
        f"| mean Δ (points) | {g['mean_delta']['value']:+.2f} | {_ci(g['mean_delta']['ci95'])} |",
        f"| IQM {a} | {g['iqm_a']['value']:.2f} | {_ci_plain(g['iqm_a']['ci95'])} |",
        f"| IQM {b} | {g['iqm_b']['value']:.2f} | {_ci_plain(g['iqm_b']['ci95'])} |",
        f"| IQM Δ | {g['iqm_delta']['value']:+.2f} | {_ci(g['iqm_delta']['ci95'])} |",
        f"| P({a} > {b}) | {g['poi']['value']:.2f} | {_ci_plain(g['poi']['ci95'])} |",
        "",
        f"Tasks won: {a} {w['a']}, {b} {w['b']}, ties {w['ties']} of {len(c['tasks'])}.",
        "",
        f"**Verdict over the suite: {c['verdict']}.**"
        + (f" What would settle it: {c['settle']['text']}." if c.get("settle") else ""),
        "",
        f"Seed levels: {c['seed_levels']['advice']}.",
    ]
    return lines


def delta_figure(c: dict):
    """Per task the paired Δ with its 95% CI, and the suite's mean Δ with its bootstrap CI, as the papers draw it."""
    import plotly.graph_objects as go

    names = list(c["per_task"]) + (["mean over tasks"] if "aggregate" in c else [])
    ds = [c["per_task"][n] for n in c["per_task"]]
    ys = [d["delta"] for d in ds]
    cis = [d["ci95"] for d in ds]
    if "aggregate" in c:
        ys.append(c["aggregate"]["mean_delta"]["value"])
        cis.append(c["aggregate"]["mean_delta"]["ci95"])
    up = [(ci[1] - y) if ci else 0 for y, ci in zip(ys, cis, strict=True)]
    lo = [(y - ci[0]) if ci else 0 for y, ci in zip(ys, cis, strict=True)]
    colors = ["#1f77b4"] * len(ds) + (["#d62728"] if "aggregate" in c else [])
    fig = go.Figure(
        go.Scatter(
            x=ys,
            y=names,
            mode="markers",
            marker={"size": 11, "color": colors},
            error_x={"type": "data", "array": up, "arrayminus": lo, "visible": True},
        )
    )
    fig.add_vline(x=0, line_dash="dash", line_color="#888")
    fig.update_layout(
        title=f"{c['a']} − {c['b']}: Δ per task (95% CI) — {c['verdict']}",
        xaxis_title="Δ test score (points)",
        yaxis={"autorange": "reversed"},
        template=TEMPLATE,
        height=160 + 50 * len(names),
        width=760,
        showlegend=False,
    )
    return fig


def write_suite_report(out: str | Path, spec: dict, png: bool = True) -> dict:
    """suite.json, suite.md, suite.html and figures/deltas-<n>.html|png; returns the report dict."""
    from backend.reporting.figure_files import export_pngs
    from backend.reporting.html_page import md_to_html

    out = Path(out)
    rep = build_suite_report(out, spec)
    figs = {f"deltas-{i + 1}": delta_figure(c) for i, c in enumerate(rep["comparisons"])}
    fig_dir = out / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    rep["figures"] = {"html": [], "png": [], "png_error": None}
    for k, f in figs.items():
        p = fig_dir / f"{k}.html"
        f.write_html(str(p), include_plotlyjs=True)
        rep["figures"]["html"].append(str(p))
    if png and figs:
        rep["figures"]["png"], rep["figures"]["png_error"] = export_pngs(figs, fig_dir)
    md = render_markdown(rep)
    atomic.write_json(out / "suite.json", rep)
    atomic.write_text(out / "suite.md", md)
    atomic.write_text(out / "suite.html", md_to_html(md, list(figs.values()), f"Suite {rep['suite']}"))
    return rep

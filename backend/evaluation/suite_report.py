"""The suite report as the papers print it: a models x tasks table (test metric in points, mean ± sd over seeds)
with the average column and the best of each column in bold; per model and task the 95% CI and the fine-tuning
stability; each model against the first (the reference) the paired delta per task with its CI and wins, and the
aggregate panel (mean delta with the one rule's interval and verdict, ``delta_verdict.py``; IQM and P(improvement)
with stratified bootstrap CIs, descriptive: ``aggregate.py``), the tasks left out because they measure nothing, and
which seed level's variance the counts do not measure; a per-task delta figure; over three or more models the
leaderboard (suite scores, rank intervals, tie groups: ``ranking.py``) and its figure. Written as suite.json,
suite.md, suite.html and figures/deltas-N.html|png, leaderboard.html|png; every model named with its identity
(resolved path, weights sha256).
"""

from __future__ import annotations

from pathlib import Path

from backend.core import atomic
from backend.evaluation.aggregate import compare, stability, t_summary
from backend.evaluation.identity import recorded_identity, short
from backend.evaluation.leaderboard_report import MIN_MODELS, leaderboard_figure, leaderboard_md
from backend.evaluation.ranking import leaderboard
from backend.evaluation.report import METRIC_NAMES
from backend.reporting import figure_style  # noqa: F401  (the lab's template: plotly's default once imported)


def _task_results(out: Path, spec: dict) -> dict[str, dict]:
    """Each task's results, read by the one checking reader: a torn or foreign results.json is one line naming it."""
    from backend.evaluation.results_file import SCORES, read_results

    found = {}
    for t in spec["tasks"]:
        p = out / "tasks" / t["name"] / "results.json"
        if p.exists() or p.is_symlink():
            found[t["name"]] = read_results(p, SCORES)
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
    keep = ("task", "data", "data_fingerprint", "seeds", "data_sizes", "status")
    return {"name": name, "metric": res["primary_metric"], **{k: res.get(k) for k in keep}}


SCALE = (0.0, 100.0)  # every suite metric (F1, accuracy) is a share, in points


def clip_to_scale(ci: list[float] | None) -> tuple[list[float] | None, bool]:
    """A t interval of a score in points clipped to [0, 100] (with few seeds it can reach past the scale), and
    whether it was clipped: the report marks a clipped interval and says why."""
    if not ci:
        return ci, False
    lo, hi = max(ci[0], SCALE[0]), min(ci[1], SCALE[1])
    return [lo, hi], (lo, hi) != (ci[0], ci[1])


def on_scale(board: dict) -> dict:
    """A leaderboard whose suite-score intervals are clipped to [0, 100] and marked, as every score interval of the
    report is."""
    for m in board["models"]:
        m["ci95"], m["ci95_clipped"] = clip_to_scale(m["ci95"])
    return board


def seed_list(seeds: list[int] | None) -> str:
    """Seeds said as seeds and none as none: '0' read as 'none' in one column and 'seed 0' in the next."""
    if not seeds:
        return "none"
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(map(str, seeds))


def constant_models(results: dict[str, dict]) -> dict[str, set[str]]:
    """task -> the model labels every finished run of which gave one constant answer (the run records' flag)."""
    out: dict[str, set[str]] = {}
    for name, res in results.items():
        for e in res["models"]:
            ok = [r for r in e["runs"] if r.get("status") == "ok"]
            if ok and all((r.get("test") or {}).get("constant") is not None for r in ok):
                out.setdefault(name, set()).add(e["label"])
    return out


def panel(
    scores: dict, labels: list[str], pairs: list[tuple[str, str]], constant: dict[str, set[str]] | None = None
) -> dict:
    """The table and the comparisons from ``scores`` (task -> label -> key -> points): per label x task the mean,
    sd and t CI (clipped to [0, 100], marked), the average over tasks and the best per column, and
    ``compare(a, b)`` for each (a, b) of ``pairs`` (``constant``: task -> labels that gave one constant answer on
    every run). Shared by the suite report and a sweep's report (cells as labels, (pretraining, fine-tuning) seeds
    as keys)."""
    tasks = list(scores)
    cells = {}
    for n in tasks:
        for lab in labels:
            if lab in scores[n]:
                vals = scores[n][lab]
                summ = t_summary(list(vals.values()))
                summ["ci95"], summ["ci95_clipped"] = clip_to_scale(summ["ci95"])
                cells[f"{lab}|{n}"] = {**summ, "per_seed": {str(k): v for k, v in vals.items()}}
    avg = {}
    for lab in labels:
        means = [cells.get(f"{lab}|{n}", {}).get("mean") for n in tasks]
        avg[lab] = sum(means) / len(means) if means and all(v is not None for v in means) else None
    best = {n: max((lab for lab in labels if cells.get(f"{lab}|{n}", {}).get("mean") is not None),
                   key=lambda lab, n=n: cells[f"{lab}|{n}"]["mean"], default=None) for n in tasks}  # fmt: skip
    have = [lab for lab in labels if avg[lab] is not None]
    best["average"] = max(have, key=lambda lab: avg[lab]) if have else None
    comps = [compare(scores, a, b, constant=constant) for a, b in pairs]
    return {"cells": cells, "average": avg, "best": best, "comparisons": comps}


def build_suite_report(out: str | Path, spec: dict) -> dict:
    out = Path(out)
    results = _task_results(out, spec)
    tasks = [t["name"] for t in spec["tasks"] if t["name"] in results]
    labels = list(dict.fromkeys(e["label"] for n in tasks for e in results[n]["models"]))
    scores = scores_by_task(results)
    pan = panel(scores, labels, [(lab, labels[0]) for lab in labels[1:]], constant_models(results))
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
        "leaderboard": on_scale(leaderboard(scores, labels)) if len(labels) >= MIN_MODELS else None,
        "units": "test metric in points (F1 and accuracy in percent)",
    }


CLIP_MARK = "†"
CLIP_NOTE = (
    "† clipped to [0, 100]: with this few seeds the t interval reaches past the scale, so the seeds are too few to "
    "bound the score more tightly than the scale itself does."
)
STATS_NOTE = (
    "Statistics: per-task deltas are paired by seed with a 95% paired t interval (scipy); with two or more "
    "pretraining seeds, a t interval over the pretraining-seed means (they are the independent units). The "
    "suite's mean Δ and its verdict follow one rule: with one pretraining seed, each task's paired t statistic "
    "combined over tasks by Stouffer's z (exact at any seed count and any task's spread; the interval holds the "
    "shifts common to all tasks that this test does not reject); with several, Student's t over the "
    "pretraining-seed means of the suite. A verdict is 'better' only when that interval excludes 0. IQM and "
    "P(A > B) (Agarwal et al. 2021, rliable) have percentile stratified bootstrap intervals over 5000 resamples: "
    "descriptive only, as a bootstrap interval is too narrow at a few seeds (with n seeds that all favour one "
    "side every resample does too). A task where every run of both models gives one constant answer measures "
    "nothing and is left out of the aggregate."
)


def clipped(c: dict) -> bool:
    return bool(c.get("ci95_clipped"))


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
    if rep.get("leaderboard"):
        lines += leaderboard_md(rep["leaderboard"])
    lines += ["", "## Per model and task: 95% CI over seeds and fine-tuning stability", ""]
    lines += ["| Model | Task | n | Mean | 95% CI (t) | sd | range | seeds failed | seeds diverged | seeds with one "
              "constant answer |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for m in rep["models"]:
        for n in tasks:
            c = rep["cells"].get(f"{m['label']}|{n}")
            if not c:
                continue
            st = c.get("stability") or {}
            lines.append(
                f"| {m['label']} | {n} | {c['n']} | {_f(c['mean'])} | {_ci_plain(c['ci95'])}{CLIP_MARK * clipped(c)} | "
                f"{_f(st['sd'])} | "
                f"{_ci_plain(st['range'], 1)} | {seed_list(st['failed'])} | {seed_list(st['diverged'])} | "
                f"{seed_list(st['constant'])} |"
            )
    if any(clipped(c) for c in rep["cells"].values()):
        lines += ["", CLIP_NOTE]
    for c in rep["comparisons"]:
        lines += comparison_md(c)
    lines += ["", "## Models measured (resolved path, sha256 of the weights)", ""]
    lines += [f"- {m['label']}: {short(m['identity'])}" for m in rep["models"]]
    if rep["missing_tasks"]:
        lines += ["", f"Tasks without results yet: {', '.join(rep['missing_tasks'])}."]
    lines += [
        "",
        STATS_NOTE,
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
    excluded = c.get("excluded_tasks") or {}
    if excluded:
        lines += ["", "Left out of the aggregate (they measure nothing): "
                  + "; ".join(f"{t}: {why}" for t, why in excluded.items()) + "."]  # fmt: skip
    if "aggregate" not in c:
        return [*lines, "", f"Verdict: {c['verdict']}."]
    g = c["aggregate"]
    w = c["task_wins"]
    md = g["mean_delta"]
    lines += [
        "",
        f"Aggregate over {len(c['tasks'])} task(s) x seeds:",
        "",
        "| statistic | value | 95% CI |",
        "|---|---|---|",
        f"| mean Δ (points; the verdict: {md.get('method') or '–'}) | {md['value']:+.2f} | {_ci(md['ci95'])} |",
        f"| IQM {a} | {g['iqm_a']['value']:.2f} | {_ci_plain(g['iqm_a']['ci95'])} (bootstrap, descriptive) |",
        f"| IQM {b} | {g['iqm_b']['value']:.2f} | {_ci_plain(g['iqm_b']['ci95'])} (bootstrap, descriptive) |",
        f"| IQM Δ | {g['iqm_delta']['value']:+.2f} | {_ci(g['iqm_delta']['ci95'])} (bootstrap, descriptive) |",
        f"| P({a} > {b}) | {g['poi']['value']:.2f} | {_ci_plain(g['poi']['ci95'])} (bootstrap, descriptive) |",
        "",
    ]
    est = md.get("estimate")
    if est is not None and md["ci95"] and not md["ci95"][0] <= md["value"] <= md["ci95"][1]:
        lines += [
            f"The interval is centred on the shift all tasks agree on ({est:+.2f}); the plain mean lies outside it: "
            "the tasks disagree, a precise task pulls the interval.",
            "",
        ]
    lines += [
        f"Tasks won: {a} {w['a']}, {b} {w['b']}, ties {w['ties']} of {len(c['tasks'])}.",
        "",
        f"**Verdict over the suite: {c['verdict']}.**"
        + (f" What would settle it: {c['settle']['text']}." if c.get("settle") else ""),
    ]
    lv = c["seed_levels"]
    if not (lv["pretraining_seeds"] >= 2 and lv.get("var_finetuning") is None):  # else the rule's note says it
        lines += ["", f"Seed levels: {lv['advice']}."]
    rule = c.get("rule") or {}
    for u in [*rule.get("unmeasured", []), *rule.get("notes", [])]:
        lines += ["", f"Not measured / noted: {u}."]
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
        height=160 + 50 * len(names),
        width=760,
        showlegend=False,
    )
    return fig


def write_suite_report(out: str | Path, spec: dict, png: bool = True) -> dict:
    """suite.json, suite.md, suite.html and figures/deltas-<n>.html|png; returns the report dict."""
    from backend.reporting.figure_files import export_pngs, write_html
    from backend.reporting.html_page import md_to_html

    out = Path(out)
    rep = build_suite_report(out, spec)
    figs = {f"deltas-{i + 1}": delta_figure(c) for i, c in enumerate(rep["comparisons"])}
    if rep.get("leaderboard"):
        figs = {"leaderboard": leaderboard_figure(rep["leaderboard"]), **figs}
    fig_dir = out / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    rep["figures"] = {"html": [], "png": [], "png_error": None}
    for k, f in figs.items():
        p = fig_dir / f"{k}.html"
        rep["figures"]["html"].append(str(write_html(f, p)))
    if png and figs:
        rep["figures"]["png"], rep["figures"]["png_error"] = export_pngs(figs, fig_dir)
    md = render_markdown(rep)
    atomic.write_json(out / "suite.json", rep)
    atomic.write_text(out / "suite.md", md)
    atomic.write_text(out / "suite.html", md_to_html(md, list(figs.values()), f"Suite {rep['suite']}"))
    return rep

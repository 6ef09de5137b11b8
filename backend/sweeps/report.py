"""The sweep report: per cell the metric as mean with a 95% t interval over seeds, drawn as the seed paper draws it
(metric against the first axis, one line per value of the second), and each cell's paired delta against the
reference cell of its line (paired by seed) with a 95% paired t interval, a plain verdict, and, where the verdict is
inconclusive, how many seeds a two-sided paired t test (alpha 0.05, power 0.8) needs to detect the observed delta
at the observed spread. Written as report.json, report.md, report.html and figures/<metric>.html|png.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from backend.analysis.figure_files import export_pngs
from backend.core import atomic
from backend.evaluation.stats import mean_std, paired_comparison, seeds_needed, t_interval, verdict
from backend.sweeps.measure import METRICS, _line_key, read_results

ALPHA, POWER = 0.05, 0.8


def _fmt(v, digits: int = 4) -> str:
    return "-" if v is None else f"{v:.{digits}g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.2e}"


def _fmt_ci(ci) -> str:
    return "-" if not ci else f"[{_fmt(ci[0])}, {_fmt(ci[1])}]"


def metric_table(m: dict, results: dict[str, dict], metric: str) -> list[dict]:
    """One row per cell: per-seed values, mean, sample std, 95% t interval, and the paired delta vs the reference."""
    _, higher = METRICS[metric]
    ref_key = m["axes"][0]["key"]
    per_cell = {}
    for c in m["cells"]:
        per_cell[c["index"]] = {
            int(s): results[r][metric]
            for s, r in c["runs"].items()
            if r in results and results[r].get(metric) is not None
        }
    refs = {_line_key(m, c): c["index"] for c in m["cells"] if repr(c["values"][ref_key]) == repr(m["reference"])}
    rows = []
    for c in m["cells"]:
        vals = per_cell[c["index"]]
        ms = mean_std(list(vals.values()))
        row = {
            "cell": c["index"],
            "label": c["label"],
            "values": c["values"],
            "tokens": c["tokens"],
            "per_seed": vals,
            "n": ms["n"],
            "mean": ms["mean"],
            "std": ms["std"],
            "ci95": t_interval(list(vals.values())),
            "reference": False,
            "delta": None,
        }
        ref_idx = refs.get(_line_key(m, c))
        if ref_idx == c["index"]:
            row["reference"] = True
        elif ref_idx is not None:
            pc = paired_comparison(per_cell[ref_idx], vals)
            v = verdict(pc["ci95_t"], higher) if higher is not None else _direction(pc["ci95_t"])
            row["delta"] = {
                "vs": next(x["label"] for x in m["cells"] if x["index"] == ref_idx),
                "n": pc["n"],
                "mean": pc["mean_diff"],
                "std": pc["std_diff"],
                "ci95": pc["ci95_t"],
                "verdict": v,
                "seeds_needed": seeds_needed(pc["mean_diff"], pc["std_diff"], ALPHA, POWER)
                if v == "inconclusive"
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
    not_done = {r: s for r, s in st["run_states"].items() if s != "done"}
    return {
        "name": st["name"],
        "out": str(out),
        "axes": st["axes"],
        "seeds": st["seeds"],
        "reference": st["reference"],
        "summary": st["summary"],
        "matched": st["matched"],
        "evaluation": st["evaluation"],
        "primary": primary_metric(st, results),
        "metrics": {k: {"label": METRICS[k][0], "higher_is_better": METRICS[k][1]} for k in tables},
        "tables": tables,
        "not_done": not_done,
        "stats": (
            f"Means with a 95% Student t interval over seeds; deltas are cell - reference, paired by seed, with a 95% "
            f"paired t interval; a verdict is better/worse only when that interval excludes 0, else inconclusive. "
            f"'seeds needed': paired seeds for a two-sided paired t test at alpha {ALPHA} to detect the observed "
            f"delta with power {POWER} if the seed-to-seed spread of the differences is the observed one."
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
        template="plotly_white",
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
        p = fig_dir / f"{k}.html"
        f.write_html(str(p), include_plotlyjs=True)  # standalone: opens offline
        files["html"].append(str(p))
    if png and figs:
        files["png"], files["png_error"] = export_pngs(figs, fig_dir)
    return files


def _verdict_text(d: dict | None) -> str:
    if d is None:
        return "reference"
    v = d["verdict"]
    if v == "inconclusive" and d["seeds_needed"]:
        return f"inconclusive (~{d['seeds_needed']} seeds to detect)"
    return v


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
            "| cell | tokens | n | mean | 95% CI | delta vs ref | 95% CI | verdict |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            d = r["delta"]
            lines.append(
                f"| {r['label']} | {r['tokens']:,} | {r['n']} | {_fmt(r['mean'])} | {_fmt_ci(r['ci95'])} | "
                f"{_fmt(d['mean']) if d else '-'} | {_fmt_ci(d['ci95']) if d else '-'} | {_verdict_text(d)} |"
            )
        lines.append("")
    lines += [rep["stats"], ""]
    return "\n".join(lines)


def md_to_html(md: str, figs: list, title: str) -> str:
    """A page from this module's markdown (headings, paragraphs, pipe tables) with plotly figures below it."""
    import plotly.io as pio

    body = []
    for block in md.split("\n\n"):
        rows = [ln for ln in block.splitlines() if ln.startswith("|")]
        if rows and len(rows) == len(block.splitlines()):
            cells = [[_bold(html.escape(c.strip())) for c in ln.strip("|").split("|")] for ln in rows]
            head = "".join(f"<th>{c}</th>" for c in cells[0])
            trs = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in cells[2:])
            body.append(f"<table><tr>{head}</tr>{trs}</table>")
        elif block.startswith("# "):
            body.append(f"<h1>{html.escape(block[2:])}</h1>")
        elif block.startswith("## "):
            body.append(f"<h2>{html.escape(block[3:])}</h2>")
        elif block.strip():
            body.append(f"<p>{_bold(html.escape(block))}</p>")
    for i, fig in enumerate(figs):  # plotly.js inlined once: the page opens offline, from disk, anywhere
        body.append(pio.to_html(fig, full_html=False, include_plotlyjs=i == 0))
    style = "body{font-family:sans-serif;max-width:1000px;margin:auto}td,th{border:1px solid #ccc;padding:3px 6px}"
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head>"
        f"<body>{''.join(body)}</body></html>"
    )


def _bold(text: str) -> str:
    """Markdown's **x** as <b>x</b> (the best of a column, a verdict)."""
    return re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)


def write_report(out: str | Path, png: bool = True) -> dict:
    """report.json, report.md, report.html and the figures; returns the report dict."""
    out = Path(out)
    rep = build_report(out)
    rep["figures"] = write_figures(rep, out / "figures", png=png)
    md = render_markdown(rep)
    atomic.write_json(out / "report.json", rep)
    atomic.write_text(out / "report.md", md)
    figs = [figure(rep, k) for k in rep["tables"]]
    atomic.write_text(out / "report.html", md_to_html(md, figs, f"Sweep {rep['name']}"))
    return rep

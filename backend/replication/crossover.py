"""Where a finding changes sign over token budgets: the statement and the chart of a budget study.

A budget study measures the same comparison (the detour minus MLM, a hybrid split minus pure MLM) over the suite
at several token budgets. The statement is built from the intervals only: the sign changes between two budgets when
the interval at the earlier one excludes 0 on one side and the interval at the later one excludes 0 on the other.
It names the last budget of the old direction and the first of the new one (the change lies somewhere between, and
the chart's line between them is not a measurement); a point estimate that flips while its interval straddles 0 is
no change, and "not within the budgets tried" is said whenever no interval excludes 0 in the other direction.
"""

from __future__ import annotations

from pathlib import Path

from backend.reporting import figure_style  # noqa: F401  (the lab's template: plotly's default once imported)

WORDS = {1: "better", -1: "worse", 0: "inconclusive"}


def direction(ci) -> int:
    """+1 when the interval lies above 0, -1 below, 0 when it holds 0 (or is missing)."""
    if not ci or ci[0] is None or ci[1] is None or ci[0] <= 0 <= ci[1]:
        return 0
    return 1 if ci[0] > 0 else -1


def tokens_text(n: float) -> str:
    """1e6 -> '1M', 20480 -> '20.5k': the budgets as a reader says them."""
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:g}"


def crossover(points: list[dict], what: str = "the detour") -> dict:
    """The sign-change statement from ``points`` ``[{tokens, value, ci95}]`` (any order): ``{directions, change,
    between, from, to, text}``. ``between`` is ``[last budget of the old direction, first budget of the new]`` or
    None; ``from``/``to`` are 'better'/'worse'."""
    pts = sorted((p for p in points if p.get("tokens") is not None), key=lambda p: p["tokens"])
    dirs = [direction(p.get("ci95")) for p in pts]
    out = {"budgets": [p["tokens"] for p in pts], "directions": [WORDS[d] for d in dirs], "change": False,
           "between": None, "from": None, "to": None}  # fmt: skip
    if not pts:
        return {**out, "text": "no budget was measured"}
    last_idx, last_dir = None, 0
    for i, d in enumerate(dirs):
        if d == 0:
            continue
        if last_dir and d != last_dir:
            lo, hi = pts[last_idx]["tokens"], pts[i]["tokens"]
            out.update(change=True, between=[lo, hi], **{"from": WORDS[last_dir], "to": WORDS[d]})
            out["text"] = (
                f"The sign changes between {tokens_text(lo)} and {tokens_text(hi)} tokens: {what} is {WORDS[last_dir]} "
                f"(95% interval excludes 0) at {tokens_text(lo)} and {WORDS[d]} at {tokens_text(hi)}; where in between "
                "is not measured."
            )
            return out
        last_idx, last_dir = i, d
    settled = [f"{WORDS[d]} at {tokens_text(p['tokens'])}" for p, d in zip(pts, dirs, strict=True) if d]
    if settled:
        detail = f"{what} is " + ", ".join(settled) + "; every other budget's interval holds 0"
        if all(d != 0 for d in dirs):
            detail = f"{what} is {WORDS[last_dir]} at every budget"
    else:
        detail = "no budget's 95% interval excludes 0"
    span = f"{tokens_text(pts[0]['tokens'])}-{tokens_text(pts[-1]['tokens'])}"
    out["text"] = f"No sign change: not within the budgets tried ({span} tokens); {detail}."
    return out


def figure(panels: dict, losses: dict, title: str):
    """Rows against tokens (log x): the mean and IQM delta with their 95% intervals (one line per comparison),
    P(improvement) with its interval, and the held-out MLM and CLM losses of every arm (mean, 95% interval).

    ``panels``: comparison name -> ``[{tokens, mean_delta: {value, ci95}, iqm_delta: ..., poi: ...}]``;
    ``losses``: ``{"heldout_mlm_loss": {arm: [{tokens, mean, ci95}]}, "heldout_clm_loss": {...}}``."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative
    from plotly.subplots import make_subplots

    titles = ("suite mean delta (points)", "suite IQM delta (points)", "P(improvement)",
              "held-out MLM loss", "held-out CLM loss")  # fmt: skip
    fig = make_subplots(rows=5, cols=1, shared_xaxes=True, subplot_titles=titles, vertical_spacing=0.045)
    colors = qualitative.Plotly

    def line(row: int, xs, ys, cis, name: str, color: str, group: str, show: bool, dash: str | None = None) -> None:
        up = [(c[1] - y) if c and y is not None else 0 for y, c in zip(ys, cis, strict=True)]
        lo = [(y - c[0]) if c and y is not None else 0 for y, c in zip(ys, cis, strict=True)]
        fig.add_trace(
            go.Scatter(x=xs, y=ys, mode="lines+markers", name=name, legendgroup=group, showlegend=show,
                       line={"color": color, "dash": dash},
                       error_y={"type": "data", "array": up, "arrayminus": lo, "visible": True}),
            row=row, col=1,
        )  # fmt: skip

    for i, (name, pts) in enumerate(panels.items()):
        pts = sorted(pts, key=lambda p: p["tokens"])
        xs = [p["tokens"] for p in pts]
        color = colors[i % len(colors)]
        for row, key in ((1, "mean_delta"), (2, "iqm_delta"), (3, "poi")):
            ys = [(p.get(key) or {}).get("value") for p in pts]
            cis = [(p.get(key) or {}).get("ci95") for p in pts]
            line(row, xs, ys, cis, name, color, name, row == 1)
    for row, y0 in ((1, 0.0), (2, 0.0), (3, 0.5)):
        fig.add_hline(y=y0, line={"color": "grey", "dash": "dot", "width": 1}, row=row, col=1)
    arms = list(dict.fromkeys(a for by in losses.values() for a in by))
    for row, key in ((4, "heldout_mlm_loss"), (5, "heldout_clm_loss")):
        for j, arm in enumerate(arms):
            pts = sorted((losses.get(key) or {}).get(arm, []), key=lambda p: p["tokens"])
            if pts:
                line(row, [p["tokens"] for p in pts], [p["mean"] for p in pts], [p["ci95"] for p in pts], arm,
                     colors[(len(panels) + j) % len(colors)], f"arm-{arm}", row == 4, "dash")  # fmt: skip
    fig.update_xaxes(type="log")
    fig.update_xaxes(title_text="training tokens per run (main phase, log scale)", row=5, col=1)
    fig.update_layout(title=title, height=1300, legend={"orientation": "h",
                      "y": -0.06})  # fmt: skip
    return fig


def write_figure(fig, out_dir: Path, stem: str, png: bool = True) -> dict:
    """``<stem>.html`` (standalone, offline), ``<stem>.json`` (the app's Reports tab draws it) and ``<stem>.png``
    where kaleido finds a Chromium."""
    from backend.core import atomic
    from backend.reporting.figure_files import export_pngs, write_html

    out_dir.mkdir(parents=True, exist_ok=True)
    html = write_html(fig, out_dir / f"{stem}.html")
    atomic.write_text(out_dir / f"{stem}.json", fig.to_json())
    files, err = export_pngs({stem: fig}, out_dir) if png else ([], None)
    return {"html": str(html), "png": files, "png_error": err}

"""The report's plotly figures, built from the report dict: divergence profile against seed noise, CKA heatmaps,
weight change per layer, NER F1 per model and seed with the paired-comparison table, loss curves (their PNG export
is ``backend.reporting.figure_files``, shared with the sweep report). ``figures/*.json`` from here is what the app's
Reports tab shows.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from backend.analysis.measures import SHORT
from backend.analysis.plots import PALETTE, eval_loss_figure, similarity_caption, train_loss_figure
from backend.replication.plan import LABELS, RUNS
from backend.replication.verdicts import fmt_ci, fmt_pp, significance, task_name
from backend.reporting import figure_style  # noqa: F401  (the lab's template: plotly's default once imported)

COLORS = {
    "base": "#7f7f7f",
    "mlm": PALETTE[0],
    "detour": PALETTE[1],
    "mlm_s2": PALETTE[2],
    "freeze_low": PALETTE[3],
    "freeze_mid": PALETTE[4],
}


def _layout(fig: go.Figure, title: str, height: int = 380) -> go.Figure:
    fig.update_layout(
        title={"text": title, "x": 0.01},
        height=height,
        margin={"l": 60, "r": 30, "t": 50, "b": 50},
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def _shade_thirds(fig: go.Figure, layers: list[str], low: list[int], mid: list[int], row=None, col=None) -> None:
    for idx, name, color in (
        (low, "lower third", "rgba(239,85,59,0.10)"),
        (mid, "middle third", "rgba(99,110,250,0.10)"),
    ):
        if idx:
            fig.add_vrect(
                x0=idx[0] - 0.5,
                x1=idx[-1] + 0.5,
                fillcolor=color,
                line_width=0,
                layer="below",
                annotation_text=name,
                annotation_position="top left",
                row=row,
                col=col,
            )


def divergence_profile_figure(cka: dict) -> go.Figure:
    layers = cka["layers"]
    x = list(range(len(layers)))
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.6, 0.4])
    series = [
        ("CLM detour vs MLM", cka.get("divergence"), COLORS["detour"], "solid"),
        (
            "low-frozen detour vs MLM",
            (cka.get("freeze_low_vs_mlm") or {}).get("divergence"),
            COLORS["freeze_low"],
            "dash",
        ),
        (
            "mid-frozen detour vs MLM",
            (cka.get("freeze_mid_vs_mlm") or {}).get("divergence"),
            COLORS["freeze_mid"],
            "dash",
        ),
        ("detour vs MLM before decay", (cka.get("end_main_detour_vs_mlm") or {}).get("divergence"), "#bbbbbb", "dot"),
        ("seed-noise control (MLM 2nd seed vs MLM)", cka.get("control_divergence"), COLORS["mlm_s2"], "solid"),
    ]
    for name, y, color, dash in series:
        if y:
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    name=name,
                    mode="lines+markers",
                    line={"color": color, "dash": dash},
                    customdata=layers,
                    hovertemplate="%{customdata}: %{y:.5f}<extra>" + name + "</extra>",
                ),
                row=1,
                col=1,
            )
    ratios = [
        ("detour", cka.get("ratio"), COLORS["detour"]),
        ("low-frozen", (cka.get("freeze_low_vs_mlm") or {}).get("ratio"), COLORS["freeze_low"]),
        ("mid-frozen", (cka.get("freeze_mid_vs_mlm") or {}).get("ratio"), COLORS["freeze_mid"]),
    ]
    for name, y, color in ratios:
        if y:
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    name=f"ratio: {name}",
                    mode="lines+markers",
                    line={"color": color},
                    showlegend=False,
                    hovertemplate="%{y:.1f}x<extra>" + name + "</extra>",
                ),
                row=2,
                col=1,
            )
    fig.add_hline(y=1, line={"color": "#888", "dash": "dot"}, row=2, col=1)
    fig.add_hline(
        y=5,
        line={"color": "#d62728", "dash": "dot", "width": 1},
        row=2,
        col=1,
        annotation_text="paper's lowest low-layer ratio (5x)",
        annotation_position="top right",
    )
    _shade_thirds(fig, layers, cka["low_indices"], cka["mid_indices"], row=1, col=1)
    fig.update_xaxes(tickvals=x, ticktext=layers, row=2, col=1)
    fig.update_yaxes(title_text=f"1 − {_measure_name(cka)} (same layer)", row=1, col=1)
    rvals = [v for _, y, _ in ratios if y for v in y if v is not None and v > 0]
    lo, hi = min([*rvals, 0.5]), max([*rvals, 10.0])
    ticks = [t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if lo / 1.5 <= t <= hi * 1.5]
    fig.update_yaxes(
        title_text="ratio to seed noise",
        type="log",
        row=2,
        col=1,
        range=[math.log10(lo) - 0.15, math.log10(hi) + 0.15],
        tickvals=ticks,
        ticktext=[f"{t:g}x" for t in ticks],
    )
    return _layout(fig, "Divergence per layer from MLM, against seed noise", 560)


def _measure_name(cka: dict) -> str:
    return SHORT.get(cka.get("measure", "linear"), "CKA").split(" (")[0]


def heatmaps_figure(cka: dict) -> go.Figure:
    """Detour vs MLM and the control, layer x layer, titled with the measure, n, hidden sizes and the shuffled-texts
    baseline (what unrelated paragraphs score at this n)."""
    layers = cka["layers"]
    name = _measure_name(cka)
    panels = [("CLM detour (rows) vs MLM (columns)", cka.get("matrix"))]
    if cka.get("control_matrix"):
        panels.append(("control: MLM 2nd seed (rows) vs MLM (columns)", cka["control_matrix"]))
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[p[0] for p in panels], horizontal_spacing=0.12)
    for j, (_, m) in enumerate(panels, 1):
        fig.add_trace(
            go.Heatmap(
                z=m,
                x=layers,
                y=layers,
                coloraxis="coloraxis",
                hovertemplate="row %{y} · col %{x}<br>" + name + " %{z:.4f}<extra></extra>",
            ),
            row=1,
            col=j,
        )
        fig.update_yaxes(autorange="reversed", row=1, col=j)
    lo = min((v for _, m in panels for row in m for v in row if v is not None), default=0.0)
    cmin = max(0.0, math.floor(lo * 20) / 20)  # the contrast where the values are, from a 0.05 step
    fig.update_layout(coloraxis={"colorscale": "Viridis", "cmin": cmin, "cmax": 1, "colorbar": {"title": name}})
    measure = cka.get("measure", "linear")
    samples = cka.get("samples") or {"unit": "texts", "n": cka.get("n_texts")}
    caption = similarity_caption(measure, samples, cka.get("hidden_sizes"), cka.get("baseline"))
    fig = _layout(fig, f"Layer × layer {name}<br><sup>{caption}</sup>", 480)
    fig.update_layout(margin={"t": 90})
    return fig


def weight_change_figure(w: dict) -> go.Figure:
    fig = go.Figure()
    for key in RUNS:
        if key in w["from_base"]:
            fig.add_trace(go.Bar(x=w["layers"], y=w["from_base"][key], name=LABELS[key], marker_color=COLORS[key]))
    fig.update_layout(barmode="group", yaxis_title="‖W − W_base‖ / ‖W_base‖", xaxis_title="layer")
    return _layout(fig, "Relative weight change per layer from the base model")


def f1_figure(ner: dict) -> go.Figure:
    """Mean ± std per model (big marker, error bar) and each fine-tuning seed (small dots)."""
    fig = go.Figure()
    models = [m for m in ner["models"] if m["mean"] is not None]
    for m in models:
        color = COLORS.get(m["key"], "#999")
        fig.add_trace(
            go.Scatter(
                x=[m["label"]],
                y=[100 * m["mean"]],
                error_y={"type": "data", "array": [100 * (m["std"] or 0)], "color": color, "thickness": 2},
                mode="markers+text",
                marker={"color": color, "size": 14, "symbol": "diamond"},
                text=[f"{100 * m['mean']:.2f}"],
                textposition="middle right",
                name=m["label"],
                hovertemplate=f"{m['label']}<br>mean %{{y:.2f}}<extra></extra>",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=[m["label"]] * len(m["values"]),
                y=[100 * v for v in m["values"]],
                mode="markers",
                marker={"color": color, "size": 7, "opacity": 0.55, "line": {"width": 1, "color": "#333"}},
                showlegend=False,
                customdata=m["seeds"],
                hovertemplate="seed %{customdata}: %{y:.2f}<extra></extra>",
            )
        )
    fig.update_yaxes(title_text="test F1 (%)")
    fig.update_layout(showlegend=False)
    n = len(ner.get("seeds") or [])
    return _layout(fig, f"{task_name(ner)} NER test F1: mean ± std (diamond) and each of {n} fine-tuning seeds")


def f1_table_figure(ner: dict) -> go.Figure:
    comps = ner["comparisons"]
    cols = ["comparison (Δ = first − second)", "Δ F1 (pp)", "95% CI (paired t)", "95% CI (bootstrap)", "wins", "n"]
    cells = [
        [c["label"] for c in comps],
        [fmt_pp(c["mean_diff"]) for c in comps],
        [fmt_ci(c["ci95_t"]) for c in comps],
        [fmt_ci(c["ci95_bootstrap"]) for c in comps],
        [f"{c['wins_b']}-{c['wins_a']}" + (f" ({c['ties']} ties)" if c["ties"] else "") for c in comps],
        [c["n"] for c in comps],
    ]
    fills = []
    for c in comps:
        s = significance(c)
        fills.append("#d9f2d9" if s == "up" else "#f8d7d7" if s == "down" else "#ffffff")
    fig = go.Figure(
        go.Table(
            header={"values": cols, "fill_color": "#e8e8f0", "align": "left", "font": {"size": 12}},
            cells={"values": cells, "align": "left", "fill_color": [fills] * len(cols), "font": {"size": 12}},
            columnwidth=[3.2, 1, 1.6, 1.6, 1, 0.5],
        )
    )
    fig.update_layout(margin={"l": 10, "r": 10, "t": 45, "b": 10}, height=80 + 28 * max(len(comps), 1))
    fig.update_layout(title={"text": "Paired comparisons on test F1 (green: CI above 0, red: below 0)", "x": 0.01})
    return fig


def build_figures(rep: dict) -> dict[str, go.Figure]:
    figs: dict[str, go.Figure] = {}
    runs = {LABELS[k]: v.get("metrics", []) for k, v in rep["runs"].items() if v.get("metrics")}
    if runs:
        figs["loss_curves"] = eval_loss_figure(runs)
        figs["loss_curves"].update_layout(
            title={
                "text": "Held-out MLM loss (15% masking, fixed masks): comparable "
                "across recipes; dashed lines: phase switches"
            }
        )
        figs["train_loss"] = train_loss_figure(runs)
    if rep.get("cka"):
        figs["divergence"] = divergence_profile_figure(rep["cka"])
        if rep["cka"].get("matrix"):
            figs["cka_heatmaps"] = heatmaps_figure(rep["cka"])
    if rep.get("weights"):
        figs["weight_change"] = weight_change_figure(rep["weights"])
    if rep.get("ner") and rep["ner"]["models"]:
        figs["f1"] = f1_figure(rep["ner"])
        if rep["ner"]["comparisons"]:
            figs["f1_table"] = f1_table_figure(rep["ner"])
    return figs


FIGURE_TITLES = {
    "loss_curves": "Loss curves (held-out MLM loss)",
    "train_loss": "Training loss",
    "divergence": "Divergence profile with the seed-noise control",
    "cka_heatmaps": "CKA heatmaps",
    "weight_change": "Weight change per layer",
    "f1": "NER F1 per model",
    "f1_table": "Paired comparisons (table)",
}

"""Pictures of the objectives (pure functions, no gradio): the attention patterns as heatmaps, the per-token
surprise as coloured tokens (HTML, every text escaped), and a run's checkpoints on its held-out curves."""

from __future__ import annotations

import html

import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from backend import objectives
from backend.analysis.plots import fit_y_range, phase_boundaries
from backend.reporting import figure_style  # noqa: F401  (the lab's template: plotly's default once imported)

ALLOWED, MASKED = "#2563eb", "#f1f5f9"
SURPRISE_SCALE = "YlOrRd"


def layers_text(layers: list[int]) -> str:
    """'layer 3' or 'layers 0, 3'."""
    return ("layer " if len(layers) == 1 else "layers ") + ", ".join(map(str, layers))


def pattern_title(kind: dict, objective: dict) -> str:
    """e.g. '<b>CLM detour</b><br>local · layers 1, 2, 4, 5<br>causal, window 64'; ``objective`` is one of the
    result's ``objectives`` (what the objective declares; its note on the drawn row goes in the message)."""
    rule = objective["attention"] + (f", window {kind['window']}" if kind.get("window") else "")
    return f"<b>{objective['title']}</b><br>{kind['name']} · {layers_text(kind['layers'])}<br>{rule}"


def masks_figure(result: dict) -> go.Figure:
    """One row per layer kind, one column per objective: blue = the query (row) may attend to the key (column)."""
    kinds, objs = result["kinds"], result["objectives"]
    titles = [pattern_title(k, o) for k in kinds for o in objs]
    fig = make_subplots(rows=len(kinds), cols=len(objs), subplot_titles=titles, horizontal_spacing=0.04,
                        vertical_spacing=0.14 if len(kinds) > 1 else 0.1)  # fmt: skip
    for r, kind in enumerate(kinds, start=1):
        for c, objective in enumerate((o["name"] for o in objs), start=1):
            fig.add_trace(
                go.Heatmap(
                    z=kind[objective],
                    colorscale=[[0, MASKED], [1, ALLOWED]],
                    zmin=0,
                    zmax=1,
                    showscale=False,
                    hovertemplate="query %{y} → key %{x}: %{z}<extra>1 = may attend</extra>",
                ),
                row=r,
                col=c,
            )
            fig.update_xaxes(title_text="key position", row=r, col=c, constrain="domain")
            x_axis = "x" if (r, c) == (1, 1) else f"x{len(objs) * (r - 1) + c}"  # square cells
            fig.update_yaxes(title_text="query position" if c == 1 else None, autorange="reversed",
                             scaleanchor=x_axis, constrain="domain", row=r, col=c)  # fmt: skip
    fig.update_annotations(font_size=11)
    fig.update_layout(height=(150 + 1600 // max(len(objs), 1)) * len(kinds),
                      margin={"l": 55, "r": 20, "t": 100, "b": 45},
                      title={"text": f"Who may attend to whom, {result['seq_len']} tokens "
                                     f"({result['attn_implementation']}): blue = allowed", "x": 0.01})  # fmt: skip
    return fig


def _colour(value: float, top: float) -> tuple[str, str]:
    """(background, text colour) for ``value`` nats on a 0..``top`` scale."""
    bg = sample_colorscale(SURPRISE_SCALE, [min(max(value / top, 0.0), 1.0)])[0]
    r, g, b = (int(float(x)) for x in bg[bg.index("(") + 1 : -1].split(","))
    return bg, "#111" if 0.299 * r + 0.587 * g + 0.114 * b > 140 else "#fff"


def _tokens_html(res: dict, objective: str, top: float) -> str:
    spans = []
    for (gap, piece), special, value, expected in zip(
        res["pieces"], res["special"], res[objective], res[f"{objective}_expected"], strict=True
    ):
        spans.append(html.escape(gap))
        if value is None:
            why = "special token" if special else "opens the document: never predicted, as in training"
            spans.append(f'<span style="color:#94a3b8;margin-right:3px" title="{why}">{html.escape(piece)}</span>')
            continue
        bg, fg = _colour(value, top)
        tip = html.escape(f"{value:.2f} nats; the model expected {expected!r}")
        style = f"background:{bg};color:{fg};border-radius:2px;margin-right:1px;white-space:pre-wrap"
        spans.append(f'<span style="{style}" title="{tip}">{html.escape(piece)}</span>')
    return "".join(spans)


def legend_html(top: float) -> str:
    stops = ", ".join(sample_colorscale(SURPRISE_SCALE, [i / 10 for i in range(11)]))
    return (
        '<div style="display:flex;align-items:center;gap:8px;font-size:0.85em;margin:4px 0 10px">'
        "<span>0 nats (certain)</span>"
        f'<span style="display:inline-block;width:220px;height:12px;background:linear-gradient(to right, {stops});'
        'border:1px solid #cbd5e1"></span>'
        f"<span>{top:.1f} nats = ln(vocabulary): a blind guess, or worse</span></div>"
        '<div style="font-size:0.85em;color:#475569;margin:-6px 0 10px"><span style="color:#94a3b8">Grey</span> '
        "tokens have no score: the first token of the next-token line opens the text, so nothing comes before it "
        "to predict it from (training never predicts it either), and special tokens are never predicted.</div>"
    )


def _mean(value: float | None, count: int) -> str:
    return "no token" if value is None else f"mean <b>{value:.2f}</b> nats over {count} tokens"


def surprise_html(results: list[dict]) -> str:
    """Each model's text once per per-token view (``views``: next token, masked...), each token coloured by its
    surprise; the views' names come from their objectives."""
    top = max(r["blind_guess"] for r in results)
    blocks = [legend_html(top)]
    for res in results:
        cut = " (cut to the first tokens)" if res.get("truncated") else ""
        lines = "".join(
            f'<div style="font-size:0.85em;color:#475569">{html.escape(v["text"] + v["note"])}: '
            f"{_mean(res[v['objective'] + '_mean'], res[v['objective'] + '_count'])}</div>"
            f'<div style="line-height:1.9;margin-bottom:6px">{_tokens_html(res, v["objective"], top)}</div>'
            for v in res["views"]
        )
        blocks.append(
            '<div style="margin:0 0 14px;padding:8px 10px;border:1px solid #e2e8f0;border-radius:6px">'
            f'<div style="font-weight:600;margin-bottom:4px">{html.escape(str(res["model"]))}{cut}</div>{lines}</div>'
        )
    return "".join(blocks)


def _over_the_run(fig: go.Figure, rows: list[dict], title: str, y_title: str) -> go.Figure:
    """Tokens-seen axis, every phase switch of the run marked, the layout every run figure shares."""
    for b in phase_boundaries(rows):
        fig.add_vline(x=b["x"], line={"color": "#b91c1c", "dash": "dash", "width": 1.5})
        fig.add_annotation(x=b["x"], y=1.06, yref="paper", showarrow=False, font={"color": "#b91c1c", "size": 11},
                           text=f"→ {b['phase']} ({(b.get('objective') or '').upper()})")  # fmt: skip
    fig.update_layout(
        title={"text": title, "x": 0.01},
        xaxis_title="tokens seen",
        yaxis_title=y_title,
        height=330,
        margin={"l": 55, "r": 20, "t": 55, "b": 45},
        legend={"orientation": "h", "y": -0.25},
    )
    return fit_y_range(fig)


def _line(x: list, y: list, name: str, objective: str, **kw) -> go.Scatter:
    """Each objective in its own colour, in every figure over a run: solid where its attention is not bidirectional,
    dotted where it is."""
    o = objectives.get(objective)
    line = {"dash": "dot" if o.attention == "bidirectional" else "solid", "color": o.colour}
    return go.Scatter(x=x, y=y, name=name, mode="lines+markers", line=line, **kw)


def timeline_figure(points: list[dict], rows: list[dict], selected: int | None = None) -> go.Figure:
    """The run's held-out losses over tokens seen, its phase switches, a tick per saved model, the selected one."""
    fig = go.Figure()
    evals = [r for r in rows if r.get("type") == "eval"]
    for o in objectives.all_objectives():  # each held-out loss the run measured
        objective, name = o.name, f"held-out {o.text(o.held_out)} loss"
        got = [r for r in evals if r.get(f"eval_{objective}_loss") is not None]
        if got:
            x, y = [r["tokens_seen"] for r in got], [r[f"eval_{objective}_loss"] for r in got]
            fig.add_trace(_line(x, y, name, objective))
    saved = [p for p in points if p.get("tokens_seen") is not None]
    fig.add_trace(
        go.Scatter(
            x=[p["tokens_seen"] for p in saved],
            y=[0.02] * len(saved),
            yaxis="y2",
            mode="markers",
            marker={"symbol": "triangle-up", "size": 10, "color": "#64748b"},
            name="saved models",
            text=[p["label"] for p in saved],
            hovertemplate="%{text}<extra></extra>",
        )
    )
    if selected is not None and points[selected].get("tokens_seen") is not None:
        x = points[selected]["tokens_seen"]
        fig.add_vline(x=x, line={"color": "#111", "width": 3})
        right = x <= max(p["tokens_seen"] for p in saved) / 2  # the label on the roomier side of the line
        fig.add_annotation(x=x, y=0.5, yref="paper", text="you are here", showarrow=True, arrowhead=2,
                           ax=60 if right else -60, ay=0, bgcolor="rgba(255,255,255,0.8)")  # fmt: skip
    fig.update_layout(yaxis2={"overlaying": "y", "range": [0, 1], "visible": False})
    return _over_the_run(fig, rows, "The run: held-out losses, phase switch and saved models", "loss (nats)")


def trace_figure(res: dict, rows: list[dict]) -> go.Figure:
    """One text's mean surprise at every saved model of a run (``surprise_through_run``), with the phase switches."""
    pts = [p for p in res["points"] if p.get("tokens_seen") is not None]
    x, labels = [p["tokens_seen"] for p in pts], [p["label"] for p in pts]
    fig = go.Figure()
    for v in res["views"]:  # each per-token view, named by its objective
        objective, name = v["objective"], v["text"]
        y = [p[f"{objective}_mean"] for p in pts]
        hover = "%{text}<br>%{y:.2f} nats<extra>" + name + "</extra>"
        fig.add_trace(_line(x, y, name, objective, text=labels, hovertemplate=hover))
    return _over_the_run(fig, rows, "This text at every saved model: mean surprise per objective", "nats per token")

"""The recipe's timeline drawn: one band per phase (objective, attention, mask rate), the LR curve and the frozen
blocks, tokens (or steps) on the x axis. Built from ``recipe.expand_phases`` only, so the Launch form (a config
not yet trained) and the Runs tab (a run's saved config) draw the same picture."""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from backend import objectives
from backend.detour.recipe import expand_phases, split_pair, tokens_per_step
from backend.engine.config import validate_config
from backend.engine.rundir import read_config, read_status
from backend.reporting import figure_style  # noqa: F401  (the lab's template: plotly's default once imported)

TITLE = "Timeline: phases, LR (x peak) and frozen blocks"

LR_COLOURS = qualitative.Dark2  # the LR lines, one colour per run (left to plotly, two runs could share one)


def config_timelines(cfg: dict) -> dict[str, list[dict]]:
    """{run name: its timeline} for a validated config: a pair draws both runs, one row each."""
    return {c["name"]: expand_phases(c) for _, c in split_pair(cfg)}


def run_timeline(run_dir: str | Path) -> list[dict]:
    """A run's planned timeline from its saved config, at the tokens per step it trains with (the status says,
    under DDP: the world size multiplies them)."""
    cfg = validate_config(read_config(run_dir))
    cfg.pop("_meta", None)
    st = read_status(run_dir)
    world = 1
    if st.get("total_tokens") and st.get("total_steps"):
        world = max(1, round(st["total_tokens"] / st["total_steps"] / tokens_per_step(cfg)))
    return expand_phases(cfg, world_size=world)


def _label(d: dict) -> str:
    return f"{d['name']}: {d['label']}, {d['attention']}"  # each objective says how a phase of it reads


def _frozen(d: dict) -> list[str]:
    fr = d["freeze"]
    return [f"layer {i}" for i in fr["layers"]] + ["embeddings"] * fr["embeddings"] + ["head"] * fr["head"]


def _bottom_up(part: str) -> tuple:
    """Embeddings, layer 0, 1, ..., head: the model's order."""
    return (part != "embeddings", part == "head", int(part.split()[-1]) if part[-1].isdigit() else 0)


def timeline_figure(timelines: dict[str, list[dict]], axis: str = "tokens_seen", height: int = 330) -> go.Figure:
    """Bands per run (one row each), the LR factor below, then the frozen blocks: one x axis, so the phase switches
    line up. ``axis``: ``tokens_seen`` or ``step``, as the Runs tab's curves."""
    lo, hi = ("start_tokens", "end_tokens") if axis == "tokens_seen" else ("start_step", "end_step")
    frozen_rows = sorted({f for tl in timelines.values() for d in tl for f in _frozen(d)}, key=_bottom_up)
    rows = 3 if frozen_rows else 2
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        row_heights=[0.45, 0.35, 0.2][:rows])  # fmt: skip
    seen = set()
    for i, (run, tl) in enumerate(timelines.items()):
        for d in tl:
            hover = (f"{run}<br>{_label(d)}<br>{d['steps']} steps, {d['tokens']:,} tokens<br>LR {d['shape']}"
                     + (f"<br>frozen: {', '.join(_frozen(d))}" if _frozen(d) else ""))  # fmt: skip
            spec = objectives.get(d["objective"])  # its colour and name, the same everywhere
            fig.add_trace(
                go.Bar(y=[run], x=[d[hi] - d[lo]], base=[d[lo]], orientation="h", marker_color=spec.colour,
                       marker_line={"color": "white", "width": 2}, text=[_label(d)], textposition="inside",
                       insidetextanchor="middle", name=spec.title, legendgroup=d["objective"],
                       showlegend=d["objective"] not in seen, hovertemplate=hover + "<extra></extra>"),
                row=1, col=1,
            )  # fmt: skip
            seen.add(d["objective"])
            for f in _frozen(d):
                fig.add_trace(
                    go.Bar(y=[f], x=[d[hi] - d[lo]], base=[d[lo]], orientation="h", marker_color="#9AA0A6",
                           showlegend=False, hovertemplate=f"{run} · {d['name']}: {f} frozen<extra></extra>"),
                    row=3, col=1,
                )  # fmt: skip
        tps = tl[0]["tokens"] / max(tl[0]["steps"], 1) if tl else 1
        xs = [p[0] if axis == "tokens_seen" else p[0] / tps for d in tl for p in d["lr"]]
        fig.add_trace(
            go.Scatter(x=xs, y=[p[1] for d in tl for p in d["lr"]], mode="lines", name=f"LR · {run}",
                       line={"width": 2, "color": LR_COLOURS[i % len(LR_COLOURS)]},  # one per run, never shared
                       hovertemplate=f"{run}<br>%{{x}}: LR x%{{y:.3f}}<extra></extra>"),
            row=2, col=1,
        )  # fmt: skip
    for x in sorted({d[lo] for tl in timelines.values() for d in tl[1:]}):  # every phase switch, across all rows
        fig.add_vline(x=x, line={"color": "#555", "width": 1, "dash": "dot"})
    fig.update_layout(barmode="overlay", height=height, title={"text": TITLE, "x": 0.01},
                      margin={"l": 90, "r": 20, "t": 40, "b": 40}, legend={"orientation": "h", "y": -0.18},
                      uniformtext={"minsize": 8, "mode": "hide"})  # fmt: skip
    fig.update_yaxes(title_text="LR", range=[0, 1.05], row=2, col=1)
    if frozen_rows:
        fig.update_yaxes(title_text="frozen", categoryorder="array", categoryarray=frozen_rows, row=3, col=1)
    fig.update_xaxes(title_text="tokens" if axis == "tokens_seen" else "step", row=rows, col=1)
    return fig


def empty_timeline(message: str) -> go.Figure:
    """What the Launch form shows while the config cannot be drawn (the error is under its field)."""
    fig = go.Figure()
    fig.add_annotation(text=message, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False)
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.update_layout(height=160, title={"text": TITLE, "x": 0.01})
    return fig

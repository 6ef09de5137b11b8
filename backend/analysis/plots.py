"""Plotly figure builders from run metrics and analysis results: pure functions (no gradio), shared by the app
and any report."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.colors import qualitative

from backend.analysis.measures import DEFAULT_MEASURE, SHORT
from backend.reporting import figure_style  # noqa: F401  (the lab's template: plotly's default once imported)

PALETTE = qualitative.Plotly
LABEL_CHARS = 36  # a model name in a title; longer paths were cut at the figure's right edge


def _layout(fig: go.Figure, title: str, x: str, y: str, height: int = 360) -> go.Figure:
    fig.update_layout(
        title={"text": title, "x": 0.01},
        xaxis_title=x,
        yaxis_title=y,
        height=height,
        margin={"l": 55, "r": 40, "t": 55 + 15 * title.count("<br>") if "<br>" in title else 45, "b": 45},
        legend={"orientation": "h", "y": -0.22},
    )
    return fit_y_range(fig)


def fit_y_range(fig: go.Figure) -> go.Figure:
    """Give the primary y axis an explicit range when its curves are flat: Plotly autoscales a constant series to
    about -1..1, so a constant LR of 2e-4 sits on the 0 line and reads as "LR = 0". Varying curves keep autorange.
    A single x value (one logged point) gets 0 .. twice it on the x axis, for the same reason."""
    ys = []
    for t in fig.data:
        if getattr(t, "type", None) != "scatter" or (getattr(t, "yaxis", None) or "y") != "y" or t.y is None:
            continue
        ys += [float(v) for v in t.y if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v]
    if not ys:
        return fig
    xs = {float(v) for t in fig.data if getattr(t, "type", None) == "scatter" and t.x is not None for v in t.x
          if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v}  # fmt: skip
    if len(xs) == 1:  # one logged point: plotly's ±1 around it read as "20.479k .. 20.481k tokens"
        (x,) = xs
        fig.update_layout(xaxis_range=[0, 2 * x] if x > 0 else [x - 1, x + 1])
    lo, hi = min(ys), max(ys)
    scale = max(abs(lo), abs(hi))
    if hi - lo > 1e-6 * scale:
        return fig
    pad = 0.5 * scale if scale > 0 else 1.0
    fig.update_layout(yaxis_range=[lo - pad, hi + pad])
    return fig


def _empty(title: str, message: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, font={"size": 14})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _layout(fig, title, "", "")


def _x(row: dict, axis: str) -> float:
    return row.get(axis) if row.get(axis) is not None else row.get("step", 0)


def phase_boundaries(rows: Sequence[dict], axis: str = "tokens_seen") -> list[dict]:
    """Phase starts after the first: ``[{"x", "phase", "objective"}]`` (the CLM -> MLM switch is one of them)."""
    starts = [r for r in rows if r.get("type") == "phase"]
    out = []
    for prev, cur in zip(starts, starts[1:], strict=False):
        if cur.get("phase") != prev.get("phase"):
            out.append({"x": _x(cur, axis), "phase": cur.get("phase"), "objective": cur.get("objective")})
    return out


PHASE_DASH = {"warmup": "dashdot", "main": "solid", "decay": "dot"}  # main vs decay reads apart in every recipe
TRAIN_METRICS = {  # metrics.jsonl train-row key -> (figure title, y axis)
    "loss": ("Training loss (per phase)", "loss"),
    "lr": ("Learning rate", "lr"),
    "grad_norm": ("Gradient norm (before clipping)", "grad norm"),
    "tokens_per_s": ("Throughput", "tokens/s"),
}
EVAL_METRICS = {  # metrics.jsonl eval-row key -> (figure title, y axis); the gloss on a line of its own: in one
    # line it ran past the figure's edge at 1000 px and below ("Held-out CLM loss (next token; the curve the")
    "eval_mlm_loss": ("Held-out MLM loss<br><sup>15% masks; comparable across recipes</sup>", "MLM loss"),
    "eval_clm_loss": ("Held-out CLM loss<br><sup>next token; the curve the detour lowers</sup>", "CLM loss"),
}


def _axis_title(axis: str) -> str:
    return "tokens seen" if axis == "tokens_seen" else axis


def _phase_segments(rows: Sequence[dict], key: str) -> list[tuple[str, str, list[dict]]]:
    """Consecutive train rows of one (phase, objective) that carry ``key``."""
    segments: list[tuple[str, str, list[dict]]] = []
    for r in rows:
        if r.get("type") != "train" or r.get(key) is None:
            continue
        phase_key = (r.get("phase", "?"), r.get("objective", "?"))
        if not segments or segments[-1][:2] != phase_key:
            segments.append((*phase_key, []))
        segments[-1][2].append(r)
    return segments


def train_metric_figure(runs: dict[str, Sequence[dict]], key: str = "loss", axis: str = "tokens_seen") -> go.Figure:
    """A train-row metric per run and phase: one colour per run, the phase in the dash (main solid, decay dotted,
    warm-up dash-dot) and the legend; a phase with a single row is drawn as a marker; each switch a vertical line."""
    title, ylabel = TRAIN_METRICS.get(key, (key, key))
    if not any(_phase_segments(rows, key) for rows in runs.values()):
        return _empty(title, "no training rows yet")
    fig = go.Figure()
    for i, (name, rows) in enumerate(runs.items()):
        color = PALETTE[i % len(PALETTE)]
        for phase, objective, seg in _phase_segments(rows, key):
            fig.add_trace(
                go.Scatter(
                    x=[_x(r, axis) for r in seg],
                    y=[r[key] for r in seg],
                    mode="lines" if len(seg) > 1 else "markers",
                    name=f"{name} · {phase} ({objective})",
                    legendgroup=name,
                    line={"color": color, "dash": PHASE_DASH.get(phase, "dash"), "width": 2},
                    marker={"color": color, "size": 8},
                    hovertemplate=f"{name}<br>{phase} ({objective})<br>%{{x}}: {ylabel} %{{y:.4g}}<extra></extra>",
                )
            )
        for b in phase_boundaries(rows, axis):
            fig.add_vline(x=b["x"], line={"color": color, "dash": "dash", "width": 1})
            if key == "loss":
                fig.add_annotation(x=b["x"], y=1, yref="paper", text=f"{b['phase']} ({b['objective']})",
                                   showarrow=False, font={"color": color, "size": 10}, xanchor="left",
                                   yanchor="top")  # fmt: skip
    if key == "lr":
        fig.update_yaxes(exponentformat="e")
    fig.update_layout(showlegend=True)  # which run a lone curve is
    return _layout(fig, title, _axis_title(axis), ylabel)


def train_loss_figure(runs: dict[str, Sequence[dict]], axis: str = "tokens_seen") -> go.Figure:
    """Training loss per run and phase; each phase switch is a vertical line."""
    return train_metric_figure(runs, "loss", axis)


def eval_loss_figure(
    runs: dict[str, Sequence[dict]], axis: str = "tokens_seen", key: str = "eval_mlm_loss"
) -> go.Figure:
    """A held-out curve: the MLM loss at 15% with fixed masks (comparable across recipes) or the CLM loss."""
    title, ylabel = EVAL_METRICS.get(key, (key, key))
    if not any(any(r.get("type") == "eval" and r.get(key) is not None for r in rows) for rows in runs.values()):
        return _empty(title, "no evaluation rows yet")
    fig = go.Figure()
    for i, (name, rows) in enumerate(runs.items()):
        color = PALETTE[i % len(PALETTE)]
        ev = [r for r in rows if r.get("type") == "eval" and r.get(key) is not None]
        fig.add_trace(
            go.Scatter(
                x=[_x(r, axis) for r in ev],
                y=[r[key] for r in ev],
                mode="lines+markers",
                name=name,
                line={"color": color},
                marker={"size": 5},
            )
        )
        for b in phase_boundaries(rows, axis):
            fig.add_vline(x=b["x"], line={"color": color, "dash": "dash", "width": 1})
    fig.update_layout(showlegend=True)
    return _layout(fig, title, _axis_title(axis), ylabel)


def metrics_summary(rows: Sequence[dict]) -> dict:
    """The run table's numbers from metrics.jsonl: the last train loss, the last held-out MLM and CLM losses, and
    the training rate (``throughput.step_rate``: the doctor's definition, so the table and the throughput panel
    show one number)."""
    from backend.engine.throughput import step_rate

    train = [r for r in rows if r.get("type") == "train"]
    ev = [r for r in rows if r.get("type") == "eval"]
    return {
        "train_loss": train[-1].get("loss") if train else None,
        "eval_mlm_loss": ev[-1].get("eval_mlm_loss") if ev else None,
        "eval_clm_loss": ev[-1].get("eval_clm_loss") if ev else None,
        "tokens_per_s": step_rate(train),
    }


ERROR_CHARS = 60  # the table shows the start of an error; the Runs tab's log panel shows all of it


def run_summary(
    name: str, status: dict, metrics: dict | None = None, now: float | None = None, progress: dict | None = None
) -> dict:
    """One table row: state, phase, step, tokens, %, ETA and tok/s from ``engine.progress.run_progress`` (what the
    doctor's panel shows too: one reading of where a run stands); time (duration); losses from ``metrics_summary``.
    Without ``progress`` it is read from ``status`` alone (no logged rate: no ETA)."""
    from backend.engine.progress import eta_text, run_progress
    from backend.engine.rundir import clock_moved, time_spent

    p = progress if progress is not None else run_progress(status, [])
    tokens, total = p["tokens_seen"], p["total_tokens"]
    step, steps = p["step"], p["total_steps"]
    pct = f"{100 * tokens / total:.0f}%" if tokens is not None and total else ""
    duration = time_spent(status, now)  # a resumed run: its earlier processes' time too
    m = metrics or {}
    error = status.get("error") or ""
    return {
        "run": name,
        "state": p["state"],
        "phase": p["phase"],
        "step": f"{step or 0}/{steps}" if steps else (str(step) if step else ""),
        "tokens": f"{_fmt_int(tokens)}/{_fmt_int(total)}" if total else _fmt_int(tokens),
        "%": pct,
        "ETA": eta_text(p),
        "time": "clock moved back"
        if clock_moved(status, now)
        else (_fmt_duration(duration) if duration is not None and duration >= 0 else ""),
        "tok/s": _fmt_int(p["tokens_per_s"] if progress is not None else m.get("tokens_per_s")),
        "train loss": _fmt_loss(m.get("train_loss")),
        "held-out MLM": _fmt_loss(m.get("eval_mlm_loss")),
        "held-out CLM": _fmt_loss(m.get("eval_clm_loss")),
        "error": error if len(error) <= ERROR_CHARS else error[: ERROR_CHARS - 1] + "…",
    }


def _fmt_duration(s: float) -> str:
    from backend.engine.progress import hms

    return hms(int(s))  # whole seconds elapsed, truncated as before


def _fmt_loss(v) -> str:
    return "" if v is None else f"{v:.3f}"


def _fmt_int(n) -> str:
    if n is None:
        return ""
    n = float(n)
    for unit, div in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{round(n)}"  # rounded as the doctor prints it (5.6 tok/s is 6 in both)


# --- analysis ---------------------------------------------------------------------------------


def _num(v, digits: int = 3) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def similarity_caption(
    measure: str, samples: dict | None = None, hidden_sizes: dict | None = None, baseline: dict | None = None
) -> str:
    """What a similarity figure measured, in one line: measure, n (texts or tokens), hidden sizes, and what the
    same measure gives on shuffled inputs (the "unrelated" level at this n)."""
    parts = [SHORT.get(measure, measure)]
    if samples:
        n = samples["n"] if isinstance(samples["n"], int) else "/".join(map(str, samples["n"]))
        parts.append(f"n = {n} {samples['unit']}")
    if hidden_sizes:
        parts.append("hidden " + " / ".join(str(h) for h in hidden_sizes.values()))
    if baseline:
        parts.append(
            f"shuffled-{baseline.get('unit', 'texts')} baseline {_num(baseline['mean'])} "
            f"({_num(baseline['min'])} to {_num(baseline['max'])})"
        )
    return " · ".join(parts)


def fit_label(label: str, width: int = LABEL_CHARS) -> str:
    """A model's name as a title can hold it: a long path keeps its end (``…/runs/my-run/final``), which names it."""
    return label if len(label) <= width else "…" + label[-(width - 1) :]


def cka_heatmap(
    matrix: Sequence[Sequence[float]],
    layers_a: Sequence,
    layers_b: Sequence,
    label_a: str = "A",
    label_b: str = "B",
    *,
    measure: str = DEFAULT_MEASURE,
    samples: dict | None = None,
    hidden_sizes: dict | None = None,
    baseline: dict | None = None,
) -> go.Figure:
    """Layer x layer similarity: rows = layers of A, columns = layers of B. The caption names the measure, n and
    the hidden sizes, and ``baseline`` (an ``api.cka_between`` result's) gives the level of unrelated inputs; each
    cell's hover shows its own baseline."""
    name = SHORT.get(measure, measure)
    base = (baseline or {}).get("matrix")
    hover = f"{label_a} %{{y}} · {label_b} %{{x}}<br>{name} %{{z:.4f}}"
    if base:
        hover += "<br>shuffled baseline %{customdata:.4f}"
    cells = [v for r in matrix for v in r if v is not None]
    fig = go.Figure(
        go.Heatmap(
            z=[list(r) for r in matrix],
            x=[str(x) for x in layers_b],
            y=[str(y) for y in layers_a],
            customdata=[[v if v is not None else float("nan") for v in r] for r in base] if base else None,
            colorscale="Viridis",
            zmin=min(cells) if cells else 0,  # similarities sit near 1: show the structure (the caption: the floor)
            zmax=1,
            colorbar={"title": name.split(" (")[0]},
            hovertemplate=hover + "<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed")
    caption = similarity_caption(measure, samples, hidden_sizes, baseline)
    a, b = fit_label(label_a), fit_label(label_b)  # the hover keeps the whole names
    title = f"{name}: {a} (rows) vs {b} (columns)<br><sup>{caption}</sup>"
    fig = _layout(fig, title, f"{b} layer", f"{a} layer", 460)
    fig.update_layout(margin={"t": 70})
    return fig


def divergence_figure(
    layers: Sequence,
    divergence: Sequence[float],
    control: Sequence[float] | None = None,
    ratio: Sequence[float] | None = None,
    *,
    measure: str = DEFAULT_MEASURE,
    caption: str = "",
    models: tuple[str, str] | None = None,
) -> go.Figure:
    """Per-layer divergence 1 - similarity(A_l, B_l), the seed-noise control, and their ratio (right axis);
    ``models``: (A, B), named in the title so the chart says what it shows beside later ones."""
    x = [str(v) for v in layers]
    divergence = snap_noise(divergence)
    fig = go.Figure()
    fig.add_trace(go.Bar(x=x, y=divergence, name="divergence A vs B", marker_color=PALETTE[0]))
    if control is not None:
        control = snap_noise(control)
        fig.add_trace(go.Bar(x=x, y=control, name="control (seed noise)", marker_color=PALETTE[2]))
    if ratio is not None:
        fig.add_trace(
            go.Scatter(
                x=x,
                y=list(ratio),
                name="ratio = divergence / control",
                yaxis="y2",
                mode="lines+markers",
                line={"color": PALETTE[1]},
            )
        )
        fig.update_layout(yaxis2={"title": "ratio", "overlaying": "y", "side": "right", "type": "log"})
    fig.update_layout(barmode="group")
    name = SHORT.get(measure, measure)
    pair = f": {fit_label(models[0])} vs {fit_label(models[1])}" if models else ""
    sub = f"1 − {name} of matching layers" + (f"<br>{caption}" if caption else "")  # one line each: it fits
    fig = _layout(fig, f"Divergence per layer{pair}<br><sup>{sub}</sup>", "layer", f"1 − {name.split(' (')[0]}")
    if not any(divergence) and not any(control or []):  # autoscaled, zeros drew as full bars of ±1e-15
        fig.update_yaxes(range=[-0.01, 0.01], tickformat=".3f")
        fig.add_annotation(text="0 in every layer: the two models' representations are the same", x=0.5, y=0.75,
                           xref="paper", yref="paper", showarrow=False)  # fmt: skip
    return fig


FLOAT_NOISE = 1e-9  # a similarity is computed in float64: a model against itself gives 1 - CKA of about 1e-15


def snap_noise(values: Sequence[float | None]) -> list[float | None]:
    """Values within float noise of 0 drawn as 0: a model compared with itself once drew full bars on an axis
    labelled in femto-units. Real divergences (0.003 at layer 0 between two seeds) are many orders above."""
    return [0.0 if v is not None and abs(v) < FLOAT_NOISE else v for v in values]


def trajectory_figure(
    x: Sequence,
    divergence: Sequence[Sequence[float]],
    layers: Sequence,
    x_title: str = "tokens seen",
    tags: Sequence[str] | None = None,
    *,
    measure: str = DEFAULT_MEASURE,
    caption: str = "",
    title: str | None = None,
) -> go.Figure:
    """Divergence from the reference (1 - similarity of matching layers) per layer across a run's checkpoints:
    ``divergence`` is points x layers. ``title``: what the chart shows (the analysis names its run and reference)."""
    title = (title or "Divergence from the reference across checkpoints") + (
        f"<br><sup>{caption}</sup>" if caption else ""
    )
    if not divergence:
        return _empty(title, "no complete checkpoints yet")
    fig = go.Figure()
    for j, name in enumerate(layers):
        fig.add_trace(
            go.Scatter(
                x=list(x),
                y=[row[j] for row in divergence],
                mode="lines+markers",
                name=str(name),
                text=list(tags) if tags else None,
                line={"color": PALETTE[j % len(PALETTE)]},
                hovertemplate=f"{name}<br>%{{x}}: %{{y:.4f}}<br>%{{text}}<extra></extra>",
            )
        )
    fig = _layout(fig, title, x_title, f"1 − {SHORT.get(measure, measure).split(' (')[0]} (same layer)")
    if caption:
        fig.update_layout(margin={"t": 70})
    return fig


def weight_change_figure(
    layers: Sequence, change: Sequence[float], label_a: str = "A", label_b: str = "B"
) -> go.Figure:
    """Relative weight change from A to B per layer, ``||W_B - W_A|| / ||W_A||`` (A is the reference: the
    direction of ``analysis.weight_change.relative_weight_change(a, b)``)."""
    fig = go.Figure(
        go.Bar(
            x=[str(v) for v in layers],
            y=list(change),
            marker_color=PALETTE[3],
            hovertemplate="%{x}: %{y:.4f}<extra></extra>",
        )
    )
    title = f"Weight change from A ({label_a}) to B ({label_b}), relative to A"
    return _layout(fig, title, "layer", "‖W_B − W_A‖ / ‖W_A‖")


PROB_FORMAT = ".1%"  # every fill-mask number: bars, axis ticks and hover


def fill_mask_figure(result: dict, x_max: float | None = None) -> go.Figure:
    """Top-k tokens with probabilities as horizontal bars (best on top), as percentages with one decimal, each
    labelled in words (``…s``: a piece that continues the word before it) with its filled sentence in the hover.
    ``x_max`` fixes the probability axis (``fill_mask_figures`` gives every panel the same one)."""
    preds = result.get("predictions", [])
    probs = [p["prob"] for p in preds]
    fig = go.Figure(
        go.Bar(
            x=probs[::-1],
            y=[f"{i + 1}. {repr(p.get('label', p['token']))[1:-1] or '∅'}" for i, p in enumerate(preds)][::-1],
            customdata=[p.get("sequence", "") for p in preds][::-1],
            orientation="h",
            text=[f"{p:{PROB_FORMAT}}" for p in probs][::-1],
            textposition="outside",
            cliponaxis=False,
            marker_color=PALETTE[0],
            hovertemplate=f"%{{y}}: %{{x:{PROB_FORMAT}}}<br>%{{customdata}}<extra></extra>",
        )
    )
    fig.update_xaxes(range=[0, x_max or prob_axis_max(probs)], tickformat=PROB_FORMAT, nticks=5)
    return _layout(fig, str(result.get("model", "")), "probability", "", height=80 + 32 * max(len(preds), 1))


def prob_axis_max(probs: Sequence[float]) -> float:
    """The probability axis end: room for the largest bar and its label, at most 100%."""
    return min(1.0, max(0.02, max(probs, default=1.0) * 1.25))


def fill_mask_figures(results: Sequence[dict]) -> list[go.Figure]:
    """One panel per model on one shared probability axis, so bars compare across models."""
    x_max = prob_axis_max([p["prob"] for r in results for p in r.get("predictions", [])])
    return [fill_mask_figure(r, x_max) for r in results]

"""Figures that are read side by side: fill-mask panels share one probability axis and one number format."""

from __future__ import annotations

import re

from backend.analysis import plots


def result(model: str, probs: list[float]) -> dict:
    preds = [{"token": f"t{i}", "token_id": i, "prob": p, "sequence": ""} for i, p in enumerate(probs)]
    return {"model": model, "predictions": preds}


def test_fill_mask_panels_share_one_axis_and_one_format():
    confident, unsure = result("a", [0.83, 0.05, 0.004]), result("b", [0.021, 0.0152, 0.0004])
    figs = plots.fill_mask_figures([confident, unsure])
    ranges = [tuple(f.layout.xaxis.range) for f in figs]
    assert ranges[0] == ranges[1] and ranges[0][1] >= 0.83  # the same scale: 2% looks small next to 83%
    assert {f.layout.xaxis.tickformat for f in figs} == {".1%"}
    labels = [t for f in figs for t in f.data[0].text]
    assert all(re.fullmatch(r"\d{1,3}\.\d%", t) for t in labels), labels
    assert list(figs[0].data[0].text) == ["0.4%", "5.0%", "83.0%"] and list(figs[1].data[0].text)[-1] == "2.1%"


def test_one_panel_axis_leaves_room_and_stops_at_one():
    assert plots.fill_mask_figures([result("a", [0.99])])[0].layout.xaxis.range[1] == 1.0
    assert plots.fill_mask_figures([result("a", [0.001])])[0].layout.xaxis.range[1] == 0.02


def _train_rows(key: str, values: list[float]) -> list[dict]:
    return [{"type": "train", "phase": "main", "objective": "clm", "step": i, "tokens_seen": 256 * i, key: v}
            for i, v in enumerate(values)]  # fmt: skip


def test_a_flat_curve_axis_shows_its_values():
    """A constant LR of 2e-4 must not sit on the 0 line of a -1..1 axis (it read as 'LR = 0'); every flat curve
    (train metrics, held-out losses, the Detour tab's run figures) gets an axis around its value."""
    from backend.explain.figures import timeline_figure

    lo, hi = plots.train_metric_figure({"r": _train_rows("lr", [2e-4] * 5)}, "lr").layout.yaxis.range
    assert 0 < lo < 2e-4 < hi < 1e-3
    lo, hi = plots.train_metric_figure({"r": _train_rows("loss", [3.5] * 3)}, "loss").layout.yaxis.range
    assert 0 < lo < 3.5 < hi < 10
    ev = [{"type": "eval", "step": i, "tokens_seen": 100 * i, "eval_mlm_loss": 7.25} for i in range(3)]
    lo, hi = plots.eval_loss_figure({"r": ev}).layout.yaxis.range
    assert lo < 7.25 < hi and hi - lo < 10
    ev = [{"type": "eval", "step": i, "tokens_seen": 100 * i, "eval_clm_loss": 9.0} for i in range(3)]
    points = [{"tokens_seen": 0, "label": "start"}, {"tokens_seen": 200, "label": "step 2"}]
    lo, hi = timeline_figure(points, ev).layout.yaxis.range
    assert 0 < lo < 9.0 < hi < 20


def test_a_varying_curve_keeps_autorange():
    fig = plots.train_metric_figure({"r": _train_rows("lr", [0.0, 1e-4, 2e-4, 1e-4])}, "lr")
    assert fig.layout.yaxis.range is None


def test_divergence_noise_is_drawn_as_zero():
    """A model against itself: 1 - CKA of ±1e-15 drew full bars on an axis in femto-units."""
    from backend.analysis.plots import divergence_figure

    fig = divergence_figure([0, 1, 2], [1e-15, -2e-15, 0.0], control=[3e-16, 0.0, -1e-16])
    assert list(fig.data[0].y) == [0.0, 0.0, 0.0] and list(fig.data[1].y) == [0.0, 0.0, 0.0]
    assert tuple(fig.layout.yaxis.range) == (-0.01, 0.01)
    real = divergence_figure([0, 1], [0.003, 0.02])
    assert list(real.data[0].y) == [0.003, 0.02] and real.layout.yaxis.range is None


def test_every_figure_keeps_its_toolbar_off_the_title():
    """The modebar lay over the start of long titles: the lab's template stands it vertically at the right edge,
    and no figure module asks for the bare plotly template any more."""
    from backend.analysis.plots import divergence_figure
    from backend.core.paths import REPO_ROOT

    assert divergence_figure([0], [0.1]).layout.template.layout.modebar.orientation == "v"
    bare = [p for p in (REPO_ROOT / "backend").rglob("*.py") if 'template="plotly_white"' in p.read_text()]
    assert not bare, bare


def test_figures_take_the_template_as_plotly_default_never_one_by_one():
    """Set on each figure, plotly merged, copied and validated the template every time (94% of a fill-mask answer,
    a third of the app's CPU under 20 users): every module that builds a figure imports the style, which makes the
    template plotly's default, and none sets a template itself. In a fresh process, each such module alone gives its
    figures the lab's look."""
    import re
    import subprocess
    import sys

    from backend.core.paths import REPO_ROOT

    code = [p for d in ("backend", "app") for p in (REPO_ROOT / d).rglob("*.py")]
    drawing = [p for p in code if "go.Figure(" in p.read_text() or "make_subplots(" in p.read_text()]
    assert drawing and all("figure_style" in p.read_text() for p in drawing), drawing
    own = [p for p in code if re.search(r"\btemplate=", p.read_text()) and p.name != "figure_style.py"]
    assert not own, own
    probe = (
        "import plotly.graph_objects as go, backend.analysis.plots; "
        "f = go.Figure(go.Bar(x=[1], y=[1])); print(f.layout.template.layout.modebar.orientation)"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "v"


def test_a_long_model_path_keeps_its_end_in_the_heatmap_title():
    """A model given by a long path was cut at the figure's right edge, with the part that names it: the title keeps
    the path's end, the hover the whole name."""
    from backend.analysis.plots import LABEL_CHARS, cka_heatmap

    long = "/tmp/walk/some/deeply/nested/lab/folder/runs/detour-detour/final"
    fig = cka_heatmap([[1.0, 0.5], [0.5, 1.0]], [0, 1], [0, 1], "detour-tiny-en", long)
    head = fig.layout.title.text.split("<br>")[0]
    assert head.endswith("/runs/detour-detour/final (columns)") and "…" in head and long not in head
    assert len(head) < len("Debiased CKA: ") + 2 * LABEL_CHARS + 30
    assert long in fig.data[0].hovertemplate and fig.layout.xaxis.title.text.endswith("detour-detour/final layer")


def test_a_single_logged_point_sits_on_a_readable_axis():
    """A run with one logged step drew its point on plotly's ±1 around it: ticks "20.479k .. 20.481k" tokens."""
    from backend.analysis.plots import train_metric_figure

    one = {"r": [{"type": "train", "step": 5, "phase": "main", "objective": "clm", "loss": 7.0,
                  "tokens_seen": 20_480}]}  # fmt: skip
    fig = train_metric_figure(one, "loss", "tokens_seen")
    assert tuple(fig.layout.xaxis.range) == (0, 40_960) and fig.layout.yaxis.range is not None
    two = {"r": [*one["r"], {**one["r"][0], "step": 6, "tokens_seen": 24_576, "loss": 6.5}]}
    assert train_metric_figure(two, "loss", "tokens_seen").layout.xaxis.range is None

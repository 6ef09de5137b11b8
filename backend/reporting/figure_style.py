"""The one look of every figure the lab draws: plotly's white template, with the toolbar (modebar) standing
vertically at the right edge, where it once lay over the start of long titles and subtitles.

Importing this module makes the template plotly's default, which a new figure takes without validating it again. Set
on each figure (``template=...``) plotly merged, copied and validated it every time: ~20 ms a figure, a third of the
app's CPU under 20 users refreshing their curves and 94% of a fill-mask answer; as the default it costs under 1 ms.
The template keeps plotly_white's layout and its defaults for the trace types the lab draws only (24 kinds made the
copy twice as long), so the figures look the same. Modules that draw import it for this effect."""

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
    pio.templates.default = TEMPLATE


_register()

"""The one look of every figure the lab draws: plotly's white template, with the toolbar (modebar) standing
vertically at the right edge, where it once lay over the start of long titles and subtitles."""

from __future__ import annotations

import plotly.graph_objects as go
import plotly.io as pio

TEMPLATE = "plotly_white+detour"


def _register() -> None:
    if "detour" not in pio.templates:
        pio.templates["detour"] = go.layout.Template(layout={"modebar": {"orientation": "v"}})


_register()

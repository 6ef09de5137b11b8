"""Only the open tab polls.

Every page ran every tab's timer whatever tab it showed (the Runs tab every 2 s, Sweeps and Reports every 3 s, the
suite panel every 5 s): 20 open pages made about 27 requests a second, served on the cores a run trains on. Here a
tab's timers run while that tab is selected and stop when another is; a page opens on the first tab with its timers
only. A timer a checkbox switches (the Runs tab's "Live") runs when its tab is open and its box is ticked."""

from __future__ import annotations

import gradio as gr


def timers_in(block: gr.blocks.Block) -> list[gr.Timer]:
    """Every timer below ``block``, depth first."""
    found: list[gr.Timer] = []
    for child in getattr(block, "children", None) or []:
        if isinstance(child, gr.Timer):
            found.append(child)
        found += timers_in(child)
    return found


def poll_only_the_open_tab(tabs: list[gr.Tab], gates: dict[int, gr.Checkbox] | None = None) -> list[gr.Timer]:
    """Wire each tab's ``select`` to start its own timers and stop the others'; ``gates``: a timer's ``_id`` -> the
    checkbox that must be ticked too. Returns the timers (the first tab's stay on at page load, the rest off)."""
    gates = gates or {}
    per_tab = [timers_in(t) for t in tabs]
    timers = [tm for own in per_tab for tm in own]
    if not timers:
        return []
    opening = {tm._id for tm in per_tab[0]}
    for tm in timers:
        tm.active = tm._id in opening and tm.active
    gated = list(gates.items())

    for tab, own in zip(tabs, per_tab, strict=True):
        mine = {tm._id for tm in own}

        def on_select(*ticked: bool, mine: set[int] = mine) -> list:
            box = {tid: bool(v) for (tid, _), v in zip(gated, ticked, strict=True)}
            return [gr.Timer(active=tm._id in mine and box.get(tm._id, True)) for tm in timers]

        tab.select(on_select, inputs=[cb for _, cb in gated], outputs=timers, queue=False, show_progress="hidden",
                   api_visibility="private")  # fmt: skip
    return timers

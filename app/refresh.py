"""Keeping a tab's lists current. A ``gr.Dropdown(choices=...)`` holds the choices computed when the page was
built, and a browser reload serves that same build; runs, reports and evaluations made later appear only when a
handler sends new choices. ``keep_fresh`` sends them when the tab is selected, on an optional button, and on page
load for the tab a page opens on only: a tab not shown yet is read when it is first shown (every tab's lists on
every page load made an opening cost the server eight tabs' reads, 20 pages opened at once on 2 cores waited 7-10 s)."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def opens_the_page(tab) -> bool:
    """Whether ``tab`` (a ``gr.Tab``) is the one its page opens on: its ``gr.Tabs``' ``selected`` one, else the
    first. Anything outside a tab is on the page as it opens."""
    import gradio as gr

    if not isinstance(tab, gr.Tab):
        return True
    siblings = [t for t in tab.parent.children if isinstance(t, gr.Tab)]
    selected = getattr(tab.parent, "selected", None)
    return tab is next((t for t in siblings if selected is not None and t.id == selected), siblings[0])


def on_show(tab, button=None) -> list:
    """The triggers that show ``tab``'s content fresh: its select, page load when the page opens on it, and
    ``button``'s click."""
    import gradio as gr
    from gradio.context import Context

    triggers = [tab.select] if isinstance(tab, gr.Tab) else []
    if Context.root_block is not None and opens_the_page(tab):
        triggers.append(Context.root_block.load)
    if button is not None:
        triggers.append(button.click)
    return triggers


def keep_fresh(fn: Callable, outputs: Sequence, inputs: Sequence = (), button=None) -> None:
    """Run ``fn(*inputs)`` (returning one update per output) whenever the enclosing ``gr.Tab`` is shown (``on_show``)
    and on ``button.click``. Call it at the top level of a tab's ``build``: the enclosing tab is the render context
    there, and the page (``gr.Blocks``) is the root context."""
    import gradio as gr
    from gradio.context import get_render_context

    gr.on(
        on_show(get_render_context(), button),
        fn,
        inputs=list(inputs),
        outputs=list(outputs),
        queue=False,
        show_progress="hidden",
        api_visibility="private",
    )

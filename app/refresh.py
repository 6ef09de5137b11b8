"""Keeping a tab's lists current. A ``gr.Dropdown(choices=...)`` holds the choices computed when the page was
built, and a browser reload serves that same build; runs, reports and evaluations made later appear only when a
handler sends new choices. ``keep_fresh`` sends them on page load, when the tab is selected and on an optional
button."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def keep_fresh(fn: Callable, outputs: Sequence, inputs: Sequence = (), button=None) -> None:
    """Run ``fn(*inputs)`` (returning one update per output) on page load, whenever the enclosing ``gr.Tab`` is
    selected and on ``button.click``. Call it at the top level of a tab's ``build``: the enclosing tab is the
    render context there, and the page (``gr.Blocks``) is the root context."""
    import gradio as gr
    from gradio.context import Context, get_render_context

    tab = get_render_context()
    triggers = [Context.root_block.load] if Context.root_block is not None else []
    if isinstance(tab, gr.Tab):
        triggers.append(tab.select)
    if button is not None:
        triggers.append(button.click)
    gr.on(
        triggers,
        fn,
        inputs=list(inputs),
        outputs=list(outputs),
        queue=False,
        show_progress="hidden",
        api_visibility="private",
    )

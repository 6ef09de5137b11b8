"""The timeline in the app: the Launch form's phase-list editor (add / remove / reorder phases) and its drawing,
and the same drawing under the Runs tab's curves. The figure comes from ``backend.explain.timeline_figure``; the
list is checked by ``backend.engine.config`` (every error names its key). The editor writes the list into the
Launch tab's loaded-config state, which the form's values go over at launch."""

from __future__ import annotations

import copy

from app import warn
from backend import objectives
from backend.core.errors import DetourError
from backend.core.paths import runs_dir
from backend.engine.config import default_config, load_config
from backend.engine.schema import LR_SHAPES
from backend.explain.timeline_figure import config_timelines, empty_timeline, run_timeline, timeline_figure

# column -> the phase key it edits (freeze.* nested); one column per setting any objective declares (its module says
# the heading), so a new objective's settings appear here without editing the app
KEY_OF = {"name": "name", "objective": "objective", "tokens": "tokens", "steps": "steps", "fraction": "fraction",
          **{heading: name for name, heading in objectives.setting_headings().items()},
          "LR shape": "shape", "warm-up tokens": "warmup_tokens", "final LR ratio": "final_lr_ratio",
          "freeze layers": "freeze.layers", "freeze embeddings": "freeze.embeddings",
          "freeze head": "freeze.head"}  # fmt: skip
COLUMNS = list(KEY_OF)
_FIRST = objectives.all_objectives()[0]  # a new row: the first objective, at its held-out settings
NEW_PHASE = {"objective": _FIRST.name, "tokens": 100_000, **{k: v for k, v in {**_FIRST.defaults(),
             **_FIRST.held_out}.items() if v is not None}, "shape": "constant"}  # fmt: skip


# --- pure handlers (tested without a browser) ---------------------------------------------------


def phases_to_rows(phases: list[dict]) -> list[list]:
    """A phase list -> table rows (blank where a key is not set)."""
    rows = []
    for p in phases:
        row = []
        for c in COLUMNS:
            k = KEY_OF[c]
            v = (p.get("freeze") or {}).get(k.split(".")[1]) if k.startswith("freeze.") else p.get(k)
            row.append("" if v is None or v is False else v)
        rows.append(row)
    return rows


def _cell(v):
    """A table cell -> a YAML value (blank -> unset; '1e5' -> 100000.0; 'true' -> True)."""
    from backend.engine.config import parse_override

    if v is None or (isinstance(v, float) and v != v) or (isinstance(v, str) and not v.strip()):
        return None
    return parse_override(f"cell={v}")[1] if isinstance(v, str) else v


def rows_to_phases(rows) -> list[dict]:
    """Table rows -> the phase list (unset keys left out, numbers as numbers, whole floats as ints)."""
    rows = rows.values.tolist() if hasattr(rows, "values") else list(rows or [])
    phases = []
    for row in rows:
        p: dict = {}
        for c, v in zip(COLUMNS, row, strict=False):
            v = _cell(v)
            if v is None:
                continue
            if isinstance(v, float) and v.is_integer() and c in ("tokens", "steps", "warm-up tokens"):
                v = int(v)
            k = KEY_OF[c]
            if k.startswith("freeze."):
                p.setdefault("freeze", {})[k.split(".")[1]] = str(v) if k == "freeze.layers" else v
            else:
                p[k] = str(v) if k in ("name", "objective", "shape") else v
        if p:
            phases.append(p)
    return phases


def add_row(rows) -> list[list]:
    return [*(r for r in _rows(rows)), phases_to_rows([NEW_PHASE])[0]]


def remove_row(rows, number) -> list[list]:
    """Remove phase ``number`` (1-based, as the table's order)."""
    rows = _rows(rows)
    i = int(number or 0) - 1
    return rows[:i] + rows[i + 1 :] if 0 <= i < len(rows) else rows


def move_row(rows, number, delta: int) -> tuple[list[list], int]:
    """Move phase ``number`` (1-based) up (-1) or down (+1); -> (rows, its new number)."""
    rows = _rows(rows)
    i = int(number or 0) - 1
    j = i + delta
    if not (0 <= i < len(rows) and 0 <= j < len(rows)):
        return rows, int(number or 0)
    rows[i], rows[j] = rows[j], rows[i]
    return rows, j + 1


def _rows(rows) -> list[list]:
    return [list(r) for r in (rows.values.tolist() if hasattr(rows, "values") else list(rows or []))]


def preset_rows(values: list, base: dict | None, to_config) -> tuple[list[list], str]:
    """The form's current recipe as a list (budgets in steps): a start for editing. ``to_config``: the Launch
    form's ``values_to_config``."""
    from backend.detour.recipe import expand_phases

    try:
        cfg, _ = to_config(values, base)
        tl = expand_phases(cfg)
    except (DetourError, ValueError) as exc:
        return [], warn(exc)
    keep = ("name", "objective", "steps", "mlm_probability", "shape", "final_lr_ratio")
    phases = []
    for d in tl:
        p = {k: d[k] for k in keep if d[k] is not None}
        if d["shape"] in ("warmup_constant", "constant"):
            p.pop("final_lr_ratio")
        if d["warmup_steps"]:
            p["warmup_tokens"] = d["warmup_steps"] * d["tokens"] // d["steps"]
        elif p.get("shape") == "warmup_constant":  # no warm-up: constant (a warm-up shape without one is refused)
            p["shape"] = "constant"
        fr = d["freeze"]
        if fr["layers"] or fr["embeddings"] or fr["head"]:
            p["freeze"] = {"layers": ",".join(map(str, fr["layers"])) or None, "embeddings": fr["embeddings"],
                           "head": fr["head"]}  # fmt: skip
        phases.append(p)
    return phases_to_rows(phases), "the form's recipe as a list: edit it, then **Use this timeline**"


def apply_rows(rows, recipe: str, base: dict | None, total_tokens=None) -> tuple[dict | None, str, str]:
    """The table as the recipe: -> (the loaded-config state with ``phases`` as the list, message, the form's recipe).
    The recipe becomes ``custom`` unless the form's ``recipe`` is ``pair`` (which also trains the list's baseline).
    ``total_tokens``: the form's Total tokens field (``train.total_tokens``), of which a ``fraction`` is a share."""
    new = copy.deepcopy(base) if base else default_config()
    new["phases"] = rows_to_phases(rows)
    new["recipe"] = "pair" if recipe == "pair" else "custom"
    try:
        total = _cell(total_tokens)
        new["train"]["total_tokens"] = int(total) if isinstance(total, float) and total.is_integer() else total
    except DetourError as exc:
        return base, warn(exc), recipe
    try:
        load_config(copy.deepcopy({k: v for k, v in new.items() if k != "_meta"}))
    except DetourError as exc:
        return base, warn(exc), recipe
    return new, "✓ " + list_message(new), new["recipe"]


def list_message(state: dict) -> str:
    """What the editor says of a state that holds a timeline list."""
    note = " (pair: its baseline trains each CLM phase as MLM)" if state["recipe"] == "pair" else ""
    return (f"the timeline is the recipe ({len(state['phases'])} phases){note}; the form shows only what a list "
            "reads besides it (Total tokens)")  # fmt: skip


FIELDS_ARE_THE_RECIPE = "the form's fields are the recipe: **Start from the form's recipe** to edit it as a list"


def editor_view(state: dict | None) -> tuple[list[list], str]:
    """(the table, the message) for the Launch form's loaded-config state, whatever set it (the editor, a loaded
    config, Back to the form's fields): its list, or an empty table when the form's fields are the recipe."""
    if state and isinstance(state.get("phases"), list):
        return phases_to_rows(state["phases"]), list_message(state)
    return [], FIELDS_ARE_THE_RECIPE


def clear_list(base: dict | None, recipe: str) -> tuple[dict | None, str, str, list]:
    """Back to the form's phase fields (the preset recipes); -> (state, message, the form's recipe, the table:
    emptied, whether or not a list was in use)."""
    if not base or not isinstance(base.get("phases"), list):
        return base, FIELDS_ARE_THE_RECIPE, recipe, []
    new = copy.deepcopy(base)
    new["phases"] = default_config()["phases"]
    new["recipe"] = "pair" if new["recipe"] == "custom" else new["recipe"]
    return new, "the timeline list is cleared: " + FIELDS_ARE_THE_RECIPE, new["recipe"], []


def form_figure(values: list, base: dict | None, to_config):
    """The Launch form's timeline: every run it would train (a pair: both), or why it cannot be drawn."""
    try:
        cfg, _ = to_config(values, base)
        return timeline_figure(config_timelines(cfg))
    except (DetourError, ValueError) as exc:
        return empty_timeline(f"no timeline: {exc}"[:160])


def runs_figure(names: list[str] | None, axis: str = "tokens_seen", default=list):
    """The Runs tab's picture: each plotted run's timeline, on the curves' x axis (``default()``: the runs the
    curves show when none is picked)."""
    timelines = {}
    for n in list(names or []) or default():
        try:
            timelines[n] = run_timeline(runs_dir() / n)
        except (DetourError, OSError, ValueError, KeyError):
            continue  # a run whose config no longer reads: its curves still show
    return timeline_figure(timelines, axis) if timelines else empty_timeline("no run to draw")


# --- UI -----------------------------------------------------------------------------------------


def build_launch(inputs: list, values: list, base, to_config, recipe, revalidate=None, total=None) -> dict:
    """The editor and the drawing, under the Launch form. ``inputs``: the form's fields; ``values``: their first
    values; ``base``: the loaded-config state; ``to_config``: the form's ``values_to_config``; ``recipe``: the form's
    recipe field; ``revalidate``: (handler, its keyword arguments) of the form's check, run when the list changes;
    ``total``: the form's Total tokens field (``train.total_tokens``: what a phase's ``fraction`` is a share of)."""
    import gradio as gr

    with gr.Accordion("Timeline: the phases as a list (add / remove / reorder)", open=False):
        label = (f"phases in order; objective {' | '.join(objectives.names())} (its settings in their columns, blank: "
                 f"its default); LR shape {' | '.join(LR_SHAPES)}; one budget per phase (fraction: of "
                 "the form's Total tokens)")  # fmt: skip
        table = gr.Dataframe(headers=COLUMNS, value=[], interactive=True, column_count=(len(COLUMNS), "fixed"),
                             label=label, elem_id="timeline-table")  # fmt: skip
        with gr.Row():
            from_form = gr.Button("Start from the form's recipe")
            add = gr.Button("Add phase")
            number = gr.Number(value=1, precision=0, label="phase #", min_width=80)
            up, down, remove = gr.Button("Move up"), gr.Button("Move down"), gr.Button("Remove")
        with gr.Row():
            use = gr.Button("Use this timeline", variant="primary")
            clear = gr.Button("Back to the form's phase fields")
        msg = gr.Markdown("", elem_id="timeline-msg")
    plot = gr.Plot(value=form_figure(values, None, to_config), show_label=False, elem_id="timeline-plot")
    hidden = {"show_progress": "hidden", "api_visibility": "private"}
    start = lambda *v: preset_rows(list(v[:-1]), v[-1], to_config)  # noqa: E731
    from_form.click(start, inputs=[*inputs, base], outputs=[table, msg], **hidden)
    add.click(add_row, inputs=[table], outputs=[table], **hidden)
    remove.click(remove_row, inputs=[table, number], outputs=[table], **hidden)
    up.click(lambda r, n: move_row(r, n, -1), inputs=[table, number], outputs=[table, number], **hidden)
    down.click(lambda r, n: move_row(r, n, +1), inputs=[table, number], outputs=[table, number], **hidden)
    use.click(apply_rows, inputs=[table, recipe, base, *([total] if total is not None else [])],
              outputs=[base, msg, recipe], **hidden)  # fmt: skip
    clear.click(clear_list, inputs=[base, recipe], outputs=[base, msg, recipe, table], **hidden)
    draw = lambda *v: form_figure(list(v[:-1]), v[-1], to_config)  # noqa: E731
    gr.on([c.change for c in inputs] + [base.change], draw, inputs=[*inputs, base], outputs=[plot],
          trigger_mode="always_last", **hidden)  # fmt: skip
    # the table and its message follow the state, whatever set it: a loaded config's list fills the table, a loaded
    # preset config or Back to the form's fields empties it
    base.change(editor_view, inputs=[base], outputs=[table, msg], **hidden)
    if revalidate is not None:
        handler, kw = revalidate
        base.change(handler, **{**kw, **hidden})
    return {"table": table, "plot": plot, "message": msg, "use": use}


def build_runs(compare, axis, default) -> object:
    """The timeline under the Runs tab's curves, redrawn with the selection and the x axis; the tab's poll (when it is
    shown, its timer, Refresh) draws it as runs appear (``default``: the runs the curves show when none is picked)."""
    import gradio as gr

    plot = gr.Plot(value=None, show_label=False, elem_id="runs-timeline")  # drawn when the tab is shown (its poll)
    draw = lambda names, axis_: runs_figure(names, axis_, default)  # noqa: E731
    for event in (compare.change, axis.change):
        event(draw, inputs=[compare, axis], outputs=[plot], show_progress="hidden", api_visibility="private")
    return plot

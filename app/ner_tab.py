"""NER tab: token-classification models side by side on one text -- the lab's fine-tuned ones and released ones (a
hub id, a model of the Hugging Face cache, a local folder), each with its own label set -- spans highlighted in one
colour per entity type across the slots, a legend, and each slot's labels listed under it; the F1 table of the
evaluations and a button that runs one (``app.ner_evaluations``)."""

from __future__ import annotations

import html
import zlib
from dataclasses import dataclass, field

from app import TYPED_PICKER, md_escape, model_choices, model_ref, warn
from app.ner_evaluations import F1_HEADERS, LIVE_HEADERS, evaluate_live, f1_table, finetuned_choices
from backend.core import inference_lane
from backend.core.errors import DetourError
from backend.engine.model_ref import ModelRef

SLOTS = 4
EXAMPLE = "Patients with type 2 diabetes received metformin at Massachusetts General Hospital."
# gr.HighlightedText sets ``word-break: break-all`` on its text, so a segment that reaches the end of a line is cut
# anywhere ("receive|d", "Gener|al"); in this tab lines break between words (a word longer than a line still wraps).
# gr.Dropdown draws its arrow over the end of its text box: a slot's text stops before the arrow, and a name too
# long for its slot ends in "…" rather than under the arrow.
WHOLE_WORDS_CSS = (
    "<style>.ner-spans .textfield { word-break: normal; overflow-wrap: anywhere; }"
    " .ner-slot input { padding-right: var(--size-8); text-overflow: ellipsis; }"
    " .ner-chip { display: inline-block; padding: 0 6px; margin: 2px 4px 2px 0; border-radius: 4px; }</style>"
)
# One colour per entity type, in every slot: a type keeps its colour whatever the models beside it (its name picks
# a colour; two names on one colour move the later to the next free one). Names that differ only in case
# (``Chemical``, ``CHEMICAL``: two models' label sets) are one type to the eye -- the spans show them upper-cased --
# so they share a colour, and the legend names both.
PALETTE = ["#3b82f6", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#ec4899", "#14b8a6", "#84cc16", "#f97316",
           "#6366f1", "#0ea5e9", "#a16207"]  # fmt: skip


def type_colours(types: list[str]) -> dict[str, str]:
    """{entity type: colour}, one colour per type (names equal but for case share one), stable across calls
    (beyond the palette: evenly spaced hues)."""
    groups = sorted({t.casefold() for t in types})
    if len(groups) > len(PALETTE):
        import colorsys

        rgbs = [colorsys.hls_to_rgb(i / len(groups), 0.5, 0.7) for i in range(len(groups))]
        by_group = {g: "#" + "".join(f"{round(255 * c):02x}" for c in rgb) for g, rgb in zip(groups, rgbs, strict=True)}
    else:
        by_group = {}
        for g in groups:
            i = zlib.crc32(g.encode("utf-8")) % len(PALETTE)
            while PALETTE[i] in by_group.values():
                i = (i + 1) % len(PALETTE)
            by_group[g] = PALETTE[i]
    return {t: by_group[t.casefold()] for t in sorted(set(types), key=lambda t: (t.casefold(), t))}


def _chip(typ: str, colour: str) -> str:
    return f'<span class="ner-chip" style="background:{colour}80">{html.escape(typ)}</span>'


def legend_html(colours: dict[str, str]) -> str:
    """The colours of every entity type the slots' models have (names equal but for case on one chip)."""
    if not colours:
        return ""
    groups: dict[str, list[str]] = {}
    for t in colours:
        groups.setdefault(t.casefold(), []).append(t)
    chips = "".join(_chip(" / ".join(names), colours[names[0]]) for names in groups.values())
    return f"<div id='ner-legend-chips'><b>Entity types</b>: {chips}</div>"


def labels_html(labels, colours: dict[str, str]) -> str:
    """A model's label set under its slot, as it names it: its types (coloured as in the legend), the scheme and
    how many labels its head has."""
    chips = "".join(_chip(t, colours.get(t, "#999999")) for t in labels.types) or "<i>no entity type</i>"
    return f"<div class='ner-labels'>{chips} <small>{labels.scheme}, {len(labels.labels)} labels</small></div>"


def slot_choices() -> list[tuple[str, str]]:
    """What a slot offers: the lab's fine-tuned NER models (newest first), then the token-classification models of
    the Hugging Face cache (``org/name (cached, …)``; the value is the hub id)."""
    from backend.engine.hub_cache import cached_taggers

    return finetuned_choices() + [(m.label, m.hub_id) for m in cached_taggers()]


def default_slots(picks: list, choices: list[tuple[str, str]] | None = None) -> list:
    """The slots' values: with nothing picked (a page built before any evaluation), the first two models offered
    (the newest fine-tuned ones, then cached taggers beside them); a choice made is kept."""
    if any(picks):
        return list(picks)
    choices = slot_choices() if choices is None else choices
    return [choices[i][1] if i < min(2, len(choices)) else None for i in range(len(picks))]


# One batch answers at most this many waiting requests (Gradio's ``max_batch_size``), as in the Fill-mask tab.
MAX_BATCH = 16


@dataclass
class Tagged:
    """One request's answer: per slot its spans (HighlightedText value) or None, its label set (HTML) or '', the
    colours of every type the slots' models have, and the message."""

    values: list
    message: str
    labels: list[str] = field(default_factory=list)
    colours: dict[str, str] = field(default_factory=dict)

    @property
    def legend(self) -> str:
        return legend_html(self.colours)


def tag(text: str, models: list[str | None]) -> tuple[list, str]:
    """-> (HighlightedText value or None per slot, message)."""
    answer = tag_many([(text, models)])[0]
    return answer.values, answer.message


def tag_many(requests: list[tuple[str, list[str | None]]]) -> list[Tagged]:
    """``tag`` for many users' requests ``(text, models)`` at once: each model's name is resolved once, and each
    model tags every text that asks for it in one batched pass, in the inference lane (``backend.core.
    inference_lane``: one thread, below training)."""
    out: list[Tagged | None] = [None] * len(requests)
    slots: list[list[str | None]] = []
    groups: dict[ModelRef, list[tuple[int, int]]] = {}
    notes: list[dict[int, str]] = [{} for _ in requests]
    choices = None
    for r, (text, models) in enumerate(requests):
        if not any(models):  # read once per batch, not once per request
            choices = slot_choices() if choices is None else choices
        picked = default_slots(list(models), choices)  # empty slots take the defaults
        slots.append(picked)
        if not (text or "").strip():
            out[r] = Tagged([None] * len(picked), "⚠ write a text to tag")
        elif len(text) > 5000:
            out[r] = Tagged([None] * len(picked), f"⚠ the text has {len(text)} characters; at most 5000")
        if out[r] is not None:
            continue
        for i, m in enumerate(picked):
            if not m:
                continue
            try:
                choices = slot_choices() if choices is None else choices
                groups.setdefault(slot_model(m, i, choices), []).append((r, i))
            except DetourError as exc:
                notes[r][i] = _slot_note(exc, i)
    answers = inference_lane.run(_infer, groups, [t for t, _ in requests])
    for r, picked in enumerate(slots):
        if out[r] is not None:
            continue
        vals: list = [None] * len(picked)
        found = {i: res for i in range(len(picked)) if (res := answers.get((r, i))) is not None}
        for i, res in found.items():
            if isinstance(res, DetourError):
                notes[r][i] = _slot_note(res, i)
            else:
                vals[i] = res[0]
                notes[r][i] = f"slot {i + 1}: {sum(1 for _, lab in res[0] if lab)} entities"
        labels = {i: res[1] for i, res in found.items() if not isinstance(res, DetourError)}
        colours = type_colours([t for lab in labels.values() for t in lab.types])
        shown = [labels_html(labels[i], colours) if i in labels else "" for i in range(len(picked))]
        for i in (i for i in notes[r] if i not in labels):  # a refused slot says why under itself too
            shown[i] = f"<div class='ner-labels'>{notes[r][i]}</div>"
        if not any(picked):
            message = "⚠ choose at least one model (run an evaluation below, or type a tagger's hub id)"
        else:
            message = " · ".join(notes[r][i] for i in sorted(notes[r]))
        out[r] = Tagged(vals, message, shown, colours)
    return out  # type: ignore[return-value]


def slot_model(value: str, i: int, choices: list[tuple[str, str]]) -> ModelRef:
    """A slot's value -> its model, resolved once: a listed model's label -> its folder or hub id; anything else
    as every model field takes it (a folder inside the allowed roots, a hub id, a cached model, a run)."""
    value = value.strip()
    for label, target in choices:
        if value == label:
            value = target
            break
    return model_ref(value, f"slot {i + 1}")


def _slot_note(exc: Exception, i: int) -> str:
    from backend.evaluation.tagger import NotATagger

    if isinstance(exc, NotATagger):  # a pretrained encoder: the way to a tagger is on this page
        exc = DetourError(f"{exc}; fine-tune it under Run an evaluation below, then pick the fine-tuned model here")
    return warn(exc) if str(exc).startswith(f"slot {i + 1}") else warn(f"slot {i + 1}: {exc}")


def _infer(groups: dict[ModelRef, list[tuple[int, int]]], texts: list[str]) -> dict:
    """{(request, slot): (spans, its label set) or the DetourError it got}: one ``predict_entities_batch`` per
    model."""
    from backend.evaluation.predict import predict_entities_batch
    from backend.evaluation.tagger import load_tagger

    out: dict[tuple[int, int], tuple | DetourError] = {}
    for ref, members in groups.items():
        try:
            labels = load_tagger(ref).labels
            res = [(spans, labels) for spans in predict_entities_batch(ref, [texts[r] for r, _ in members])]
        except DetourError as exc:  # the model does not load: every slot that asked for it says why
            res = [exc] * len(members)
        out.update(zip(members, res, strict=True))
    return out


NO_MODELS = (
    "**No NER model yet.** Type a token-classification model in a slot (a hub id, a folder; those in your Hugging "
    "Face cache are listed), or open **Run an evaluation** below, pick one or more models (the bundled one works), "
    "keep the quick settings and press **Run evaluation**: each model is fine-tuned on the NER demo set, then "
    "appears in the slots above and in the F1 table. From a terminal: `python -m backend evaluate --task ner "
    "--models MODEL`."
)


def next_step(choices: list | None = None) -> str:
    """What a page with nothing to tag says to do (empty once a model to tag with exists)."""
    return NO_MODELS if not (slot_choices() if choices is None else choices) else ""


def build(ctx) -> dict:
    import gradio as gr

    from app.refresh import keep_fresh

    choices = slot_choices()
    text = gr.Textbox(value=EXAMPLE, label="Text", lines=3, elem_id="ner-text")
    with gr.Row():
        refresh = gr.Button("Refresh models", scale=0, min_width=200, elem_id="ner-refresh")
        go_btn = gr.Button("Tag entities", variant="primary", elem_id="ner-btn")
    with gr.Row():  # in a row: bare at the tab's top level, it made headless Chromium's clicks on the Launch tab
        legend = gr.HTML("", elem_id="ner-legend")  # wait for a navigation that never came (tests/ui/test_browser.py)
    slots, outs, label_lines = [], [], []
    for first in range(0, SLOTS, 2):  # two slots a row: a model's name (model, seed, score, evaluation) fits whole
        with gr.Row(equal_height=False):
            for i in (first, first + 1):
                with gr.Column(min_width=220):
                    slots.append(
                        gr.Dropdown(
                            choices=choices,
                            value=default_slots([None] * SLOTS, choices)[i],
                            label=f"Model {i + 1} (fine-tuned here, or any token-classification model)",
                            elem_id=f"ner-model-{i}",
                            elem_classes=["ner-slot", *TYPED_PICKER],
                            allow_custom_value=True,  # paths and hub ids are checked by the handler
                        )
                    )
                    outs.append(
                        gr.HighlightedText(
                            label=f"Entities, model {i + 1}",
                            combine_adjacent=False,
                            show_legend=False,
                            show_inline_category=True,  # the entity type on the span itself
                            elem_id=f"ner-out-{i}",
                            elem_classes=["ner-spans"],
                        )
                    )
                    label_lines.append(gr.HTML("", elem_id=f"ner-labels-{i}"))
    msg = gr.Markdown("")
    hint = gr.Markdown("", elem_id="ner-next-step")  # a fresh install: what to do first (``lists``, when shown)
    gr.Markdown("### Evaluations (test F1, mean over seeds)")
    table = gr.Dataframe(value=f1_table() or None, headers=F1_HEADERS, interactive=False)
    with gr.Accordion("Run an evaluation (NER demo set)", open=False, elem_id="ner-eval"):
        with gr.Row():
            ev_models = gr.Dropdown(
                choices=model_choices(),
                multiselect=True,
                label="Models",
                allow_custom_value=True,
                elem_id="ner-ev-models",
            )
            ev_seeds = gr.Textbox(value="0", label="Seeds", max_lines=1)
            ev_epochs = gr.Number(value=2, precision=0, label="Epochs (paper: 20)")
            ev_max = gr.Number(value=200, precision=0, label="Max training sentences (blank = all)")
        with gr.Row():
            ev_btn = gr.Button("Run evaluation", variant="primary", elem_id="ner-ev-btn")
            stop_btn = gr.Button("Stop", scale=0, min_width=100)
        ev_msg = gr.Markdown("", elem_id="ner-ev-msg")
        live_table = gr.Dataframe(  # shown once an evaluation runs, like the log
            headers=LIVE_HEADERS,
            interactive=False,
            label="Per epoch, as it trains",
            elem_id="ner-ev-epochs",
            visible=False,
        )
        live_log = gr.Textbox(
            label="Log", lines=6, max_lines=12, interactive=False, elem_id="ner-ev-log", visible=False
        )
    gr.HTML(head=WHOLE_WORDS_CSS)  # into the page's <head>, so the rule reaches the HighlightedText above

    def on_tag(texts, *models):
        """Gradio's batch: each input a list (one item per waiting request), one list per output back; the spans
        carry the colour of each type (the same in every slot)."""
        cols = [list(m) for m in models]
        answers = tag_many([(texts[r], [c[r] for c in cols]) for r in range(len(texts))])
        spans = [[gr.update(value=a.values[i], color_map=a.colours) for a in answers] for i in range(SLOTS)]
        lines = [[a.labels[i] if a.labels else "" for a in answers] for i in range(SLOTS)]
        return [*spans, *lines, [a.legend for a in answers], [a.message for a in answers]]

    gr.on(
        [go_btn.click, text.submit],
        on_tag,
        inputs=[text, *slots],
        outputs=[*outs, *label_lines, legend, msg],  # the message last: API clients read it there
        batch=True,
        max_batch_size=MAX_BATCH,
        concurrency_limit=1,  # one batch at a time: the requests that arrive meanwhile form the next batch
        api_name="ner_tag",
    )

    def lists(*picks):
        """Every list this tab shows, read again: the models to tag with (empty slots take the defaults), the
        models to evaluate, the F1 table."""
        ch = slot_choices()
        values = default_slots(list(picks) or [None] * SLOTS, ch)
        return [
            *[gr.update(choices=ch, value=v) for v in values],
            gr.update(choices=model_choices()),
            f1_table() or None,
            next_step(ch),
        ]

    list_outs = [*slots, ev_models, table, hint]
    keep_fresh(lists, list_outs, inputs=slots, button=refresh)

    def on_eval(models, seeds, epochs, max_train, *picks):
        for live, final in evaluate_live(models, seeds, epochs, max_train):
            shown = [gr.update(value=live.table(), visible=True), gr.update(value=live.log(), visible=True)]
            if final is None:
                yield [f"**Running** · {md_escape(live.status)}", *shown, *[gr.skip()] * len(list_outs)]
            else:
                yield [final, *shown, *lists(*picks)]

    ev = ev_btn.click(
        on_eval,
        inputs=[ev_models, ev_seeds, ev_epochs, ev_max, *slots],
        outputs=[ev_msg, live_table, live_log, *list_outs],
        concurrency_limit=1,
        concurrency_id="analysis",
        show_progress="minimal",
        api_name="ner_evaluate",
    )
    stop_btn.click(None, cancels=[ev])
    return {"text": text, "outs": outs, "lists": lists}

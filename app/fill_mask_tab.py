"""Fill-mask tab: one sentence, 2 to 4 models side by side, top-k tokens as probability bars
(``backend.analysis.fill_mask.fill_mask``, the same function as ``python -m backend fill-mask``)."""

from __future__ import annotations

from app import (
    TYPED_PICKER,
    default_picks,
    follow_defaults,
    md_escape,
    model_choices,
    model_name,
    model_ref,
    warn,
)
from backend.analysis import plots
from backend.analysis.fill_mask import check_text, predict_batch
from backend.core import inference_lane
from backend.core.errors import DetourError
from backend.engine.model_ref import ModelRef

SLOTS = 4
EXAMPLE = "Aspirin inhibits the [MASK] of prostaglandins."


# One batch answers at most this many waiting requests (Gradio's ``max_batch_size``): 20 users' sentences in one
# padded pass per model; a larger batch only makes its first user wait longer for the last one's sentence.
MAX_BATCH = 16


def predict(text: str, specs: list[str | None], trust: list[bool], top_k: int = 5) -> tuple[list, str]:
    """-> (one figure or None per slot, message). Empty slots are skipped; every refusal is a message."""
    return predict_many([(text, specs, trust, top_k)])[0]


def predict_many(requests: list[tuple[str, list, list, int]]) -> list[tuple[list, str]]:
    """``predict`` for many users' requests ``(text, specs, trust, top_k)`` at once: each model runs one padded pass
    over every sentence that asks for it, in the inference lane (``backend.core.inference_lane``: one thread, below
    training)."""
    results: list[dict[int, dict]] = [{} for _ in requests]
    notes: list[dict[int, str]] = [{} for _ in requests]
    early: dict[int, str] = {}
    groups: dict[tuple[ModelRef, bool], list[tuple[int, int]]] = {}
    for r, (text, specs, trust, _k) in enumerate(requests):
        try:
            check_text(text)
        except DetourError as exc:
            early[r] = warn(exc)
            continue
        chosen = [(i, model_name(s)) for i, s in enumerate(specs) if s and s.strip()]
        if not chosen:
            early[r] = "⚠ choose at least one model"
        for i, spec in chosen:
            try:
                resolved = model_ref(spec, f"slot {i + 1}")  # once per action; the error names the slot once
            except DetourError as exc:
                notes[r][i] = _slot_note(exc, i)
                continue
            groups.setdefault((resolved, bool(trust[i])), []).append((r, i))
    answers = inference_lane.run(_infer, groups, [(t, k) for t, _s, _tr, k in requests])
    for (r, i), res in answers.items():
        spec = model_name(requests[r][1][i])
        if isinstance(res, DetourError):
            notes[r][i] = _slot_note(res, i)
            continue
        res["model"] = spec if len(spec) <= 40 else "…" + spec[-39:]
        results[r][i] = res
        top = res["predictions"][0]
        notes[r][i] = f"**{md_escape(spec)}**: `{top['sequence']}` ({top['prob']:{plots.PROB_FORMAT}})"
    out = []
    for r, (_text, specs, _trust, _k) in enumerate(requests):
        figs: list = [None] * len(specs)
        if r in early:
            out.append((figs, early[r]))
            continue
        slots = sorted(results[r])
        for i, fig in zip(slots, plots.fill_mask_figures([results[r][i] for i in slots]), strict=True):
            figs[i] = fig
        out.append((figs, "\n\n".join(notes[r][i] for i in sorted(notes[r]))))
    return out


def _slot_note(exc: Exception, i: int) -> str:
    return warn(exc) if str(exc).startswith(f"slot {i + 1}") else warn(f"slot {i + 1}: {exc}")


def _infer(groups: dict[tuple[ModelRef, bool], list[tuple[int, int]]], asks: list[tuple[str, int]]) -> dict:
    """{(request, slot): result dict or the DetourError it got}: one ``predict_batch`` per (model, trust)."""
    out: dict[tuple[int, int], dict | DetourError] = {}
    for (resolved, trust), members in groups.items():
        try:
            res = predict_batch(resolved, [asks[r][0] for r, _ in members], [int(asks[r][1]) for r, _ in members],
                                trust_remote_code=trust)  # fmt: skip
        except DetourError as exc:  # the model does not load: every slot that asked for it says why
            res = [exc] * len(members)
        out.update(zip(members, res, strict=True))
    return out


def build(ctx) -> dict:
    import gradio as gr

    from app.refresh import keep_fresh

    choices = model_choices()
    defaults = default_picks(choices, SLOTS)
    text = gr.Textbox(
        value=EXAMPLE,
        label="Sentence with one [MASK] (or <mask>: either works for every model)",
        elem_id="fm-text",
        max_lines=3,
    )
    with gr.Row():
        top_k = gr.Slider(1, 20, value=5, step=1, label="top-k")
        go_btn = gr.Button("Fill the mask", variant="primary", elem_id="fm-btn")
        refresh = gr.Button("Refresh models", scale=0, min_width=200)
    specs, trusts, outs = [], [], []
    with gr.Row(equal_height=False):
        for i in range(SLOTS):
            with gr.Column(min_width=220):
                specs.append(
                    gr.Dropdown(
                        choices=choices,
                        value=defaults[i],
                        label=f"Model {i + 1}",
                        allow_custom_value=True,
                        elem_id=f"fm-model-{i}",
                        elem_classes=TYPED_PICKER,
                    )
                )
                trusts.append(gr.Checkbox(value=False, label="trust remote code (this model)"))
                outs.append(gr.Plot(label=f"Top-k, model {i + 1}", elem_id=f"fm-plot-{i}"))
    msg = gr.Markdown("", elem_id="fm-msg")

    def run(texts, ks, *vals):
        """Gradio's batch: each input a list (one item per waiting request), one list per output back."""
        cols = [list(v) for v in vals]
        requests = [
            (texts[r], [c[r] for c in cols[:SLOTS]], [c[r] for c in cols[SLOTS:]], int(ks[r] or 5))
            for r in range(len(texts))
        ]
        answers = predict_many(requests)
        return [*[[figs[i] for figs, _ in answers] for i in range(SLOTS)], [m for _, m in answers]]

    gr.on(
        [go_btn.click, text.submit],
        run,
        inputs=[text, top_k, *specs, *trusts],
        outputs=[*outs, msg],
        batch=True,
        max_batch_size=MAX_BATCH,
        concurrency_limit=1,  # one batch at a time: the requests that arrive meanwhile form the next batch
        api_name="fill_mask",
    )

    shown = gr.State(defaults)  # the defaults this page's slots were last given: while on them, they follow

    def lists(*values):
        """Every list read again; slots all still on their defaults take the new ones (the base and the newest
        pair); a choice made in any slot keeps them all."""
        *picks, given = values
        ch = model_choices()
        new = default_picks(ch, SLOTS)
        return [*[gr.update(choices=ch, value=v) for v in follow_defaults(picks, given, new)], new]

    keep_fresh(lists, [*specs, shown], inputs=[*specs, shown], button=refresh)
    return {"text": text, "button": go_btn, "plots": outs, "message": msg, "lists": lists}

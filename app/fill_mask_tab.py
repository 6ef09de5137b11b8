"""Fill-mask tab: one sentence, 2 to 4 models side by side, top-k tokens as probability bars
(``backend.analysis.fill_mask.fill_mask``, the same function as ``python -m backend fill-mask``)."""

from __future__ import annotations

from app import check_model_spec, default_picks, fill_empty_picks, md_escape, model_choices, model_name, warn
from backend.analysis import plots
from backend.analysis.fill_mask import check_text, fill_mask
from backend.core.errors import DetourError

SLOTS = 4
EXAMPLE = "Aspirin inhibits the [MASK] of prostaglandins."


def predict(text: str, specs: list[str | None], trust: list[bool], top_k: int = 5) -> tuple[list, str]:
    """-> (one figure or None per slot, message). Empty slots are skipped; every refusal is a message."""
    try:
        check_text(text)
    except DetourError as exc:
        return [None] * len(specs), warn(exc)
    chosen = [(i, model_name(s)) for i, s in enumerate(specs) if s and s.strip()]
    if not chosen:
        return [None] * len(specs), "⚠ choose at least one model"
    results: dict[int, dict] = {}
    notes = []
    for i, spec in chosen:
        try:
            resolved = check_model_spec(spec, f"slot {i + 1}")  # the error names the slot once
            res = fill_mask([resolved], text, top_k=int(top_k), trust_remote_code=bool(trust[i]))[0]
        except DetourError as exc:
            notes.append(warn(exc) if str(exc).startswith(f"slot {i + 1}") else warn(f"slot {i + 1}: {exc}"))
            continue
        res["model"] = spec if len(spec) <= 40 else "…" + spec[-39:]
        results[i] = res
        top = res["predictions"][0]
        notes.append(f"**{md_escape(spec)}**: `{top['sequence']}` ({top['prob']:{plots.PROB_FORMAT}})")
    figs: list = [None] * len(specs)
    for i, fig in zip(results, plots.fill_mask_figures(list(results.values())), strict=True):
        figs[i] = fig
    return figs, "\n\n".join(notes)


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
                    )
                )
                trusts.append(gr.Checkbox(value=False, label="trust remote code (this model)"))
                outs.append(gr.Plot(label=f"Top-k, model {i + 1}", elem_id=f"fm-plot-{i}"))
    msg = gr.Markdown("", elem_id="fm-msg")

    def run(text_, k, *vals):
        figs, message = predict(text_, list(vals[:SLOTS]), list(vals[SLOTS:]), int(k))
        return [*figs, message]

    gr.on(
        [go_btn.click, text.submit],
        run,
        inputs=[text, top_k, *specs, *trusts],
        outputs=[*outs, msg],
        concurrency_limit=2,
        api_name="fill_mask",
    )

    def lists(*picks):
        """Every list read again; with nothing picked beside the first slot, the base and the newest pair."""
        ch = model_choices()
        return [gr.update(choices=ch, value=v) for v in fill_empty_picks(list(picks), ch)]

    keep_fresh(lists, specs, inputs=specs, button=refresh)
    return {"text": text, "button": go_btn, "plots": outs, "message": msg, "lists": lists}

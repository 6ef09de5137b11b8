"""NER tab: fine-tuned models (from the evaluation backend) side by side on one text, spans highlighted per model;
the F1 table of the evaluations; a button that runs an evaluation (``backend.evaluation.runner.evaluate_models``,
the function behind ``python -m backend evaluate``)."""

from __future__ import annotations

import json
from pathlib import Path

from app import check_model_spec, check_path, evals_dir, model_choices, warn
from backend.core.errors import DetourError

SLOTS = 4
EXAMPLE = "Patients with type 2 diabetes received metformin at Massachusetts General Hospital."


def finetuned() -> list[dict]:
    from backend.evaluation.predict import list_finetuned

    return list_finetuned(evals_dir(), task="ner")


def finetuned_choices() -> list[tuple[str, str]]:
    return [(m["name"], m["path"]) for m in finetuned()]


def tag(text: str, model_dirs: list[str | None]) -> tuple[list, str]:
    """-> (HighlightedText value or None per slot, message)."""
    from backend.evaluation.predict import predict_entities

    if not (text or "").strip():
        return [None] * len(model_dirs), "⚠ write a text to tag"
    if len(text) > 5000:
        return [None] * len(model_dirs), f"⚠ the text has {len(text)} characters; at most 5000"
    out, notes = [], []
    for i, d in enumerate(model_dirs):
        if not d:
            out.append(None)
            continue
        try:
            spans = predict_entities(check_path(d, f"NER model {i + 1}"), text)
        except DetourError as exc:
            out.append(None)
            notes.append(warn(f"slot {i + 1}: {exc}"))
            continue
        out.append(spans)
        n = sum(1 for _, lab in spans if lab)
        notes.append(f"slot {i + 1}: {n} entities")
    if not any(d for d in model_dirs):
        return out, "⚠ choose at least one fine-tuned model (run an evaluation below if there is none)"
    return out, " · ".join(notes)


def f1_table() -> list[list]:
    """One row per (evaluation, model): mean ± std of the primary test metric over seeds."""
    rows = []
    root = evals_dir()
    if not root.exists():
        return rows
    for res_path in sorted(root.glob("*/results.json"), reverse=True):
        try:
            res = json.loads(res_path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        primary = res.get("primary_metric", "f1")
        for e in res.get("models", []):
            s = (e.get("summary") or {}).get(primary) or {}
            mean, std = s.get("mean"), s.get("std")
            rows.append(
                [
                    res_path.parent.name,
                    res.get("task", ""),
                    e.get("label", ""),
                    primary,
                    None if mean is None else round(100 * mean, 2),
                    None if std is None else round(100 * std, 2),
                    f"{e.get('n_ok', 0)}/{len(e.get('runs', []))}",
                    res.get("status", ""),
                ]
            )
    return rows


F1_HEADERS = ["evaluation", "task", "model", "metric", "mean %", "std %", "seeds ok", "status"]


def run_evaluation(models: list[str], seeds: str, epochs, max_train, progress=None) -> str:
    """Fine-tune the chosen models on the bundled NER demo (or the runner's default data) across seeds."""
    from backend.evaluation.runner import evaluate_models

    try:
        specs = [check_model_spec(m, "model") for m in (models or []) if m]
        if not specs:
            raise DetourError("choose at least one model to evaluate")
        seed_list = [int(s) for s in str(seeds or "0").replace(",", " ").split()]
        res = evaluate_models(
            specs,
            task="ner",
            seeds=seed_list,
            labels=[Path(m).name for m in models if m],
            epochs=int(epochs),
            max_train_examples=int(max_train) if max_train else None,
            progress=(lambda ev: progress(ev.get("fraction", 0), desc=ev.get("message", ""))) if progress else None,
        )
    except (DetourError, ValueError) as exc:
        return warn(exc)
    return f"✓ evaluation {Path(res['out_dir']).name}: {res['status']}"


def build(ctx) -> dict:
    import gradio as gr

    choices = finetuned_choices()
    text = gr.Textbox(value=EXAMPLE, label="Text", lines=3, elem_id="ner-text")
    with gr.Row():
        refresh = gr.Button("Refresh models", scale=0, min_width=160)
        go_btn = gr.Button("Tag entities", variant="primary", elem_id="ner-btn")
    slots, outs = [], []
    with gr.Row(equal_height=False):
        for i in range(SLOTS):
            with gr.Column(min_width=220):
                slots.append(
                    gr.Dropdown(
                        choices=choices,
                        value=choices[i][1] if i < min(2, len(choices)) else None,
                        label=f"Fine-tuned model {i + 1}",
                        elem_id=f"ner-model-{i}",
                        allow_custom_value=True,  # models appear after the page was built; paths are checked
                    )
                )
                outs.append(
                    gr.HighlightedText(
                        label=f"Entities, model {i + 1}",
                        combine_adjacent=False,
                        show_legend=True,
                        elem_id=f"ner-out-{i}",
                    )
                )
    msg = gr.Markdown("")
    gr.Markdown("### Evaluations (test F1, mean over seeds)")
    table = gr.Dataframe(value=f1_table() or None, headers=F1_HEADERS, interactive=False)
    with gr.Accordion("Run an evaluation (NER demo set)", open=False):
        with gr.Row():
            ev_models = gr.Dropdown(choices=model_choices(), multiselect=True, label="Models", allow_custom_value=True)
            ev_seeds = gr.Textbox(value="0", label="Seeds", max_lines=1)
            ev_epochs = gr.Number(value=2, precision=0, label="Epochs (paper: 20)")
            ev_max = gr.Number(value=200, precision=0, label="Max training sentences (blank = all)")
        ev_btn = gr.Button("Run evaluation")
        ev_msg = gr.Markdown("")

    def on_tag(text_, *dirs):
        vals, m = tag(text_, list(dirs))
        return [*vals, m]

    gr.on(
        [go_btn.click, text.submit],
        on_tag,
        inputs=[text, *slots],
        outputs=[*outs, msg],
        concurrency_limit=2,
        api_name="ner_tag",
    )

    def on_refresh():
        ch = finetuned_choices()
        return [*[gr.update(choices=ch) for _ in slots], f1_table() or None]

    refresh.click(on_refresh, outputs=[*slots, table], api_name="ner_refresh")

    def on_eval(models, seeds, epochs, max_train, progress=gr.Progress()):
        m = run_evaluation(models, seeds, epochs, max_train, progress=progress)
        return [m, *on_refresh()]

    ev_btn.click(
        on_eval,
        inputs=[ev_models, ev_seeds, ev_epochs, ev_max],
        outputs=[ev_msg, *slots, table],
        concurrency_limit=1,
        concurrency_id="analysis",
        api_name="ner_evaluate",
    )
    return {"text": text, "outs": outs}

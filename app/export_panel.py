"""Runs tab, Export: the picked finished run as a self-contained folder with its model card, by the backend function
``python -m backend export`` calls (``backend.cards.export.export_model``). The folder is a new one inside the
app's allowed roots (default ``<exports>/<run>``, ``-2`` ... when taken); the card it wrote is shown below."""

from __future__ import annotations

from pathlib import Path

from app import check_path, md_escape, run_folder, warn
from backend.core.errors import DetourError


def export_run(name: str | None, out_text: str | None) -> tuple[str, str]:
    """(message, the exported card's Markdown) for run ``name`` into ``out_text`` (empty: ``<exports>/<name>``)."""
    from backend.cards.export import default_out, export_model

    if not name:
        return "choose a run first", ""
    try:
        run = run_folder(name)
        if run is None:
            raise DetourError(f"run '{name}': not found in the runs folder")
        typed = (out_text or "").strip()
        out = check_path(typed, "export folder", must_exist=False) if typed else default_out(name)
        res = export_model(name, out)
    except (DetourError, OSError) as exc:
        return warn(exc), ""
    card = card_markdown(Path(res["card"]))
    message = (
        f"Exported **{md_escape(name)}** to `{res['out']}` ({', '.join(res['files'])}): "
        f'`{res["auto_class"]}.from_pretrained("{res["out"]}")` loads it; `python -m backend export {name} '
        "--push-to-hub ORG/NAME` uploads it."
    )
    return message, card


def card_markdown(path: Path) -> str:
    """A card for the page: its metadata as a YAML block, then its body (front matter would render as a rule)."""
    from huggingface_hub import ModelCard

    card = ModelCard.load(path)
    return f"```yaml\n{card.data.to_yaml()}\n```\n\n{card.text}"


def build(log_run) -> dict:
    """The Export row under Cancel / Resume; ``log_run``: the Runs tab's picked run."""
    import gradio as gr

    with gr.Row(equal_height=True):
        out = gr.Textbox(label="Export the picked run (finished) to a new folder", placeholder="empty: exports/<run>",
                         elem_id="export-out", scale=3)  # fmt: skip
        button = gr.Button("Export", elem_id="export-run", scale=1)
    message = gr.Markdown("", elem_id="export-msg")
    with gr.Accordion("Model card of the export (README.md)", open=False):
        card = gr.Markdown("", elem_id="export-card")
    button.click(export_run, inputs=[log_run, out], outputs=[message, card], api_name="export")
    return {"out": out, "button": button, "message": message, "card": card}

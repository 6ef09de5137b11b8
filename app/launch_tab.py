"""Launch tab: a form over the experiment config; validation next to each field; live YAML and command preview;
save / load configs; Launch queues the run(s) through ``backend.runs.jobs.submit`` (the CLI's ``prepare_runs``).

This module wires the page; each concern has its module: the form and the config (``launch_form``), the checks
(``launch_checks``), the preview (``launch_preview``), saved and uploaded files (``launch_configs``) and the launch
itself (``launch_submit``). Their names are read here too, where the tests and the benchmarks find them."""

from __future__ import annotations

from app import TYPED_PICKER, model_choices, warn
from app.launch_checks import CHECKING_CORPUS, check_corpus, corpus_pending, validate_form  # noqa: F401
from app.launch_configs import load_config_file, save_config, saved_configs, store_upload  # noqa: F401
from app.launch_form import (  # noqa: F401
    FIELD_BY_KEY,
    FIELDS,
    KEYS,
    RECIPE_GROUP,
    RECIPE_KEYS,
    Field,
    config_to_values,
    default_values,
    free_name,
    listed,
    proposed_name,
    recipe_fields,
    recipe_title,
    unread_keys,
    values_to_config,
)
from app.launch_preview import PREVIEW, STALE, keep_last_preview  # noqa: F401
from app.launch_submit import TARGETS, launch  # noqa: F401
from backend.core.errors import DetourError
from backend.engine.config import default_config  # noqa: F401

# --- UI -----------------------------------------------------------------------------------------


def build(ctx) -> dict:
    import gradio as gr

    from app.refresh import keep_fresh

    values = default_values()
    first = validate_form(values, deep=False)
    comps: dict[str, gr.components.Component] = {}
    errs: dict[str, gr.components.Component] = {}

    def make(f: Field, v):
        if f.kind == "check":
            c = gr.Checkbox(value=bool(v), label=f.label, info=f.info)
        elif f.kind == "radio":
            c = gr.Radio(choices=f.choices, value=v, label=f.label, info=f.info)
        elif f.kind == "multi":
            c = gr.Dropdown(choices=f.choices, value=list(v or []), multiselect=True, label=f.label, info=f.info)
        elif f.kind == "model":
            c = gr.Dropdown(choices=model_choices(), value=v, label=f.label, info=f.info, allow_custom_value=True,
                            elem_classes=TYPED_PICKER)  # fmt: skip
        elif f.kind == "corpus":
            c = gr.Dropdown(choices=["demo"], value=v, label=f.label, info=f.info, allow_custom_value=True,
                            elem_classes=TYPED_PICKER)  # fmt: skip
        elif f.kind == "int":
            c = gr.Number(value=v, label=f.label, info=f.info, precision=0)
        elif f.kind == "float":
            c = gr.Number(value=v, label=f.label, info=f.info, step=0.01)
        else:
            c = gr.Textbox(value=v, label=f.label, info=f.info, max_lines=1)
        comps[f.key] = c
        errs[f.key] = gr.Markdown("", visible=False, elem_classes=["field-error"], container=True)

    vals = dict(zip(KEYS, values, strict=True))
    upload = upload_msg = recipe_head = None
    cols: dict[str, gr.Column] = {}  # a recipe key's cell: shown only for the recipes that read it
    with gr.Row():
        with gr.Column(scale=3):
            gr.Markdown("### Experiment")
            groups = [
                ("Run", ["name", "recipe", "seeds", "train.precision", "logging.report_to"]),
                ("Model and data", ["model.name", "model.trust_remote_code", "data.corpus"]),
                (RECIPE_GROUP, [f.key for f in FIELDS if f.key in RECIPE_KEYS and not f.advanced]),
                ("Optimisation", ["train.lr", "train.warmup_tokens", "train.batch_size", "train.seq_len"]),
            ]
            placed = {k for _, ks in groups for k in ks}
            rest = [f.key for f in FIELDS if not f.advanced and f.key not in placed]
            groups += [("More", rest)] if rest else []  # a key added to the schema's form shows up even here
            hidden0 = unread_keys(vals["recipe"], False)
            for title, keys in groups:
                with gr.Group():
                    head = gr.Markdown(recipe_title(vals["recipe"], False) if title == RECIPE_GROUP else f"**{title}**")
                    recipe_head = head if title == RECIPE_GROUP else recipe_head
                    with gr.Row(equal_height=True):  # cells stretch to the row's tallest: no ragged grey gaps
                        for k in keys:
                            with gr.Column(min_width=200, visible=k not in hidden0) as cell:
                                make(FIELD_BY_KEY[k], vals[k])
                                if k in RECIPE_KEYS:  # only a recipe key's cell follows the recipe (show_recipe)
                                    cols[k] = cell
                                if k == "data.corpus":  # the upload sits under the corpus it fills in
                                    upload = gr.File(
                                        label=f"…or upload a corpus (≤ {ctx.max_upload_bytes // 2**20} MB)",
                                        file_types=[".txt", ".jsonl", ".csv", ".parquet"],
                                        height=140,
                                        elem_id="corpus-upload",
                                    )
                                    upload_msg = gr.Markdown("")
            with gr.Accordion("Advanced", open=False):
                with gr.Row(equal_height=True):
                    for f in FIELDS:
                        if f.advanced:
                            with gr.Column(min_width=200, visible=f.key not in hidden0) as cell:
                                make(f, vals[f.key])
                            if f.key in RECIPE_KEYS:
                                cols[f.key] = cell
            with gr.Row():
                target = gr.Radio(list(TARGETS), value=next(iter(TARGETS)), label="Run on", elem_id="launch-target",
                                  info="Slurm: one sbatch job per run, with the Advanced Slurm settings")  # fmt: skip
                launch_btn = gr.Button("Launch", variant="primary", elem_id="launch-btn")
                save_btn = gr.Button("Save config")
                overwrite = gr.Checkbox(False, label="Replace a saved config of the same name", elem_id="save-replace")
            # what the last launch did, apart from the form's check: a check answering after a launch (one still
            # pending when Launch was pressed, or the corpus read) rewrites the check's status, never this
            launched = gr.Markdown("", elem_id="launch-result")
            status = gr.Markdown(first["message"], elem_id="launch-status")
            saved_file = gr.File(label="Saved config", visible=False, interactive=False)
            with gr.Accordion("Load a config", open=False):
                with gr.Row():
                    load_saved = gr.Dropdown(
                        choices=saved_configs(), label="Saved configs", allow_custom_value=True, elem_id="saved-configs"
                    )
                    load_upload = gr.File(
                        label="…or upload a YAML", file_types=[".yaml", ".yml"], height=140, elem_id="config-upload"
                    )
        with gr.Column(scale=2) as right:
            gr.Markdown("### Preview")
            py_cmd = gr.Code(
                first["python"], label="CLI command", language="shell", lines=2, interactive=False, elem_id="cmd-python"
            )
            acc_cmd = gr.Code(
                first["accelerate"], label="accelerate launch form", language="shell", lines=2, interactive=False
            )
            yaml_box = gr.Code(
                first["yaml"], label="config.yaml", language="yaml", lines=24, interactive=False, elem_id="yaml-preview"
            )

    inputs = [comps[k] for k in KEYS]
    err_outputs = [errs[k] for k in KEYS]
    last_ok = gr.State({k: first[k] for k in PREVIEW})  # what the preview shows while a field is invalid
    base = gr.State(None)  # a loaded config: the keys the form does not show come from it

    def render(res: dict) -> list:
        ups = []
        for k in KEYS:
            m = res["errors"].get(k)
            ups.append(gr.update(value=warn(m) if m else "", visible=bool(m)))
        return [res["yaml"], res["python"], res["accelerate"], res["message"], *ups]

    def on_change(*vals):
        *vals, last, loaded = vals
        res = validate_form(list(vals), base=loaded)
        return [*render(keep_last_preview(res, last)), {k: res[k] for k in PREVIEW} if res["ok"] else last]

    preview_outputs = [yaml_box, py_cmd, acc_cmd, status, *err_outputs]
    # .change, not .input: a value set without typing (a paste, a loaded config, an upload, a script) is checked too
    validate_kw = dict(
        inputs=[*inputs, last_ok, base],
        outputs=[*preview_outputs, last_ok],
        show_progress="hidden",
        concurrency_limit=1,
        concurrency_id="validate",
    )
    # the form's own plumbing (its check as one types, the corpus read, save, load, uploads, the proposed name) is
    # callable by its name but left out of the API page: each lists the form's 60 fields, 45% of the page's bytes
    internal = {"api_visibility": "undocumented"}
    checked = gr.on([c.change for c in inputs], on_change, trigger_mode="always_last", api_name="validate",
                    **validate_kw, **internal)  # fmt: skip

    def on_corpus(*vals):
        """After a check that left the corpus pending ("checking corpus…"): read it, then show the form's check
        again, with any problem under the Corpus field. Nothing to do otherwise."""
        *form_vals, _, loaded = vals
        try:
            cfg, _ = values_to_config(list(form_vals), loaded)
        except (DetourError, ValueError):
            return [gr.skip()] * len(validate_kw["outputs"])
        if not corpus_pending(cfg):
            return [gr.skip()] * len(validate_kw["outputs"])
        check_corpus(cfg)
        return on_change(*vals)

    checked.then(on_corpus, **{**validate_kw, "concurrency_id": "corpus"}, **internal)
    with right:  # the timeline (editor and drawing) under the preview
        from app import timeline_editor

        timeline = timeline_editor.build_launch(inputs, values, base, values_to_config, comps["recipe"],
                                                revalidate=(on_change, validate_kw),
                                                total=comps["train.total_tokens"])  # fmt: skip

    def show_recipe(recipe, loaded):
        """The recipe's own fields, and no other recipe's (``recipe_fields``), under a heading naming it."""
        shown = recipe_fields(recipe, loaded)
        return [recipe_title(recipe, listed(loaded)), *[gr.update(visible=shown[k]) for k in cols]]

    for event in (comps["recipe"].change, base.change):
        event(show_recipe, inputs=[comps["recipe"], base], outputs=[recipe_head, *cols.values()],
              show_progress="hidden", api_visibility="private")  # fmt: skip

    def on_launch(*vals):
        """Queued: the result under Launch, and the name moves on to a free one (its check redraws the preview).
        Refused: the form's errors under their fields, and the reason under Launch too."""
        *vals, loaded, last, where = vals
        res = launch(list(vals), ctx.max_concurrent, base=loaded, last=last, target=where)
        if res.get("runs"):
            preview = [gr.skip()] * len(preview_outputs)
            return [*preview, gr.update(value=free_name(res["cfg"]["name"])), res["message"]]
        return [*render(res), gr.update(), res["message"]]

    launch_btn.click(
        on_launch,
        inputs=[*inputs, base, last_ok, target],
        outputs=[*preview_outputs, comps["name"], launched],
        concurrency_limit=1,
        api_name="launch",
    )

    def on_save(*vals):
        *vals, loaded, replace = vals
        path, msg = save_config(list(vals), base=loaded, overwrite=bool(replace))
        return (
            gr.update(value=str(path) if path else None, visible=bool(path)),
            msg,
            gr.update(choices=saved_configs()),
            False if path else gr.skip(),  # a replace is asked for once: the next save of that name asks again
        )

    save_btn.click(
        on_save,
        inputs=[*inputs, base, overwrite],
        outputs=[saved_file, status, load_saved, overwrite],
        api_name="save_config",
        **internal,
    )
    keep_fresh(lambda: gr.update(choices=saved_configs()), [load_saved])  # a config saved since the page was built
    # the form was built with the app: a page opened after runs were made proposes a name still free
    from gradio.context import Context

    if Context.root_block is not None:
        Context.root_block.load(proposed_name, inputs=[comps["name"]], outputs=[comps["name"]], queue=False,
                                show_progress="hidden", api_name="proposed_name", **internal)  # fmt: skip
    load_saved.focus(lambda: gr.update(choices=saved_configs()), outputs=[load_saved], queue=False,
                     api_visibility="private")  # fmt: skip

    def on_load(path):
        vals_, msg, cfg = load_config_file(path)
        if vals_ is None:
            return [*[gr.update() for _ in KEYS], msg, gr.update()]
        return [*vals_, msg, cfg]

    # the fields' .change events validate what a load or an upload fills in (over the loaded config)
    load_saved.input(on_load, inputs=[load_saved], outputs=[*inputs, status, base], api_name="load_saved_config",
                     **internal)  # fmt: skip
    load_upload.upload(on_load, inputs=[load_upload], outputs=[*inputs, status, base], api_name="load_config",
                       **internal)  # fmt: skip

    def on_upload(path):
        new, msg = store_upload(path, ctx.max_upload_bytes)
        return (gr.update(value=new, choices=["demo", new]) if new else gr.update()), msg

    upload.upload(on_upload, inputs=[upload], outputs=[comps["data.corpus"], upload_msg], api_name="upload_corpus",
                  **internal)  # fmt: skip

    def refresh_models():
        return gr.update(choices=model_choices())

    comps["model.name"].focus(refresh_models, outputs=[comps["model.name"]], queue=False, api_visibility="private")
    return {
        "inputs": comps,
        "errors": errs,
        "status": status,
        "launched": launched,
        "yaml": yaml_box,
        "python": py_cmd,
        "launch": launch_btn,
        "load": on_change,
        "timeline": timeline,
    }

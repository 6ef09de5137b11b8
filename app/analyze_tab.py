"""Analyze tab: layer x layer CKA between two models or runs (optional seed-noise control pair), the divergence
profile with the control ratio, the divergence trajectory over a run's checkpoints, and per-layer weight change.
Thin wrappers over ``backend.analysis.api`` (the functions behind ``python -m backend cka``)."""

from __future__ import annotations

from app import check_model_spec, check_path, model_choices, warn
from backend.analysis import plots
from backend.core.errors import DetourError
from backend.core.paths import DEFAULT_MODEL, DEMO_CORPUS

MAX_TEXTS = 500


def _texts(src: str | None) -> str:
    src = (src or "").strip()
    if not src or src == "demo":
        return str(DEMO_CORPUS)
    return str(check_path(src, "texts"))


def _n(v, lo: int, hi: int, what: str) -> int:
    try:
        n = int(v)
    except (TypeError, ValueError) as exc:
        raise DetourError(f"{what}: expected a whole number") from exc
    if not lo <= n <= hi:
        raise DetourError(f"{what}: {n} is outside {lo}-{hi}")
    return n


def compute_cka(
    a: str, b: str, ctrl_a: str | None, ctrl_b: str | None, texts: str | None, n_texts=100, max_len=128, progress=None
) -> tuple:
    """-> (heatmap, divergence figure, table rows [layer, CKA, divergence, control, ratio], message)."""
    from backend.analysis.api import cka_between

    try:
        ma, mb = check_model_spec(a, "model A"), check_model_spec(b, "model B")
        control = None
        ca_, cb_ = (ctrl_a or "").strip(), (ctrl_b or "").strip()
        if ca_ and not cb_:
            raise DetourError("control: give 'MLM seed 2' (an MLM run like B with another seed)")
        if cb_:  # the paper's control: (MLM seed 1 = B, MLM seed 2); seed 1 defaults to B
            control = (check_model_spec(ca_ or b, "control seed 1"), check_model_spec(cb_, "control seed 2"))
        res = cka_between(
            ma,
            mb,
            _texts(texts),
            n_texts=_n(n_texts, 2, MAX_TEXTS, "texts"),
            max_len=_n(max_len, 8, 512, "max length"),
            control=control,
            progress=progress,
        )
    except DetourError as exc:
        return None, None, [], warn(exc)
    heat = plots.cka_heatmap(res["matrix"], res["layers_a"], res["layers_b"], a, b)
    div = plots.divergence_figure(res["layers_a"], res["divergence"], res.get("control_divergence"), res.get("ratio"))
    rows = []
    for i, layer in enumerate(res["layers_a"]):
        ctrl = res.get("control_divergence")
        ratio = res.get("ratio")
        rows.append(
            [
                layer,
                round(res["cka_diagonal"][i], 5),
                round(res["divergence"][i], 5),
                round(ctrl[i], 5) if ctrl else None,
                round(ratio[i], 2) if ratio and ratio[i] is not None else None,
            ]
        )
    inp = res["inputs"]
    msg = f"✓ CKA on {inp['n']} texts (max length {inp['max_len_effective']}) in {res['elapsed_s']:.1f} s"
    if res.get("notes"):
        msg += "\n\n" + "\n".join(f"- {n}" for n in res["notes"])
    return heat, div, rows, msg


def compute_trajectory(
    run: str, reference: str | None, texts: str | None, n_texts=50, max_len=128, progress=None
) -> tuple:
    """-> (divergence-over-checkpoints figure, weight-change-over-checkpoints figure or None, message)."""
    from backend.analysis.api import cka_trajectory

    try:
        run_spec = check_model_spec(run, "run")
        from pathlib import Path

        if not (Path(run_spec) / "config.yaml").exists():
            raise DetourError(f"run: '{run}' is not a run directory")
        ref = (reference or "").strip()
        if not ref:
            from backend.engine.rundir import read_config

            ref = read_config(run_spec)["model"]["name"]
        res = cka_trajectory(
            run_spec,
            check_model_spec(ref, "reference"),
            _texts(texts),
            n_texts=_n(n_texts, 2, MAX_TEXTS, "texts"),
            max_len=_n(max_len, 8, 512, "max length"),
            progress=progress,
        )
    except DetourError as exc:
        return None, None, warn(exc)
    tags = [f"{p.get('tag') or ''} {p.get('phase') or ''}".strip() for p in res["points"]]
    fig = plots.trajectory_figure(res["tokens_seen"], res["divergence"], res["layers"], tags=tags)
    wfig = None
    if res.get("weight_change") and all(w is not None for w in res["weight_change"]):
        wl = res["weight_layers"]
        rows = [[w.get(k) if isinstance(w, dict) else w[i] for i, k in enumerate(wl)] for w in res["weight_change"]]
        wfig = plots.trajectory_figure(res["tokens_seen"], rows, wl, tags=tags)
        wfig.update_layout(
            title={"text": "Relative weight change from the reference across checkpoints"}, yaxis_title="‖ΔW‖ / ‖W‖"
        )
    return fig, wfig, f"✓ {len(res['points'])} checkpoints against {ref} in {res['elapsed_s']:.1f} s"


def compute_weight_change(a: str, b: str) -> tuple:
    from backend.analysis.api import weight_change_between

    try:
        res = weight_change_between(check_model_spec(a, "model A"), check_model_spec(b, "model B"))
    except DetourError as exc:
        return None, warn(exc)
    names = ["embeddings", *res["layer_names"], "head"]
    values = [res["embeddings"], *res["layers"], res["head"]]
    fig = plots.weight_change_figure(names, values, f"({b} vs {a})")
    return fig, f"✓ total relative change {res['total']:.4f}"


def build(ctx) -> dict:
    import gradio as gr

    choices = model_choices()
    runs = [c for c in choices if c != DEFAULT_MODEL]
    with gr.Row():
        a = gr.Dropdown(
            choices=choices,
            value=runs[0] if runs else DEFAULT_MODEL,
            label="Model A (rows)",
            allow_custom_value=True,
            elem_id="an-a",
        )
        b = gr.Dropdown(
            choices=choices, value=DEFAULT_MODEL, label="Model B (columns)", allow_custom_value=True, elem_id="an-b"
        )
    with gr.Accordion("Seed-noise control (optional): ratio = div(A, B) / div(MLM seed 2, MLM seed 1)", open=False):
        with gr.Row():
            ca = gr.Dropdown(choices=choices, value=None, label="MLM seed 1 (blank = model B)", allow_custom_value=True)
            cb = gr.Dropdown(
                choices=choices, value=None, label="MLM seed 2 (B's recipe, another seed)", allow_custom_value=True
            )
    with gr.Row():
        texts = gr.Textbox(value="demo", label="Texts ('demo' or a .txt/.jsonl file in an allowed folder)", max_lines=1)
        n_texts = gr.Number(value=100, precision=0, label=f"texts (≤ {MAX_TEXTS}; paper: 500)")
        max_len = gr.Number(value=128, precision=0, label="max length (paper: 512)")
    with gr.Row():
        cka_btn = gr.Button("Compute CKA", variant="primary", elem_id="an-cka-btn")
        wc_btn = gr.Button("Weight change A → B")
    msg = gr.Markdown("", elem_id="an-msg")
    with gr.Row():
        heat = gr.Plot(label="CKA heatmap", elem_id="an-heat")
        div = gr.Plot(label="Divergence per layer", elem_id="an-div")
    table = gr.Dataframe(
        headers=["layer", "CKA", "divergence", "control", "ratio"], interactive=False, label="Per layer"
    )
    wc_plot = gr.Plot(label="Weight change per layer")
    gr.Markdown("### Trajectory over a run's checkpoints")
    with gr.Row():
        run = gr.Dropdown(choices=runs, value=runs[0] if runs else None, label="Run", allow_custom_value=True)
        ref = gr.Dropdown(
            choices=choices, value=None, label="Reference (blank = the run's starting model)", allow_custom_value=True
        )
        traj_btn = gr.Button("Trajectory")
    traj_msg = gr.Markdown("")
    with gr.Row():
        traj_plot = gr.Plot(label="Divergence across checkpoints")
        traj_w = gr.Plot(label="Weight change across checkpoints")

    def on_cka(a_, b_, ca_, cb_, t_, n_, l_, progress=gr.Progress()):
        return compute_cka(a_, b_, ca_, cb_, t_, n_, l_, progress=lambda f, m="": progress(f, desc=m))

    def on_traj(r_, ref_, t_, n_, l_, progress=gr.Progress()):
        return compute_trajectory(r_, ref_, t_, n_, l_, progress=lambda f, m="": progress(f, desc=m))

    cka_btn.click(
        on_cka,
        inputs=[a, b, ca, cb, texts, n_texts, max_len],
        outputs=[heat, div, table, msg],
        concurrency_limit=1,
        concurrency_id="analysis",
        api_name="cka",
    )
    wc_btn.click(
        compute_weight_change,
        inputs=[a, b],
        outputs=[wc_plot, msg],
        concurrency_limit=1,
        concurrency_id="analysis",
        api_name="weight_change",
    )
    traj_btn.click(
        on_traj,
        inputs=[run, ref, texts, n_texts, max_len],
        outputs=[traj_plot, traj_w, traj_msg],
        concurrency_limit=1,
        concurrency_id="analysis",
        api_name="trajectory",
    )
    for d in (a, b, ca, cb, ref):
        d.focus(lambda: gr.update(choices=model_choices()), outputs=[d], queue=False, api_visibility="private")
    run.focus(
        lambda: gr.update(choices=[c for c in model_choices() if c != DEFAULT_MODEL]),
        outputs=[run],
        queue=False,
        api_visibility="private",
    )
    return {"heat": heat, "div": div}

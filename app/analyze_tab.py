"""Analyze tab: layer x layer CKA between two models or runs (optional seed-noise control pair), the divergence
profile with the control ratio, the divergence trajectory over a run's checkpoints, and per-layer weight change.
Thin wrappers over ``backend.analysis.api`` (the functions behind ``python -m backend cka``)."""

from __future__ import annotations

from pathlib import Path

from app import (
    TYPED_PICKER,
    check_model_spec,
    check_path,
    follow_defaults,
    labelled,
    labelled_choices,
    md_escape,
    model_choices,
    model_name,
    model_ref,
    newest_pair,
    trained_runs,
    warn,
)
from backend.analysis import plots
from backend.analysis.measures import DEFAULT_MEASURE, MEASURES, SHORT
from backend.core.errors import DetourError
from backend.core.paths import DEFAULT_MODEL, DEMO_CORPUS

MAX_TEXTS = 500
EXPLAIN = """
- **CKA** (linear centered kernel alignment): both models read the same texts, and CKA says how alike two layers'
  hidden states are, ignoring rotation and scale. 1 = the same representation, 0 = unrelated ones. The heatmap
  pairs every layer of A with every layer of B.
- **Measure.** *Debiased CKA* (default) uses the unbiased HSIC estimator: with few texts for the hidden size (100
  texts against 256–768 dimensions here) the published *linear CKA* reads high even for unrelated layers; the
  debiased one reads ~0 for them. Pick *linear (biased)* to reproduce the paper's numbers, *Procrustes* to
  cross-check with a second family of measures.
- **Shuffled baseline**: the same measure with the texts shuffled between A and B (each text of A against another
  text of B): what "unrelated" scores at this number of texts. It is in the heatmap's caption, its hover and the
  table.
- **Divergence** = 1 − similarity of the *same* layer in A and B: how far training moved that layer apart
  (0 = unchanged).
- **Seed-noise control** (optional): two MLM runs that differ only in their random seed drift apart a little too.
  **Ratio** = divergence(A, B) / divergence(MLM seed 2, MLM seed 1): ≫ 1 means the objective moved the layer,
  ≈ 1 means no more than that noise. The paper finds 5–44× in the low layers for CLM detour vs MLM; for that
  ratio put the detour run in A and the MLM run in B.
- **Weight change A → B** = ‖W_B − W_A‖ / ‖W_A‖ per block: how far B's weights are from A's, relative to A's.
"""
FEW_CHECKPOINTS = 2  # fewer checkpoints than this in the first 80% of a run's tokens: the curve has no shape


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


def _measure(v: str | None) -> str:
    """The measure key from the dropdown's value (its label or its key; blank = the default)."""
    v = (v or "").strip()
    if not v:
        return DEFAULT_MEASURE
    for label, key in MEASURE_CHOICES:
        if v in (key, label):
            return key
    raise DetourError(f"measure: got {v!r}; use one of {', '.join(MEASURES)}")


MEASURE_CHOICES = [(SHORT[k], k) for k in MEASURES]  # (label, value) for the dropdown


def compute_cka(
    a: str,
    b: str,
    ctrl_a: str | None,
    ctrl_b: str | None,
    texts: str | None,
    n_texts=100,
    max_len=128,
    measure: str | None = DEFAULT_MEASURE,
    progress=None,
) -> tuple:
    """-> (heatmap, divergence figure, table rows [layer, similarity, divergence, control, ratio, shuffled
    baseline], message)."""
    from backend.analysis.api import cka_between

    a, b = model_name(a), model_name(b)  # the chart's names: never a picker's label
    try:
        ma, mb = model_ref(a, "model A"), model_ref(b, "model B")  # once per action: the backend takes them
        if ma.folder == mb.folder:
            raise DetourError(f"model A and model B are both '{a}': choose two different models")
        control = None
        ca_, cb_ = (ctrl_a or "").strip(), (ctrl_b or "").strip()
        if ca_ and not cb_:
            raise DetourError("control: give 'MLM seed 2' (an MLM run like B with another seed)")
        if cb_:  # the paper's control: (MLM seed 1 = B, MLM seed 2); seed 1 defaults to B
            control = (model_ref(ca_ or b, "control seed 1"), model_ref(cb_, "control seed 2"))
        m = _measure(measure)
        res = cka_between(
            ma,
            mb,
            _texts(texts),
            n_texts=_n(n_texts, 1, MAX_TEXTS, "texts"),
            max_len=_n(max_len, 8, 512, "max length"),
            control=control,
            measure=m,
            progress=progress,
        )
    except DetourError as exc:
        return None, None, [], warn(exc)
    described = dict(measure=res["measure"], samples=res["samples"], hidden_sizes=res["hidden_sizes"])
    heat = plots.cka_heatmap(
        res["matrix"], res["layers_a"], res["layers_b"], a, b, **described, baseline=res.get("baseline")
    )
    caption = plots.similarity_caption(**described)
    if res.get("divergence") is None:  # different depths: no layer-by-layer match (the heatmap still shows)
        div = plots.divergence_figure([], [], measure=res["measure"], caption=caption, models=(a, b))
        layers = []
    else:
        div = plots.divergence_figure(
            res["layers_a"],
            res["divergence"],
            res.get("control_divergence"),
            res.get("ratio"),
            measure=res["measure"],
            caption=caption,
            models=(a, b),
        )
        layers = res["layers_a"]
    rows = []
    base_diag = (res.get("baseline") or {}).get("diagonal")
    for i, layer in enumerate(layers):
        ctrl = res.get("control_divergence")
        ratio = res.get("ratio")
        rows.append(
            [
                layer,
                _round(res["cka_diagonal"][i], 5),
                _round(res["divergence"][i], 5),
                _round(ctrl[i], 5) if ctrl else None,
                _round(ratio[i], 2) if ratio else None,
                _round(base_diag[i], 5) if base_diag else None,
            ]
        )
    inp = res["inputs"]
    msg = (
        f"✓ {SHORT[res['measure']]} between A = {md_escape(labelled(a))} and B = {md_escape(labelled(b))} on "
        f"{inp['n']} texts (max length {inp['max_len_effective']}) in {res['elapsed_s']:.1f} s — "
        f"{md_escape(plots.similarity_caption(**described, baseline=res.get('baseline')))}"
    )
    if res.get("notes"):
        msg += "\n\n" + "\n".join(f"- {n}" for n in res["notes"])
    return heat, div, rows, msg


def _round(v, digits: int):
    return None if v is None else round(v, digits)


def default_models() -> tuple[str | None, str | None, str]:
    """(A, B, note) by the rule every tab shares (``app.newest_pair``): the newest pair's detour run as A and its
    MLM sibling as B (the pairing the seed-noise ratio expects); without a pair, the newest run against the base
    model it started from. Without a second model B is None and the note says why: only one model, or which others
    the pickers list (a cached hub model on a fresh install is not picked for the user: it may be a large one)."""
    a, b, _ = newest_pair()
    choices = model_choices()
    if a is None:
        a = DEFAULT_MODEL if DEFAULT_MODEL in choices else None
    if b is None or b == a:
        others = [model_name(c) for c in choices if c != a]
        if others:
            listed = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
            return (
                a,
                None,
                f"Pick model B to compare with A: the pickers list {listed}; or train a run on the "
                "Launch tab to compare it with its base.",
            )
        only = a or "no model"
        return a, None, f"Only one model is available ({only}): train a run on the Launch tab to compare it."
    return a, b, ""


def run_choices(choices: list[str] | None = None) -> list[str]:
    """The trajectory's choices: the runs among the models the tabs offer (a bundled or cached hub model has no
    checkpoints to follow)."""
    runs = {r.name for r in trained_runs()}
    return [c for c in (model_choices() if choices is None else choices) if c in runs]


def default_run(a: str | None, runs: list[str]) -> str | None:
    """The trajectory's default run: model A when it is a run (the newest detour run), else the newest run."""
    return a if a in runs else (runs[0] if runs else None)


NO_RUNS = (
    "**No runs yet.** The trajectory follows a run's saved checkpoints. Train one on the **Launch** tab (recipe "
    "`pair` for a CLM-detour run and its MLM sibling), then press **Refresh models**."
)


def compute_trajectory(
    run: str,
    reference: str | None,
    texts: str | None,
    n_texts=50,
    max_len=128,
    measure: str | None = DEFAULT_MEASURE,
    progress=None,
) -> tuple:
    """-> (divergence-over-checkpoints figure, weight-change-over-checkpoints figure or None, message).

    The run's starting model is the point at 0 tokens; a run with too few checkpoints gets a hint to keep more."""
    from backend.analysis.api import cka_trajectory
    from backend.engine.rundir import read_config, read_status

    if not (run or "").strip() and not [c for c in model_choices() if c != DEFAULT_MODEL]:
        return None, None, NO_RUNS
    try:
        run_spec = check_model_spec(run, "run")
        if not (Path(run_spec) / "config.yaml").exists():
            raise DetourError(f"run: '{run}' is not a run directory")
        cfg = read_config(run_spec)
        ref = (reference or "").strip() or cfg["model"]["name"]
        ref_spec = check_model_spec(ref, "reference")
        m = _measure(measure)
        texts_src, n, length = (
            _texts(texts),
            _n(n_texts, 1, MAX_TEXTS, "texts"),
            _n(max_len, 8, 512, "max length"),
        )
        res = cka_trajectory(run_spec, ref_spec, texts_src, n_texts=n, max_len=length, measure=m, progress=progress)
        start, note = start_point(cfg["model"]["name"], ref_spec, res, texts_src, n, length)
    except DetourError as exc:
        return None, None, warn(exc)
    points = [{"tokens_seen": 0, "tag": "start", "phase": cfg["model"]["name"]}] if start else []
    points += res["points"]
    x = [p.get("tokens_seen") for p in points]
    tags = [f"{p.get('tag') or ''} {p.get('phase') or ''}".strip() for p in points]
    div = ([start["divergence"]] if start else []) + res["divergence"]
    caption = plots.similarity_caption(res["measure"], res["samples"], res["hidden_sizes"])
    # each chart names its run and reference: a trajectory drawn for another run stays on screen beside new results
    subject = f"{plots.fit_label(model_name(run))} from {plots.fit_label(model_name(ref))}"
    fig = plots.trajectory_figure(x, div, res["layers"], tags=tags, measure=res["measure"], caption=caption,
                                  title=f"Divergence of {subject}")  # fmt: skip
    wfig = None
    if res.get("weight_change") and all(w is not None for w in res["weight_change"]):
        weights = ([start["weight_change"]] if start else []) + res["weight_change"]
        have = [i for i, w in enumerate(weights) if w is not None]  # the start's may be missing (other shapes)
        wfig = plots.trajectory_figure(
            [x[i] for i in have], [weights[i] for i in have], res["weight_layers"], tags=[tags[i] for i in have]
        )
        wfig.update_layout(title={"text": f"Weight change of {subject}"}, yaxis_title="‖ΔW‖ / ‖W‖")
    msg = f"✓ {len(res['points'])} checkpoints against {md_escape(ref)} in {res['elapsed_s']:.1f} s"
    hint = few_checkpoints_hint(res["points"], cfg, read_status(run_spec))
    return fig, wfig, "\n\n".join(m for m in (msg, note, hint) if m)


def start_point(
    base: str, ref_spec: str, traj: dict, texts: str, n_texts: int, max_len: int
) -> tuple[dict | None, str]:
    """The run's starting model as the trajectory's point at 0 tokens: ``{"divergence", "weight_change"}``
    against the reference (shaped like the points of ``traj``), and a note when it cannot be had. Against
    itself both are zero by definition, so nothing is computed."""
    from backend.analysis.api import cka_between, weight_change_between

    try:
        base_spec = check_model_spec(base, "the run's starting model")
        if base_spec == ref_spec:
            return {"divergence": [0.0] * len(traj["layers"]), "weight_change": [0.0] * len(traj["weight_layers"])}, ""
        res = cka_between(
            base_spec, ref_spec, texts, n_texts=n_texts, max_len=max_len, measure=traj["measure"], baseline=False
        )
        if len(res["layers_a"]) != len(traj["layers"]) or res.get("divergence") is None:
            return None, f"no point at 0 tokens: '{md_escape(base)}' and the reference differ in depth"
        try:
            weights = weight_change_between(ref_spec, base_spec)["layers"]
        except DetourError:
            weights = None
        return {"divergence": res["divergence"], "weight_change": weights}, ""
    except DetourError as exc:
        return None, f"no point at 0 tokens: {md_escape(exc)}"


def few_checkpoints_hint(points: list[dict], cfg: dict, status: dict) -> str:
    """A hint when fewer than ``FEW_CHECKPOINTS`` checkpoints fall in the first 80% of the run's tokens: the
    trajectory then only shows where the run ended, not when its layers moved."""
    total = status.get("total_tokens") or max((p.get("tokens_seen") or 0 for p in points), default=0)
    early = [p for p in points if p.get("tokens_seen") is not None and p["tokens_seen"] <= 0.8 * total]
    if not total or len(early) >= FEW_CHECKPOINTS:
        return ""
    log = cfg.get("logging", {})
    steps = status.get("total_steps")
    every = max(1, (steps or 10) // 10)
    found = f"Only {len(early)} checkpoint{'s' if len(early) > 1 else ''}" if early else "No checkpoint"
    return (
        f"ℹ {found} in the first 80% of this run's {total:,} tokens, so the curve shows where the run ended, "
        f"not when its layers moved. To see the path, train with a lower "
        f"`logging.checkpoint_every` (this run: {log.get('checkpoint_every')} steps"
        + (f" of {steps}" if steps else "")
        + f"; e.g. {every}) and a higher `logging.keep_checkpoints` (this run: {log.get('keep_checkpoints')}; "
        f"e.g. 10): older periodic checkpoints are deleted, phase ends are always kept."
    )


def compute_weight_change(a: str, b: str) -> tuple:
    """-> (figure, message): ``||W_B - W_A|| / ||W_A||`` per layer, the change from A (the reference) to B."""
    from backend.analysis.api import weight_change_between

    a, b = model_name(a), model_name(b)
    try:
        res = weight_change_between(model_ref(a, "model A"), model_ref(b, "model B"))
    except DetourError as exc:
        return None, warn(exc)
    names = ["embeddings", *res["layer_names"], "head"]
    values = [res["embeddings"], *res["layers"], res["head"]]
    fig = plots.weight_change_figure(names, values, a, b)
    return fig, f"✓ weight change from A to B, relative to A: {res['total']:.4f} over all parameters"


def build(ctx) -> dict:
    import gradio as gr

    from app.refresh import keep_fresh

    choices = model_choices()
    a0, b0, note0 = default_models()
    runs = run_choices(choices)
    shown = labelled_choices(choices)  # a run still training says so
    with gr.Accordion("What CKA, divergence and the seed-noise control mean", open=not runs, elem_id="an-explain"):
        gr.Markdown(EXPLAIN)
    picker = {"allow_custom_value": True, "elem_classes": TYPED_PICKER}  # a typed name is a value
    with gr.Row():
        a = gr.Dropdown(choices=shown, value=a0, label="Model A (rows)", elem_id="an-a", **picker)
        b = gr.Dropdown(choices=shown, value=b0, label="Model B (columns)", elem_id="an-b", **picker)
    with gr.Accordion("Seed-noise control (optional): ratio = div(A, B) / div(MLM seed 2, MLM seed 1)", open=False):
        with gr.Row():
            ca = gr.Dropdown(choices=shown, value=None, label="MLM seed 1 (blank = model B)", **picker)
            cb = gr.Dropdown(choices=shown, value=None, label="MLM seed 2 (B's recipe, another seed)", **picker)
    with gr.Row():
        texts = gr.Textbox(value="demo", label="Texts ('demo' or a .txt/.jsonl file in an allowed folder)", max_lines=1)
        n_texts = gr.Number(value=100, precision=0, label=f"texts (≤ {MAX_TEXTS}; paper: 500)")
        max_len = gr.Number(value=128, precision=0, label="max length (paper: 512)")
        measure = gr.Dropdown(
            choices=MEASURE_CHOICES,
            value=DEFAULT_MEASURE,
            label="measure (paper: linear, biased)",
            elem_id="an-measure",
        )
    with gr.Row():
        cka_btn = gr.Button("Compute CKA", variant="primary", elem_id="an-cka-btn")
        wc_btn = gr.Button("Weight change A → B", elem_id="an-wc-btn")
        refresh = gr.Button("Refresh models", scale=0, min_width=200)
    note = gr.Markdown(note0, elem_id="an-note")
    msg = gr.Markdown("", elem_id="an-msg")
    # side by side on a wide page, one under the other below ~1,150 px: their titles name both models and ran past
    # the edge of a half page at 1000 px
    with gr.Row():
        heat = gr.Plot(label="CKA heatmap", elem_id="an-heat", min_width=560)
        div = gr.Plot(label="Divergence per layer", elem_id="an-div", min_width=560)
    table = gr.Dataframe(
        headers=["layer", "similarity", "divergence", "control", "ratio", "shuffled baseline"],
        interactive=False,
        label="Per layer",
    )
    wc_plot = gr.Plot(label="Weight change per layer", elem_id="an-wc")
    gr.Markdown("### Trajectory over a run's checkpoints")
    with gr.Row():
        run = gr.Dropdown(
            choices=labelled_choices(runs),
            value=default_run(a0, runs),
            label="Run",
            elem_id="an-run",
            **picker,
        )
        ref = gr.Dropdown(choices=shown, value=None, label="Reference (blank = the run's starting model)", **picker)
        traj_btn = gr.Button("Trajectory", elem_id="an-traj-btn")
    traj_msg = gr.Markdown("", elem_id="an-traj-msg")
    with gr.Row():
        traj_plot = gr.Plot(label="Divergence across checkpoints", elem_id="an-traj", min_width=560)
        traj_w = gr.Plot(label="Weight change across checkpoints", elem_id="an-traj-w", min_width=560)

    def on_cka(a_, b_, ca_, cb_, t_, n_, l_, m_, progress=gr.Progress()):
        return compute_cka(a_, b_, ca_, cb_, t_, n_, l_, m_, progress=lambda f, m="": progress(f, desc=m))

    def on_traj(r_, ref_, t_, n_, l_, m_, progress=gr.Progress()):
        return compute_trajectory(r_, ref_, t_, n_, l_, m_, progress=lambda f, m="": progress(f, desc=m))

    cka_btn.click(
        on_cka,
        inputs=[a, b, ca, cb, texts, n_texts, max_len, measure],
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
        inputs=[run, ref, texts, n_texts, max_len, measure],
        outputs=[traj_plot, traj_w, traj_msg],
        concurrency_limit=1,
        concurrency_id="analysis",
        api_name="trajectory",
    )

    shown = gr.State([a0, b0, default_run(a0, runs)])  # the defaults A, B and the run were last given on this page

    def lists(a_, b_, run_, given):
        """Every model list read again; A and B while both are on their defaults, and the run while it is, take
        the new ones (the newest pair); a choice made is kept; the note says when B is empty and why."""
        names = model_choices()
        ch = labelled_choices(names)
        da, db, note_ = default_models()
        run_ch = run_choices(names)
        new = [da, db, default_run(da, run_ch)]
        a_, b_ = follow_defaults([a_, b_], given[:2], new[:2])  # a comparison: A and B follow together
        (run_,) = follow_defaults([run_], given[2:], new[2:])
        return [
            gr.update(choices=ch, value=a_),
            gr.update(choices=ch, value=b_),
            *[gr.update(choices=ch) for _ in (ca, cb, ref)],
            gr.update(choices=labelled_choices(run_ch), value=run_),
            "" if b_ else note_,
            new,
        ]

    keep_fresh(lists, [a, b, ca, cb, ref, run, note, shown], inputs=[a, b, run, shown], button=refresh)
    return {"heat": heat, "div": div, "lists": lists}

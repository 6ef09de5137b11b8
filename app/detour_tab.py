"""Detour tab: what the objectives change, for any model or run. The attention masks of each layer kind under MLM
and under the CLM detour, the per-token surprise of 2-4 models under each objective, and both through a run's
checkpoints with a slider. Thin wrappers over ``backend.explain`` (the functions behind ``python -m backend
explain``)."""

from __future__ import annotations

import math
import time
from pathlib import Path

from app import (
    TYPED_PICKER,
    check_model_spec,
    default_picks,
    follow_defaults,
    labelled,
    labelled_choices,
    md_escape,
    model_choices,
    model_name,
    model_ref,
    warn,
)
from backend.analysis import plots
from backend.analysis.fill_mask import fill_mask
from backend.core.errors import DetourError
from backend.core.paths import runs_dir
from backend.engine.model_ref import resolve_model
from backend.engine.rundir import read_metrics
from backend.explain import attention_patterns, run_checkpoints, token_surprise
from backend.explain.checkpoints import surprise_through_run
from backend.explain.figures import layers_text, masks_figure, surprise_html, timeline_figure, trace_figure
from backend.explain.masks import MAX_SEQ_LEN
from backend.explain.surprise import MAX_TOKENS
from backend.explain.surprise import check_text as check_surprise_text

SLOTS = 4
EXAMPLE_TEXT = "The patient was treated with intravenous furosemide and her blood pressure improved within two days."
EXAMPLE_MASKED = "The patient was treated with intravenous [MASK] twice daily."

INTRO = (
    "The detour changes two things for a while: **what each token may look at** (the attention mask) and **what the "
    "model is asked to predict** (the next token instead of a hidden one). Then the MLM decay changes both back. "
    "Each view below computes this from the code the trainer runs, for any model or run."
)
MASKS_TEXT = (
    "Each square is one attention pattern: row *i* is a token asking (the query), column *j* a token it may read "
    "(the key); blue means allowed. Under **MLM** every token reads its neighbours on both sides. The **CLM detour** "
    "hides everything to the right, so a token can only use what came before it: that is what makes predicting the "
    "next token a real task. ModernBERT has two kinds of layer: *global* layers read the whole sequence, *local* "
    "layers only a window around the token; the detour keeps that window and makes it causal too. These patterns "
    "are read from the masks the layers receive in a real forward under the trainer's `causal_attention`, then "
    "checked by pushing one token's input hard and watching which outputs move. One column per objective the "
    "engine knows (each explained under the picture): MNTP reads both sides like MLM, the prefix LM both sides "
    "within its prefix and only the left after it, and a mixed batch has causal rows (drawn) beside masked ones."
)
SURPRISE_TEXT = (
    "Each token is coloured by how surprised the model is to see it, in nats (the training loss of that token: "
    "0 = certain; the right end of the scale is a blind guess over the vocabulary). **Next token**: the model sees "
    "only the tokens before, through the causal mask, as in the detour; the mean is exactly the trainer's CLM loss "
    "on this text. **Masked**: each token is hidden on its own and guessed from both sides with the bidirectional "
    "mask (the pseudo-log-likelihood, the per-token view of MLM). A model trained only with MLM does badly on the "
    "first line (hover a token: under the causal mask it tends to repeat the token it sits on); the detour teaches "
    "it the first line, and the MLM decay brings back the second."
)
SCRUB_TEXT = (
    "Pick a run and drag the slider through its saved models, from the model it started from to the end. The plot "
    "marks where the phase switches (CLM to the MLM decay in a detour run): watch the next-token line cool down "
    "during the detour and the fill-mask guesses come back in the decay. More saved points: set **Checkpoint every** "
    "and **Keep checkpoints** in the Launch form's Advanced section (or train with "
    "`--set logging.checkpoint_every=N --set logging.keep_checkpoints=M`)."
)


SLIDER_LABEL = "tokens seen (drag to scrub: it stops at the nearest saved model; the arrow keys step to the next)"


def show_masks(spec: str | None, seq_len=128) -> tuple:
    """-> (heatmaps, message)."""
    t0 = time.perf_counter()
    try:
        res = attention_patterns(model_ref(spec, "model"), int(seq_len))
    except (DetourError, ValueError) as exc:
        return None, warn(exc)
    lines = [f"✓ **{md_escape(spec)}** ({res['model_type']}, {res['attn_implementation']}), {res['seq_len']} tokens, "
             f"in {time.perf_counter() - t0:.1f} s"]  # fmt: skip
    objs = res["objectives"]  # what each objective declares: its name, attention and one-line explanation
    lines += [f"- **{o['title']}** ({o['attention']}): {md_escape(o['explanation'])}"
              + (f" (drawn: {md_escape(o['note'])})" if o["note"] else "") for o in objs]  # fmt: skip
    for k in res["kinds"]:
        window = f", window {k['window']} (|q−k| ≤ {k['reach']})" if k["window"] else ""
        reads = []
        for o in objs:
            m = k[f"{o['name']}_summary"]
            reads.append(f"{o['title']}: {_span(m)} keys" + (", right side included" if m["sees_future"] else
                                                             ", nothing to its right"))  # fmt: skip
        lines.append(f"- **{k['name']}** ({layers_text(k['layers'])}){window}: each token reads: " + "; ".join(reads))
    checks = [(k, o["title"], k[f"{o['name']}_measured"]) for k in res["kinds"] for o in objs]
    bad = [f"{k['name']} {o}: {m['mismatches']} pairs differ" for k, o, m in checks if not m["agrees"]]
    if bad:
        lines.append("- ✗ measured pattern differs from the masks: " + "; ".join(bad))
    else:
        n = len(checks[0][2]["keys"])
        lines.append(f"- measured: pushing the input at {n} key positions moved exactly the outputs these masks allow, "
                     f"in every panel (layers {', '.join(str(k['layers'][0]) for k in res['kinds'])})")  # fmt: skip
    return masks_figure(res), "\n".join(lines)


def _span(summary: dict) -> str:
    lo, hi = summary["keys_min"], summary["keys_max"]
    return str(hi) if lo == hi else f"{lo} to {hi}"


def _table(results: list[dict]) -> str:
    views = results[0]["views"]  # each per-token view, named by its objective
    rows = ["| model | " + " | ".join(v["text"] for v in views) + " |", "|---" * (len(views) + 1) + "|"]
    for r in results:
        cells = ["–" if r[f"{n}_mean"] is None else f"{r[f'{n}_mean']:.2f} nats ({r[f'{n}_count']} tokens)"
                 for n in (v["objective"] for v in views)]  # fmt: skip
        rows.append(f"| {md_escape(r['model'])} | " + " | ".join(cells) + " |")
    blind = max(r["blind_guess"] for r in results)
    return "\n".join(rows) + f"\n\nA blind guess over the vocabulary costs {blind:.2f} nats."


def show_surprise(text: str, specs: list[str | None]) -> tuple[str, str]:
    """-> (coloured tokens as HTML, message with the means). Each slot stands alone, as in Fill-mask: one that does
    not resolve or load is named under the others' results (one mistyped slot refused the whole request)."""
    chosen = [(i, model_name(s)) for i, s in enumerate(specs) if s and s.strip()]
    if not chosen:
        return "", "⚠ choose at least one model"
    t0 = time.perf_counter()
    try:
        check_surprise_text(text)  # the text's own problem is every slot's: said once
    except DetourError as exc:
        return "", warn(exc)
    results, notes = [], []
    for i, s in chosen:
        what = f"model {i + 1}"
        try:
            (r,) = token_surprise([model_ref(s, what)], text, MAX_TOKENS)  # resolved once, passed down
        except DetourError as exc:
            notes.append(warn(exc if str(exc).startswith(what) else f"{what}: {exc}"))
            continue
        r["model"] = labelled(s)  # the name the user chose, not the resolved path; a run still training says so
        results.append(r)
    if not results:
        return "", "\n\n".join(notes)
    msg = _table(results) + f" Computed in {time.perf_counter() - t0:.1f} s."
    if any(r["truncated"] for r in results):
        msg += f" The text was cut to its first {MAX_TOKENS} tokens."
    return surprise_html(results), "\n\n".join([msg, *notes])


def run_choices(choices: list[str] | None = None) -> list[str]:
    """The runs among ``choices`` (default: every model the tabs offer)."""
    return [c for c in (model_choices() if choices is None else choices) if (runs_dir() / c / "config.yaml").exists()]


def default_run(picks: list, runs: list[str]) -> str | None:
    """The run the scrub starts on: the detour run among the default picks, else the newest run."""
    detour = [x for x in picks[1:] if x and x.endswith("-detour")]
    return (detour or runs or [None])[0]


NO_RUNS = (
    "**No runs yet.** This view scrubs through the models a run saved as it trained. Make one in the **Launch** "
    "tab (recipe `pair` trains a CLM-detour run and its MLM sibling; the defaults take a few minutes on a laptop), "
    "then come back and press **↻ Refresh the model and run lists**. The two views above work with the bundled "
    "model already."
)
EMPTY_SLIDER = {"minimum": 0, "maximum": 1, "value": 0, "step": 1}  # Gradio refuses a slider with min == max


def run_hint(runs: list[str], shown: str | None) -> str:
    """The run section's note when the lists are read again: how to make a run while there is none; the note
    cleared once a run exists; any other message (a loaded run's models) kept."""
    if not runs:
        return NO_RUNS
    return "" if shown == NO_RUNS else (shown or "")


def _ticks(points: list[dict]) -> list[int]:
    """The slider position of each saved model: its tokens seen (the start model at 0)."""
    ticks, last = [], 0
    for p in points:
        last = p["tokens_seen"] if p.get("tokens_seen") is not None else last
        ticks.append(int(last))
    return ticks


def load_run(run: str | None) -> tuple[dict, str]:
    """-> (slider settings {"minimum", "maximum", "value", "step"} in tokens seen, message naming every saved model
    and each phase switch). With no run (a fresh install) the message says how to make one."""
    if not (run or "").strip():
        return dict(EMPTY_SLIDER), NO_RUNS if not run_choices() else warn("choose a run")
    try:
        res = run_checkpoints(_run_dir(run))
    except DetourError as exc:
        return dict(EMPTY_SLIDER), warn(exc)
    pts = res["points"]
    if not pts:
        return dict(EMPTY_SLIDER), warn(f"run '{run}': no saved model yet")
    ticks = _ticks(pts)
    gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False) if b > a]
    step = math.gcd(*gaps) if gaps else 1
    msg = f"✓ {len(pts)} saved models in **{md_escape(labelled(run))}**: " + ", ".join(
        f"{md_escape(p['label'])} ({t:,} tokens)" for p, t in zip(pts, ticks, strict=True)
    )
    for i in res["switches"]:
        msg += f"\n\nPhase switch between {ticks[i - 1]:,} and {ticks[i]:,} tokens: {md_escape(pts[i]['label'])} is "
        msg += f"the first model of phase {md_escape(pts[i]['phase'])}."
    if res["advice"]:
        msg += "\n\n⚠ " + md_escape(res["advice"])
    return {"minimum": 0, "maximum": max(ticks[-1], 1), "value": 0, "step": max(step, 1)}, msg


def saved_ticks(run: str | None) -> str:
    """The slider positions of ``run``'s saved models, comma-separated ("" when there are none): the page's keys
    step from one to the next (``main.JS``); a slider step (the gaps' greatest common divisor) fell between two
    saved models, so an arrow key showed the same model again and left the slider off it."""
    try:
        pts = run_checkpoints(_run_dir(run))["points"] if (run or "").strip() else []
    except DetourError:
        return ""
    return ",".join(str(t) for t in sorted(set(_ticks(pts))))


def nearest_point(points: list[dict], tokens) -> int:
    """The saved model nearest to ``tokens`` seen (the slider's value), the earlier one on a tie."""
    ticks = _ticks(points)
    t = float(tokens or 0)
    return min(range(len(points)), key=lambda i: (abs(ticks[i] - t), i))


def _run_dir(run: str | None) -> str:
    spec = check_model_spec(run, "run")
    if not (Path(spec) / "config.yaml").exists():
        raise DetourError(f"run: '{run}' is not a run directory")
    return spec


def scrub(run: str | None, tokens, masked_text: str, text: str, top_k=5) -> tuple:
    """-> (timeline, fill-mask bars or None, coloured tokens, message) for the saved model of ``run`` nearest to
    ``tokens`` seen (the slider's value). A bad fill-mask sentence is reported under the other two views, which
    still show."""
    if not (run or "").strip() and not run_choices():
        return None, None, "", ""  # 'Load its saved models' (which this follows) has said how to make a run
    t0 = time.perf_counter()
    try:
        run_dir = _run_dir(run)
        res = run_checkpoints(run_dir)
        pts = res["points"]
        if not pts:
            raise DetourError(f"run '{run}': no saved model yet")
        i = nearest_point(pts, tokens)
        point = pts[i]
        saved = resolve_model(point["model"])  # the run's own record, once: the surprise and the fill-mask take it
        surprise = token_surprise([saved], text)[0]
        surprise["model"] = point["label"]
    except DetourError as exc:
        return None, None, "", warn(exc)
    fig = timeline_figure(pts, read_metrics(run_dir), selected=i)
    try:
        fill = fill_mask([saved], masked_text, top_k=int(top_k))[0]
        # the chart's title, short: it takes half the page ("fill-mask at step 22 (end-decay) = final · decay: MLM"
        # ran past its edge at 1000 px); the message under the slider names the model whole
        fill["model"] = "top-k, the start model" if point["tag"] == "start" else (
            f"top-k at step {point['step']} ({point['phase']})")  # fmt: skip
        bars, problem = plots.fill_mask_figure(fill), ""
    except DetourError as exc:
        bars, problem = None, "\n\n" + warn(exc)
    phase = "the starting model, before any training" if point["tag"] == "start" else (
        f"phase **{point['phase']}** ({(point['objective'] or '?').upper()}), step {point['step']}, "
        f"{point['tokens_seen']:,} tokens seen")  # fmt: skip
    took = time.perf_counter() - t0
    asked = int(float(tokens or 0))
    near = "" if asked == _ticks(pts)[i] else f" (the saved model nearest to {asked:,} tokens)"
    msg = f"**{md_escape(point['label'])}** ({i + 1} of {len(pts)}){near}: {phase}. Computed in {took:.1f} s."
    return fig, bars, surprise_html([surprise]), msg + problem


def snapped(run: str | None, tokens) -> int | None:
    """The slider position of the saved model ``scrub`` shows for ``tokens`` (None when there is none): the slider
    is moved there, so the tokens it shows are the model's."""
    try:
        pts = run_checkpoints(_run_dir(run))["points"]
    except DetourError:
        return None
    return _ticks(pts)[nearest_point(pts, tokens)] if pts else None


def trace(run: str | None, text: str) -> tuple:
    """-> (the text's mean surprise per objective at every saved model of ``run``, message)."""
    if not (run or "").strip() and not run_choices():
        return None, NO_RUNS
    t0 = time.perf_counter()
    try:
        run_dir = _run_dir(run)
        res = surprise_through_run(run_dir, text)
    except DetourError as exc:
        return None, warn(exc)
    took = time.perf_counter() - t0
    return trace_figure(res, read_metrics(run_dir)), f"✓ {len(res['points'])} saved models in {took:.1f} s"


def build(ctx) -> dict:
    import gradio as gr

    from app.refresh import keep_fresh

    choices = model_choices()
    defaults = default_picks(choices, SLOTS)
    runs = run_choices(choices)
    gr.Markdown(INTRO)
    refresh = gr.Button("↻ Refresh the model and run lists", size="sm", elem_id="dt-refresh")

    gr.Markdown("### 1 · The masks\n" + MASKS_TEXT)
    with gr.Row():
        m_model = gr.Dropdown(choices=labelled_choices(choices), value=defaults[0], label="Model",
                              allow_custom_value=True, elem_id="dt-mask-model", elem_classes=TYPED_PICKER)  # fmt: skip
        m_len = gr.Slider(8, MAX_SEQ_LEN, value=128, step=8, label="sequence length (tokens)", elem_id="dt-mask-len")
        m_btn = gr.Button("Show the masks", variant="primary", elem_id="dt-mask-btn")
    m_msg = gr.Markdown("", elem_id="dt-mask-msg")
    m_plot = gr.Plot(label="Attention patterns", elem_id="dt-mask-plot")

    gr.Markdown("### 2 · Who predicts what\n" + SURPRISE_TEXT)
    s_text = gr.Textbox(value=EXAMPLE_TEXT, label="Text", lines=2, max_lines=6, elem_id="dt-text")
    with gr.Row():
        s_models = [
            gr.Dropdown(
                choices=labelled_choices(choices),
                value=defaults[i],
                label=f"Model {i + 1}",
                allow_custom_value=True,
                elem_id=f"dt-model-{i}",
                elem_classes=TYPED_PICKER,
            )  # fmt: skip
            for i in range(SLOTS)
        ]
    s_btn = gr.Button("Show the surprise per token", variant="primary", elem_id="dt-surprise-btn")
    s_msg = gr.Markdown("", elem_id="dt-surprise-msg")
    s_html = gr.HTML("", elem_id="dt-surprise")

    gr.Markdown("### 3 · Through a run\n" + SCRUB_TEXT)
    with gr.Row():
        r_run = gr.Dropdown(choices=labelled_choices(runs), value=default_run(defaults, runs), label="Run",
                            allow_custom_value=True, elem_id="dt-run", elem_classes=TYPED_PICKER)  # fmt: skip
        r_load = gr.Button("Load its saved models", variant="primary", elem_id="dt-run-btn")
    r_slider = gr.Slider(0, 1, value=0, step=1, label=SLIDER_LABEL, elem_id="dt-scrub",
                         elem_classes=["snap-on-enter", "step-to-ticks"])  # fmt: skip
    r_ticks = gr.Textbox("", visible="hidden", elem_id="dt-scrub-ticks")  # where the keys step to (``main.JS``)
    r_info = gr.Markdown(NO_RUNS if not runs else "", elem_id="dt-run-msg")  # a fresh install: how to make a run
    with gr.Row():
        r_masked = gr.Textbox(value=EXAMPLE_MASKED, label="Fill-mask sentence (one [MASK])", max_lines=2)
        r_text = gr.Textbox(value=EXAMPLE_TEXT, label="Text for the per-token surprise", max_lines=3)
    r_msg = gr.Markdown("", elem_id="dt-scrub-msg")
    r_timeline = gr.Plot(label="The run", elem_id="dt-timeline")
    with gr.Row(equal_height=False):
        r_fill = gr.Plot(label="Fill-mask top-k", elem_id="dt-fill")
        r_html = gr.HTML("", elem_id="dt-scrub-surprise")
    t_btn = gr.Button("Trace this text through every saved model", elem_id="dt-trace-btn")
    t_msg = gr.Markdown("", elem_id="dt-trace-msg")
    t_plot = gr.Plot(label="This text through the run", elem_id="dt-trace")

    def on_load(run):
        slider, msg = load_run(run)
        return gr.update(**slider), msg, saved_ticks(run)

    scrub_io = {"inputs": [r_run, r_slider, r_masked, r_text], "outputs": [r_timeline, r_fill, r_html, r_msg]}
    busy = {"concurrency_limit": 1, "concurrency_id": "detour"}
    m_btn.click(show_masks, inputs=[m_model, m_len], outputs=[m_plot, m_msg], api_name="detour_masks", **busy)
    s_btn.click(lambda text, *specs: show_surprise(text, list(specs)), inputs=[s_text, *s_models],
                outputs=[s_html, s_msg], api_name="detour_surprise", **busy)  # fmt: skip
    loaded = r_load.click(on_load, inputs=[r_run], outputs=[r_slider, r_info, r_ticks], api_name="detour_run")
    loaded.then(scrub, **scrub_io, **busy, api_visibility="undocumented")  # documented once, as detour_scrub
    # dragging, the keys (from one saved model to the next: main.JS) and a typed value all scrub (.input); letting go
    # (pointer up, or leaving the number box) also moves the slider onto the saved model shown, so its tokens are
    # the model's
    r_slider.input(scrub, **scrub_io, api_name="detour_scrub", trigger_mode="always_last", **busy)

    def on_release(run, tokens, masked, text):
        tick = snapped(run, tokens)
        return (*scrub(run, tokens, masked, text), gr.skip() if tick is None else tick)

    r_slider.release(on_release, inputs=scrub_io["inputs"], outputs=[*scrub_io["outputs"], r_slider],
                     api_name="detour_scrub_release", trigger_mode="always_last", **busy)  # fmt: skip
    t_btn.click(trace, inputs=[r_run, r_text], outputs=[t_plot, t_msg], api_name="detour_trace", **busy)

    # the defaults this page's pickers were last given (the masks' model, the four slots, the run): each group still
    # on its defaults follows the newest pair when the lists are read again; a choice made is kept
    shown = gr.State([defaults[0], *defaults, default_run(defaults, runs)])

    def lists(*values):
        """Every list read again (page load, tab select, the button): pickers still on their defaults take the new
        ones, so a pair that finished after the page was built is what the surprise and the scrub show."""
        *picks, info, given = values
        c = model_choices()
        runs_now, d, names = run_choices(c), default_picks(c, SLOTS), labelled_choices(c)
        new = [d[0], *d, default_run(d, runs_now)]
        groups = ((0, 1), (1, 1 + SLOTS), (1 + SLOTS, 2 + SLOTS))  # the masks' model, the surprise's slots, the run
        model, *slots, run = [v for a, b in groups for v in follow_defaults(picks[a:b], given[a:b], new[a:b])]
        return [
            gr.update(choices=names, value=model),
            *[gr.update(choices=names, value=v) for v in slots],
            gr.update(choices=labelled_choices(runs_now), value=run),
            run_hint(runs_now, info),
            new,
        ]

    outs = [m_model, *s_models, r_run]
    keep_fresh(lists, [*outs, r_info, shown], inputs=[*outs, r_info, shown], button=refresh)
    for d in (m_model, *s_models):
        d.focus(lambda: gr.update(choices=labelled_choices(model_choices())), outputs=[d], queue=False,
                api_visibility="private")  # fmt: skip
    r_run.focus(lambda: gr.update(choices=labelled_choices(run_choices())), outputs=[r_run], queue=False,
                api_visibility="private")  # fmt: skip
    return {"mask_plot": m_plot, "surprise": s_html, "scrub": r_slider}

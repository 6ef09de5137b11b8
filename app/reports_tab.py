"""Reports tab: the study reports found under ``reports/`` (``python -m backend replicate``), each shown as its
plain-language summary, tables and figures, with report.html / report.json to download; buttons that launch the
detour study's quick preset and the second paper's study as detached processes (each in its own session, output to
``<report>/replicate.log``, never a pipe), so closing the browser or restarting the app never stops them; Stop and
Resume for the selected study (``replication.study_run``: the same functions as ``replicate --stop`` and a rerun of
its command). The app launches into the folders the command line uses (``study_folder``), so each sees and resumes
the other's studies. A timer polls the status and log; beside the buttons, the quick study's time and the smallest
difference it can detect.

The handlers are plain functions (tested without a browser); ``build(ctx)`` only wires them."""

from __future__ import annotations

import tempfile
from pathlib import Path

from app.study_notes import (  # noqa: F401  (the tab's handlers, tested through it)
    EMPTY,
    _time_text,
    button_label,
    hybrid_button_label,
    hybrid_time_note,
    power_note,
    quick_duration,
    quick_measurement,
    time_note,
)
from app.study_status import (  # noqa: F401
    controls,
    list_reports,
    report_dir,
    resume_study,
    status_text,
    stop_study,
    study_state,
)
from backend.core.errors import DetourError
from backend.core.paths import confined, read_text_confined

POLL_S = 3.0
FIGURES = [
    ("crossover", "Against tokens: each arm's suite delta against MLM, P(improvement), held-out losses"),
    ("f1", "NER F1 per model (mean ± std, each seed)"),
    ("f1_table", "Paired comparisons on F1 (CIs, wins)"),
    ("divergence", "Divergence per layer with the seed-noise control"),
    ("cka_heatmaps", "CKA heatmaps"),
    ("weight_change", "Weight change per layer"),
    ("loss_curves", "Held-out MLM loss"),
    ("train_loss", "Training loss"),
]


def _served_copy(path: Path, name: str) -> str:
    """A copy in the system temp dir, which gradio always serves (the reports root may be outside its cwd)."""
    from backend.core import atomic

    base = Path(tempfile.gettempdir()) / "detour-reports"
    dst = base / name / path.name
    dst.parent.mkdir(parents=True, exist_ok=True)
    confined(dst.parent, base)  # a link planted in the shared temp dir is never written through
    path = confined(path)  # a file that links out of the report folder is never served
    if dst.is_symlink() or not dst.exists() or dst.stat().st_mtime < path.stat().st_mtime:
        atomic.write_bytes(dst, path.read_bytes())  # replaces a link at dst, never the file it points to
    return str(dst)


def load_figure(d: Path, name: str):
    """A report's saved figure (``figures/<name>.json``: the studies' chart, an older report's figures), or None."""
    import plotly.io as pio

    p = d / "figures" / f"{name}.json"
    if not p.exists():
        return None
    try:
        return pio.from_json(read_text_confined(p, root=d))  # a link out of the report folder: refused
    except (ValueError, OSError):
        return None


def load_view(name: str | None) -> dict:
    """Everything the tab shows for one report: summary Markdown, figures by name, downloadable files, status."""
    status, log = status_text(name)
    view = {"summary": "", "figures": {k: None for k, _ in FIGURES}, "files": [], "status": status, "log": log}
    if not (name or "").strip():
        return view
    try:
        d = report_dir(name)
    except DetourError as exc:
        view["summary"] = f"**{exc}**"
        return view
    md = d / "report.md"
    try:
        if md.exists():
            view["summary"] = read_text_confined(md, encoding="utf-8")
        else:
            view["summary"] = "No report yet: it is written when the replication finishes (see the status and log)."
        for key, _ in FIGURES:
            view["figures"][key] = load_figure(d, key)
        view["files"] = [_served_copy(d / f, name) for f in ("report.html", "report.json") if (d / f).exists()]
    except DetourError as exc:  # a file that links out of the report folder: one line, nothing of it shown
        view["summary"] = f"**{exc}**"
    return view


def launch(study: str = "detour", preset: str = "quick") -> tuple[str, str]:
    """Start ``python -m backend replicate [--study hybrid-splits] --preset P`` detached into the folder the command
    line uses for it (``<reports>/detour-<preset>``, ``<reports>/hybrid-<preset>``). Returns (message, name).

    Refuses while that folder's study is still running; a finished or stopped one is resumed (finished runs and
    fine-tunes are kept). The model and data are checked first, so a missing base model is said here, not in a
    log."""
    from backend.replication.study_run import live_pid, start_detached, study_folder

    out = study_folder(study, preset)
    if pid := live_pid(out):
        raise DetourError(f"'{out.name}' is already running (pid {pid}); wait for it, or Stop it")
    if study == "detour":
        from backend.replication.budget_study import resolve_budget_study

        resolve_budget_study(preset)  # a clear error (base model not built, data absent) before anything starts
        proc = start_detached(out, ["--preset", preset])
        return (f"Started the detour study ({preset}) in `{out}` (pid {proc.pid}). {time_note()} The status below "
                "updates.", out.name)  # fmt: skip
    from backend.replication.hybrid import estimate_text, hybrid_estimate, resolve_hybrid

    resolve_hybrid(preset)  # data absent: said here, not in a log
    proc = start_detached(out, ["--study", "hybrid-splits", "--preset", preset])
    when = estimate_text(hybrid_estimate(preset))
    return (f"Started the second paper's study ({preset}) in `{out}` (pid {proc.pid}). {when} The status below "
            "updates.", out.name)  # fmt: skip


# --- UI -----------------------------------------------------------------------------------------


def build(ctx) -> dict:
    """Create the tab's components inside the current ``gr.Blocks`` / ``gr.Tab`` context and wire them (``ctx``:
    the app's settings, like every tab's ``build``; this one needs none). With no report, the tab is one message
    and the launch button; the report view appears once there is a report."""
    import gradio as gr

    from app.refresh import keep_fresh

    names = list_reports()
    first = names[0] if names else None
    v0 = load_view(first)
    measured = quick_measurement()  # once for the label and the note
    button = button_label(measured)
    gr.Markdown(
        "Replications of the paper's three findings (`python -m backend replicate`, presets quick, standard, gpu, "
        "paper). Each report states what was measured, what the paper found and whether it replicated, per token "
        "budget, in plain words."
    )
    with gr.Row():
        pick = gr.Dropdown(
            choices=names,
            value=first,
            label="Report",
            elem_id="rep-pick",
            allow_custom_value=True,  # handlers accept names only
            scale=3,
            visible=bool(names),
        )
        refresh_btn = gr.Button("Refresh", scale=1, min_width=120)
        launch_btn = gr.Button(button, variant="primary", scale=2, elem_id="rep-launch")
        hybrid_btn = gr.Button(hybrid_button_label(), scale=2, elem_id="rep-launch-hybrid")
    time_md = gr.Markdown(_time_text(power=False, m=measured), elem_id="rep-time")  # its power follows on page load
    launch_msg = gr.Markdown("", elem_id="rep-launch-msg")
    empty = gr.Markdown(EMPTY.format(button=button), visible=not names, elem_id="rep-empty")
    with gr.Column(visible=bool(names)) as view_col:
        status = gr.Markdown(v0["status"], elem_id="rep-status")
        can_stop, can_resume = controls(first)
        with gr.Row():
            stop_btn = gr.Button("Stop", variant="stop", visible=can_stop, elem_id="rep-stop", scale=0, min_width=120)
            resume_btn = gr.Button("Resume", visible=can_resume, elem_id="rep-resume", scale=0, min_width=120)
        with gr.Accordion("Log (replicate.log, tail)", open=False):
            log_box = gr.Code(value=v0["log"], lines=14, interactive=False, elem_id="rep-log")
        files = gr.File(
            value=v0["files"] or None,
            label="report.html / report.json",
            file_count="multiple",
            interactive=False,
            elem_id="rep-files",
            visible=bool(v0["files"]),
        )
        summary = gr.Markdown(v0["summary"], elem_id="rep-summary")
        plots = []
        for key, label in FIGURES:
            fig = v0["figures"][key]
            plots.append(gr.Plot(value=fig, label=label, elem_id=f"rep-fig-{key}", visible=fig is not None))
    timer = gr.Timer(POLL_S, active=True)
    seen = gr.State({"name": first, "report_mtime": _mtime(first)})

    def show(name):
        """The whole view of report ``name``: only what exists is shown (no empty boxes)."""
        v = load_view(name)
        state = {"name": name, "report_mtime": _mtime(name)}
        figs = [gr.update(value=v["figures"][k], visible=v["figures"][k] is not None) for k, _ in FIGURES]
        can_stop, can_resume = controls(name)
        return [
            v["status"],
            v["log"],
            gr.update(value=v["files"] or None, visible=bool(v["files"])),
            v["summary"],
            *figs,
            state,
            gr.update(visible=can_stop),
            gr.update(visible=can_resume),
            gr.update(visible=bool(name)),
            gr.update(visible=not name),
        ]

    view_outs = [status, log_box, files, summary, *plots, seen, stop_btn, resume_btn, view_col, empty]

    def poll(name, state):
        """Status, log and the Stop / Resume buttons every tick; the whole view again only when the report file
        changed."""
        st, log = status_text(name)
        if name and state.get("name") == name and _mtime(name) != state.get("report_mtime"):
            return show(name)
        can_stop, can_resume = controls(name)
        skips = [gr.skip()] * (len(view_outs) - 6)
        return [st, log, *skips, gr.update(visible=can_stop), gr.update(visible=can_resume), gr.skip(), gr.skip()]

    def listing(name):
        names_now = list_reports()
        value = name if name in names_now else (names_now[0] if names_now else None)
        return [gr.update(choices=names_now, value=value, visible=bool(names_now)), *show(value)]

    def start(study: str = "detour"):
        try:
            msg, name = launch(study, "quick")
        except DetourError as exc:
            return [f"**Not started:** {exc}", gr.skip(), *([gr.skip()] * len(view_outs))]
        names_now = list_reports()
        return [msg, gr.update(choices=names_now, value=name, visible=True), *show(name)]

    def act(fn, name):
        """Stop or Resume the selected study: its message, and the view as it now stands."""
        try:
            msg = fn(name)
        except DetourError as exc:
            return [f"**Not done:** {exc}", *([gr.skip()] * len(view_outs))]
        return [msg, *show(name)]

    pick.change(show, inputs=[pick], outputs=view_outs, show_progress="hidden", api_name="report_view")
    keep_fresh(listing, [pick, *view_outs], inputs=[pick], button=refresh_btn)
    launch_btn.click(start, outputs=[launch_msg, pick, *view_outs], api_name="replicate_quick")
    hybrid_btn.click(lambda: start("hybrid-splits"), outputs=[launch_msg, pick, *view_outs],
                     api_name="replicate_hybrid")  # fmt: skip
    stop_btn.click(lambda name: act(stop_study, name), inputs=[pick], outputs=[launch_msg, *view_outs],
                   api_name="study_stop")  # fmt: skip
    resume_btn.click(lambda name: act(resume_study, name), inputs=[pick], outputs=[launch_msg, *view_outs],
                     api_name="study_resume")  # fmt: skip

    def times():
        """The button's time and its note read again: a quick replication that finished after the page was built
        shows what it took."""
        m = quick_measurement()  # once for the label and the note: it plans the study (50 ms on 2 cores)
        label = button_label(m)
        hybrid = gr.update(value=hybrid_button_label())  # this machine's rate may have been measured meanwhile
        return [gr.update(value=label), _time_text(m=m), gr.update(value=EMPTY.format(button=label)), hybrid]

    keep_fresh(times, [launch_btn, time_md, empty, hybrid_btn], button=refresh_btn)
    from app import suite_panel

    # pick a suite, pick models, run with progress (python -m backend evaluate --suite); lists follow Refresh
    suites = suite_panel.build(refresh_btn)
    timer.tick(
        poll, inputs=[pick, seen], outputs=view_outs, show_progress="hidden", queue=False, api_visibility="private"
    )
    return {
        "pick": pick,
        "summary": summary,
        "plots": plots,
        "timer": timer,
        "launch": launch_btn,
        "hybrid": hybrid_btn,
        "stop": stop_btn,
        "resume": resume_btn,
        "empty": empty,
        "view": view_col,
        "listing": listing,
        "times": times,
        "suites": suites,
    }


def _mtime(name: str | None) -> float | None:
    if not name:
        return None
    try:
        return (report_dir(name) / "report.json").stat().st_mtime
    except (DetourError, OSError):
        return None

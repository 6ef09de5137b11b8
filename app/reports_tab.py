"""Reports tab: the mini-replication reports found under ``reports/`` (``python -m backend replicate``), each shown as
its plain-language summary, tables and figures, with report.html / report.json to download; and a button that
launches the quick preset as a detached process (its own session, output to ``<report>/replicate.log``, never a
pipe), so closing the browser or restarting the app never stops it. A timer polls its status and log.

The handlers are plain functions (tested without a browser); ``build(ctx)`` only wires them."""

from __future__ import annotations

import tempfile
from pathlib import Path

from backend.core.errors import DetourError
from backend.core.paths import confined, is_plain_name, read_text_confined, reports_dir, tail_text
from backend.replication.replicate import LOG_NAME

POLL_S = 3.0
LOG_LINES = 40
FIGURES = [
    ("f1", "NER F1 per model (mean ± std, each seed)"),
    ("f1_table", "Paired comparisons on F1 (CIs, wins)"),
    ("divergence", "Divergence per layer with the seed-noise control"),
    ("cka_heatmaps", "CKA heatmaps"),
    ("weight_change", "Weight change per layer"),
    ("loss_curves", "Held-out MLM loss"),
    ("train_loss", "Training loss"),
]


def list_reports() -> list[str]:
    """Replication folders under the reports root (newest first): those with a settings, status or report file."""
    root = reports_dir()
    if not root.is_dir():
        return []
    found = []
    for d in root.iterdir():
        if d.is_dir() and not d.name.startswith(".") and is_plain_name(d.name):
            marks = [d / n for n in ("report.json", "status.json", "settings.json", LOG_NAME)]
            times = [p.stat().st_mtime for p in marks if p.exists()]
            if times:
                found.append((max(times), d.name))
    return [n for _, n in sorted(found, reverse=True)]


def report_dir(name: str | None) -> Path:
    """The folder of report ``name``: a plain name under the reports root, never a path."""
    name = (name or "").strip()
    if not is_plain_name(name):
        raise DetourError(f"report '{name}': give the name of a folder under {reports_dir()}")
    d = reports_dir() / name
    if not d.is_dir():
        raise DetourError(f"report '{name}': no such folder under {reports_dir()}")
    if not d.resolve().is_relative_to(reports_dir()):  # a link out of the reports folder is not read
        raise DetourError(f"report '{name}': links to {d.resolve()}, outside {reports_dir()}; it is not read")
    return d


def _tail(path: Path, n: int = LOG_LINES) -> str:
    try:
        raw = tail_text(path)  # a log that links out of the report folder is refused, never shown
    except DetourError as exc:
        return str(exc)
    except OSError:
        return ""
    lines = [ln.rstrip("\r").rsplit("\r", 1)[-1] for ln in raw.split("\n")]  # progress bars: their last state
    return "\n".join([ln for ln in lines if ln.strip()][-n:])


def _sweep_status(name: str, d: Path) -> str:
    """A budget study's state is its sweep's: how many runs are in each state, and whether the report is written."""
    from backend.sweeps.manifest import sweep_status

    try:
        counts = sweep_status(d / "sweep")["counts"]
    except DetourError as exc:
        return f"**{name}**: {exc}"
    runs = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    written = "report written" if (d / "report.md").exists() else "no report yet"
    return f"**{name}**: budget study · runs: {runs} · {written}"


def status_text(name: str | None) -> tuple[str, str]:
    """(status Markdown, log tail) of a report folder."""
    from backend.replication.replicate import read_markers, read_state

    if not (name or "").strip():
        return "No report selected. Launch the quick preset, or run `python -m backend replicate`.", ""
    try:
        d = report_dir(name)
    except DetourError as exc:
        return f"**{exc}**", ""
    if (d / "sweep" / "sweep.json").exists() and not (d / "status.json").exists():
        return _sweep_status(name, d), _tail(d / LOG_NAME)
    st = read_state(d)
    state = st.get("state", "none")
    done = len([k for k in read_markers(d) if not k.endswith(".failed")])
    total = st.get("steps_total") or "?"
    parts = [f"**{name}**: {state}"]
    if state == "running":
        parts.append(f"step {st.get('current_step') or '…'} ({done}/{total} steps done, pid {st.get('pid')})")
    elif state != "none":
        parts.append(f"{done}/{total} steps done")
    if st.get("error"):
        parts.append(f"error: {st['error']}")
    return " · ".join(parts), _tail(d / LOG_NAME)


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


def load_view(name: str | None) -> dict:
    """Everything the tab shows for one report: summary Markdown, figures by name, downloadable files, status."""
    from backend.replication.report import load_figure

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


def launch_quick(name: str = "quick", extra_args: list[str] | None = None) -> tuple[str, str]:
    """Start ``python -m backend replicate --preset quick --out <reports>/<name>`` detached. Returns (message, name).

    Refuses when that folder's replication is still running; a finished or interrupted one is resumed (finished
    steps are kept). The model and data are checked first, so a missing base model is said here, not in a log."""
    from backend.replication.plan import resolve_settings
    from backend.replication.replicate import read_state, start_detached

    name = (name or "quick").strip()
    if not is_plain_name(name):
        raise DetourError(f"report name '{name}': use letters, digits, '_', '-' or '.'")
    out = reports_dir() / name
    if read_state(out).get("state") == "running":
        raise DetourError(f"'{name}' is already running (pid {read_state(out).get('pid')}); wait for it to finish")
    resolve_settings("quick")  # raises a clear error (base model not built, data absent) before anything starts
    proc = start_detached(out, "quick", extra_args)
    return f"Started the quick preset in `{out}` (pid {proc.pid}). {time_note()} The status below updates.", name


def launch_hybrid(preset: str = "quick") -> tuple[str, str]:
    """Start ``python -m backend replicate --study hybrid-splits --preset P`` (the second paper's study) detached
    into ``<reports>/hybrid-<preset>``; a finished or interrupted one resumes. Returns (message, name)."""
    from backend.replication.hybrid import resolve_hybrid
    from backend.replication.replicate import read_state, start_detached

    name = f"hybrid-{preset}"
    out = reports_dir() / name
    if read_state(out).get("state") == "running":
        raise DetourError(f"'{name}' is already running (pid {read_state(out).get('pid')}); wait for it to finish")
    resolve_hybrid(preset)  # data absent: said here, not in a log
    proc = start_detached(out, preset, ["--study", "hybrid-splits"])
    from backend.replication.hybrid import estimate_text, hybrid_estimate

    when = estimate_text(hybrid_estimate(preset))
    return (
        f"Started the second paper's study ({preset}) in `{out}` (pid {proc.pid}). {when} The status below updates.",
        name,
    )


def quick_measurement() -> dict:
    """The quick preset's time: ``{"seconds", "how", "load", "cpus"}``. ``how`` is "measured" (the step times of the
    newest finished quick replication on this machine, with the mean machine load its steps recorded, weighted by
    their time; None for a report written before loads were kept) or "estimated" (the plan's estimate)."""
    from backend.replication.plan import PRESETS, estimate, machine_train_rate
    from backend.replication.replicate import read_markers, read_state

    for name in list_reports():
        d = reports_dir() / name
        st = read_state(d)
        if st.get("state") == "done" and st.get("preset") == "quick":
            steps = [m for k, m in read_markers(d).items() if not k.endswith(".failed")]
            took = sum(m.get("elapsed_s") or 0 for m in steps)
            if took > 0:
                machines = [(m.get("elapsed_s") or 0, m.get("machine") or {}) for m in steps]
                loaded = [(t, mc) for t, mc in machines if mc.get("load_1m") is not None]
                weight = sum(t for t, _ in loaded)
                load = sum(t * mc["load_1m"] for t, mc in loaded) / weight if weight > 0 else None
                cpus = next((mc.get("cpus") for _, mc in loaded if mc.get("cpus")), None)
                return {"seconds": took, "how": "measured", "load": load, "cpus": cpus}
    rate = machine_train_rate(PRESETS["quick"])  # this machine's rate, as the Launch form's estimate
    how = "estimated from this machine's rate" if rate else "estimated"
    return {
        "seconds": estimate(PRESETS["quick"], rate)["total_s"],
        "how": how,
        "load": None,
        "cpus": None,
        "rate": rate,
    }


def quick_duration() -> tuple[float, str]:
    """(seconds, "measured" | "estimated") for the quick preset (``quick_measurement``)."""
    m = quick_measurement()
    return m["seconds"], m["how"]


def _minutes(seconds: float) -> str:
    return f"~{max(1, round(seconds / 60))} min"


def button_label() -> str:
    """The launch button: the last measured time of the quick preset here, else the plan's estimate."""
    return f"Run the quick preset ({_minutes(quick_duration()[0])})"


def time_note() -> str:
    """Where the launch button's time comes from, in one sentence, with the machine load it was measured under."""
    m = quick_measurement()
    seconds = m["seconds"]
    if m["how"] == "measured":
        if m["load"] is None:
            under = " (the machine load was not recorded)"
        else:
            cpus = f" on {m['cpus']} CPUs" if m["cpus"] else ""
            under = f" under a machine load of {m['load']:.1f}{cpus}"
        return f"The last quick replication here took {int(seconds) // 60} min {int(seconds) % 60:02d} s{under}."
    if m.get("rate"):
        return (f"The plan estimates {_minutes(seconds)}: training at this machine's last measured "
                f"{m['rate']:,.0f} tokens/s for the base, fine-tuning and CKA at the plan's rates (`--plan` prints "
                "the breakdown).")  # fmt: skip
    return f"The plan estimates {_minutes(seconds)} on 2 CPU cores (`--plan` prints the breakdown)."


def hybrid_time_note() -> str:
    from backend.replication.hybrid import estimate_text, hybrid_estimate

    return estimate_text(hybrid_estimate("quick"))


def hybrid_button_label() -> str:
    """The second study's button: its time from this machine's measured rate (``hybrid_estimate``), or none."""
    from backend.replication.hybrid import hybrid_estimate

    est = hybrid_estimate("quick")
    when = f"~{max(1, round(est['total_s'] / 60))} min" if est["total_s"] else "time not measured here yet"
    return f"Run the second paper's study (quick, {when})"


EMPTY = (
    "**No report yet.** A report is a small replication of the paper on this machine: it trains a CLM-detour run, "
    "an MLM run and their controls from the bundled base, compares their layers (CKA) and their NER scores, and "
    "says in plain words whether each finding replicated. Make one with **{button}** above, or from a terminal: "
    "`python -m backend replicate --preset quick`."
)


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
    button = button_label()
    gr.Markdown(
        "Mini replications of the paper's three findings (`python -m backend replicate --preset quick|mini`). "
        "Each report states what was measured, what the paper found and whether it replicated, in plain words."
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
    time_md = gr.Markdown(_time_text(), elem_id="rep-time")
    launch_msg = gr.Markdown("", elem_id="rep-launch-msg")
    empty = gr.Markdown(EMPTY.format(button=button), visible=not names, elem_id="rep-empty")
    with gr.Column(visible=bool(names)) as view_col:
        status = gr.Markdown(v0["status"], elem_id="rep-status")
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
        return [
            v["status"],
            v["log"],
            gr.update(value=v["files"] or None, visible=bool(v["files"])),
            v["summary"],
            *figs,
            state,
            gr.update(visible=bool(name)),
            gr.update(visible=not name),
        ]

    view_outs = [status, log_box, files, summary, *plots, seen, view_col, empty]

    def poll(name, state):
        """Status and log every tick; the whole view again only when the report file changed."""
        st, log = status_text(name)
        if name and state.get("name") == name and _mtime(name) != state.get("report_mtime"):
            return show(name)
        return [st, log, *([gr.skip()] * (len(view_outs) - 2))]

    def listing(name):
        names_now = list_reports()
        value = name if name in names_now else (names_now[0] if names_now else None)
        return [gr.update(choices=names_now, value=value, visible=bool(names_now)), *show(value)]

    def launch(study: str = "detour"):
        try:
            msg, name = launch_quick("quick") if study == "detour" else launch_hybrid("quick")
        except DetourError as exc:
            return [f"**Not started:** {exc}", gr.skip(), *([gr.skip()] * len(view_outs))]
        names_now = list_reports()
        return [msg, gr.update(choices=names_now, value=name, visible=True), *show(name)]

    pick.change(show, inputs=[pick], outputs=view_outs, show_progress="hidden", api_name="report_view")
    keep_fresh(listing, [pick, *view_outs], inputs=[pick], button=refresh_btn)
    launch_btn.click(launch, outputs=[launch_msg, pick, *view_outs], api_name="replicate_quick")
    hybrid_btn.click(lambda: launch("hybrid"), outputs=[launch_msg, pick, *view_outs], api_name="replicate_hybrid")

    def times():
        """The button's time and its note read again: a quick replication that finished after the page was built
        shows what it took."""
        label = button_label()
        hybrid = gr.update(value=hybrid_button_label())  # this machine's rate may have been measured meanwhile
        return [gr.update(value=label), _time_text(), gr.update(value=EMPTY.format(button=label)), hybrid]

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
        "empty": empty,
        "view": view_col,
        "listing": listing,
        "times": times,
        "suites": suites,
    }


def _time_text() -> str:
    return (
        f"{time_note()} The quick preset shows the pipeline; `--preset mini` is the one to read results from "
        "(`python -m backend replicate --preset mini --plan` estimates its time). The second paper's study: "
        f"{hybrid_time_note()}"
    )


def _mtime(name: str | None) -> float | None:
    if not name:
        return None
    try:
        return (report_dir(name) / "report.json").stat().st_mtime
    except (DetourError, OSError):
        return None

"""Reports tab: the study reports found under ``reports/`` (``python -m backend replicate``), each shown as its
plain-language summary, tables and figures, with report.html / report.json to download; and buttons that launch the
detour study's quick preset and the second paper's study as detached processes (each in its own session, output to
``<report>/replicate.log``, never a pipe), so closing the browser or restarting the app never stops them. A timer
polls the status and log.

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
    ("crossover", "Against tokens: each arm's suite delta against MLM, P(improvement), held-out losses"),
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
    """A study on sweeps: its state is its sweep's (how many runs are in each state), whether its process is still
    running, and whether the report is written."""
    from backend.replication.budget_study import running_pid
    from backend.sweeps.manifest import sweep_status

    pid = running_pid(d)
    running = f" · running (pid {pid})" if pid else ""
    if not (d / "sweep" / "sweep.json").exists():
        return f"**{name}**: study{running} · preparing its data, no run queued yet"
    try:
        counts = sweep_status(d / "sweep")["counts"]
    except DetourError as exc:
        return f"**{name}**: {exc}"
    runs = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    written = "report written" if (d / "report.md").exists() else "no report yet"
    return f"**{name}**: study on a sweep{running} · runs: {runs} · {written}"


def status_text(name: str | None) -> tuple[str, str]:
    """(status Markdown, log tail) of a report folder."""
    from backend.replication.replicate import read_markers, read_state

    if not (name or "").strip():
        return "No report selected. Launch the quick preset, or run `python -m backend replicate`.", ""
    try:
        d = report_dir(name)
    except DetourError as exc:
        return f"**{exc}**", ""
    if not (d / "status.json").exists() and ((d / "sweep" / "sweep.json").exists() or (d / "study.lock").exists()):
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


QUICK = "detour-quick"  # the detour study's quick preset, where the CLI puts it by default too


def launch_quick(name: str = QUICK, extra_args: list[str] | None = None) -> tuple[str, str]:
    """Start ``python -m backend replicate --preset quick --out <reports>/<name>`` (the detour study on sweeps and
    the suite) detached. Returns (message, name).

    Refuses while that folder's study is still running; a finished or interrupted one is resumed (finished runs and
    fine-tunes are kept). The model and data are checked first, so a missing base model is said here, not in a
    log."""
    from backend.replication.budget_study import resolve_budget_study, running_pid
    from backend.replication.replicate import start_detached

    name = (name or QUICK).strip()
    if not is_plain_name(name):
        raise DetourError(f"report name '{name}': use letters, digits, '_', '-' or '.'")
    out = reports_dir() / name
    if pid := running_pid(out):
        raise DetourError(f"'{name}' is already running (pid {pid}); wait for it to finish")
    resolve_budget_study("quick")  # a clear error (base model not built, data absent) before anything starts
    proc = start_detached(out, "quick", extra_args)
    msg = f"Started the detour study (quick) in `{out}` (pid {proc.pid}). {time_note()} The status below updates."
    return msg, name


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
    """The detour study's quick preset time: ``{"seconds", "how", "load", "cpus", "rate"}``. ``how`` is "measured"
    (the wall time of the newest finished quick study on this machine, with the mean of its load at start and end)
    or "estimated" (its runs at this machine's last measured training rate plus the fine-tunes at the plan's rates;
    ``seconds`` None before a rate is measured here, or when its data is absent)."""
    from backend.core import atomic
    from backend.replication import budget_study as bs

    default = bs.BUDGET_PRESETS["quick"]
    for name in list_reports():
        d = reports_dir() / name
        s, tm = atomic.read_json(d / "settings.json"), atomic.read_json(d / "timing.json")
        ok = isinstance(s, dict) and isinstance(tm, dict) and s.get("study") == "detour-budgets"
        # only a study the button would launch: the quick preset as it is (not its budgets, seeds or arms changed)
        same = ok and all(s.get(k) == default[k] for k in ("budgets", "seeds", "finetune", "train"))
        if same and s.get("preset") == "quick" and s.get("arms") == list(bs.ARMS) and tm.get("wall_s") \
                and (d / "report.md").exists():  # fmt: skip
            loads = [(tm.get(k) or {}).get("load_1m") for k in ("load_start", "load_end")]
            loads = [x for x in loads if x is not None]
            load = sum(loads) / len(loads) if loads else None
            return {"seconds": float(tm["wall_s"]), "how": "measured", "load": load, "cpus": tm.get("cpus"),
                    "rate": None}  # fmt: skip
    try:
        p = bs.plan(bs.resolve_budget_study("quick"))
    except DetourError:  # no base model, no data: the launch says so; the button has no time to give
        return {"seconds": None, "how": "estimated", "load": None, "cpus": None, "rate": None}
    return {"seconds": p["total_s"], "how": "estimated", "load": None, "cpus": None, "rate": p["rate"]}


def quick_duration() -> tuple[float | None, str]:
    """(seconds or None, "measured" | "estimated") for the quick preset (``quick_measurement``)."""
    m = quick_measurement()
    return m["seconds"], m["how"]


def _minutes(seconds: float | None) -> str:
    return "time not measured here yet" if seconds is None else f"~{max(1, round(seconds / 60))} min"


def button_label(m: dict | None = None) -> str:
    """The launch button: the last measured time of the quick study here, else its estimate at this machine's
    training rate, else that none is measured yet (``m``: a ``quick_measurement`` read already)."""
    return f"Run the detour study (quick, {_minutes((m or quick_measurement())['seconds'])})"


def time_note(m: dict | None = None) -> str:
    """Where the launch button's time comes from, in one sentence, with the machine load it was measured under."""
    m = m or quick_measurement()
    seconds = m["seconds"]
    if m["how"] == "measured":
        if m["load"] is None:
            under = " (the machine load was not recorded)"
        else:
            cpus = f" on {m['cpus']} CPUs" if m["cpus"] else ""
            under = f" under a machine load of {m['load']:.1f}{cpus}"
        return f"The last quick detour study here took {int(seconds) // 60} min {int(seconds) % 60:02d} s{under}."
    if m.get("rate"):
        return (f"The plan estimates {_minutes(seconds)}: training at this machine's last measured "
                f"{m['rate']:,.0f} tokens/s for the base, fine-tuning at the plan's rates (`python -m backend "
                "replicate --plan` prints the breakdown).")  # fmt: skip
    return ("No training rate for the base is measured on this machine yet, so the quick study's time is not "
            "estimated (`python -m backend replicate --plan` prints its runs and fine-tunes).")  # fmt: skip


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
    "**No report yet.** A report is a small replication of the paper on this machine: from the bundled base it "
    "trains MLM, the CLM detour, a seed-noise control and two freeze interventions over three token budgets and "
    "three seeds, fine-tunes each on a biomedical NER suite, compares their layers (CKA), and says in plain words "
    "whether each finding replicated and from how many tokens the detour pays (if it does within them). Make one "
    "with **{button}** above, or from a terminal: `python -m backend replicate`."
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
    measured = quick_measurement()
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
    time_md = gr.Markdown(_time_text(measured), elem_id="rep-time")
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
        m = quick_measurement()  # once for the label and the note: it plans the study (50 ms on 2 cores)
        label = button_label(m)
        hybrid = gr.update(value=hybrid_button_label())  # this machine's rate may have been measured meanwhile
        return [gr.update(value=label), _time_text(m), gr.update(value=EMPTY.format(button=label)), hybrid]

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


def _time_text(m: dict | None = None) -> str:
    return (
        f"{time_note(m)} The quick preset shows the study at a CPU's scale; `--preset standard` (CPU) and "
        "`--preset gpu` give numbers to read (`python -m backend replicate --preset standard --plan` estimates its "
        f"time). The second paper's study: {hybrid_time_note()}"
    )


def _mtime(name: str | None) -> float | None:
    if not name:
        return None
    try:
        return (report_dir(name) / "report.json").stat().st_mtime
    except (DetourError, OSError):
        return None

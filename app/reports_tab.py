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

from backend.core.errors import DetourError
from backend.core.paths import confined, is_plain_name, read_text_confined, reports_dir, tail_text
from backend.replication.study_run import LOCK, LOG_NAME

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


def _counts(d: Path) -> str:
    """'runs: 3 done, 2 running, 40 queued' over the study's sweeps, or ''."""
    from backend.replication.study_run import sweep_dirs
    from backend.sweeps.manifest import sweep_status

    total: dict[str, int] = {}
    for sd in sweep_dirs(d):
        try:
            for state, n in sweep_status(sd)["counts"].items():
                total[state] = total.get(state, 0) + n
        except (DetourError, OSError, ValueError, KeyError):
            continue
    return "runs: " + ", ".join(f"{n} {state}" for state, n in sorted(total.items())) if total else ""


def study_state(d: Path) -> dict:
    """The study's state as the tab shows it: ``status.json`` (a dead process's 'running' reads failed), else, for a
    study written before it had one, its lock and sweep."""
    from backend.replication.study_run import read_status, running_pid

    st = read_status(d)
    if st.get("state") == "none" and ((d / "sweep" / "sweep.json").exists() or (d / LOCK).exists()):
        pid = running_pid(d)
        st = {"state": "running", "pid": pid} if pid else {"state": "finished" if (d / "report.md").exists() else
                                                                    "stopped"}  # fmt: skip
    return st


def status_text(name: str | None) -> tuple[str, str]:
    """(status Markdown, log tail) of a report folder."""
    from backend.core import atomic

    if not (name or "").strip():
        return "No report selected. Launch the quick preset, or run `python -m backend replicate`.", ""
    try:
        d = report_dir(name)
    except DetourError as exc:
        return f"**{exc}**", ""
    st = study_state(d)
    state = st.get("state", "none")
    settings = atomic.read_json(d / "settings.json")
    parts = [f"**{name}**: {state}"]
    if isinstance(settings, dict) and settings and not settings.get("study"):
        parts.append("a report of the retired one-task pipeline (its report stays readable; it is not rerun)")
    if state == "running":
        step = st.get("current_step")
        total = st.get("steps_total")
        at = f"step {step} ({st.get('steps_done') or 0}/{total} done)" if step and total else "preparing"
        parts.append(f"{at}, pid {st.get('pid')}")
    if counts := _counts(d):
        parts.append(counts)
    if state in ("done", "finished") or (d / "report.md").exists():
        parts.append("report written" if (d / "report.md").exists() else "no report yet")
    if st.get("error"):
        parts.append(f"{'note' if state == 'cancelled' else 'error'}: {st['error']}")
    return " · ".join(parts), _tail(d / LOG_NAME)


def controls(name: str | None) -> tuple[bool, bool]:
    """(Stop shown, Resume shown) for the selected report: Stop while its study runs or its runs still train,
    Resume once it was stopped or failed and records how to resume."""
    from backend.core import atomic

    if not (name or "").strip():
        return False, False
    try:
        d = report_dir(name)
    except DetourError:
        return False, False
    st = study_state(d)
    busy = "queued" in _counts(d) or "running" in _counts(d)
    raw = atomic.read_json(d / "status.json")
    resumable = isinstance(raw, dict) and bool(raw.get("resume_argv"))
    return st.get("state") == "running" or busy, st.get("state") in ("cancelled", "failed") and resumable and not busy


def stop_study(name: str | None) -> str:
    """Stop the selected study (``study_run.stop``: its process signalled, its runs cancelled); one line."""
    from backend.replication.study_run import stop

    msgs = stop(report_dir(name))
    return f"Stopping `{name}`: " + "; ".join(msgs[:3]) + (f" (and {len(msgs) - 3} more)" if len(msgs) > 3 else "")


def resume_study(name: str | None) -> str:
    """Resume the selected study with the command that ran it (what rerunning it in a terminal does)."""
    from backend.replication.study_run import live_pid, resume_argv, start_detached

    d = report_dir(name)
    if pid := live_pid(d):
        raise DetourError(f"'{name}' is already running (pid {pid})")
    proc = start_detached(d, resume_argv(d))
    return f"Resumed `{name}` (pid {proc.pid}): finished runs and fine-tunes are kept."


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
    from backend.engine.rates import describe

    return {"seconds": p["total_s"], "how": "estimated", "load": None, "cpus": None, "rate": p["rate"],
            "rate_source": describe(p["rate_pick"]) if p["rate_pick"] else None,
            "finetune_source": p["finetune_text"]}  # fmt: skip


def quick_duration() -> tuple[float | None, str]:
    """(seconds or None, "measured" | "estimated") for the quick preset (``quick_measurement``)."""
    m = quick_measurement()
    return m["seconds"], m["how"]


def _minutes(seconds: float | None) -> str:
    return "time not measured here yet" if seconds is None else f"~{max(1, round(seconds / 60))} min"


def button_label() -> str:
    """The launch button: the last measured time of the quick study here, else its estimate at this machine's
    training rate, else that none is measured yet."""
    return f"Run the detour study (quick, {_minutes(quick_duration()[0])})"


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
        return f"The last quick detour study here took {int(seconds) // 60} min {int(seconds) % 60:02d} s{under}."
    if m.get("rate"):
        return (f"The plan estimates {_minutes(seconds)}: training at {m['rate']:,.0f} tokens/s for the base "
                f"({m['rate_source']}), fine-tuning at {m['finetune_source']} (`python -m backend replicate "
                "--plan` prints the breakdown).")  # fmt: skip
    return ("No training rate for the base is measured on this machine yet, so the quick study's time is not "
            "estimated (`python -m backend replicate --plan` prints its runs and fine-tunes).")  # fmt: skip


_POWER: dict = {}


def power_note() -> str:
    """The quick study's smallest detectable difference and where its variance was measured (``replicate --plan``
    says it in full), read again at most once a minute (it reads the earlier studies' results)."""
    import time

    if _POWER.get("at", 0) > time.time() - 60 and _POWER.get("root") == str(reports_dir()):
        return _POWER["text"]
    from backend.replication import budget_study as bs
    from backend.replication.study_power import detour_power, pilot_command

    try:
        p = detour_power(bs.resolve_budget_study("quick"))
    except DetourError:
        return ""
    d = p["design"]
    at = f"{d['pretraining_seeds']} pretraining seeds x {d['finetune_seeds']} fine-tuning seed(s) x {d['tasks']} tasks"
    if p["mde"] is None:
        text = (f"**Detectable difference:** not measured at the quick preset's settings yet; "
                f"`{pilot_command('detour', 'quick')}` measures it.")  # fmt: skip
    else:
        src = ", ".join(f"`{x}`" for x in p["sources"])
        text = (f"**Detectable difference:** ±{p['mde']:.1f} points (80% power, 95% level) at {at}, from the seed "
                f"noise measured in {src}; the paper's gains are +0.3 to +2.8 points. To detect 1 point would take "
                f"{p['take']['pretraining_seeds'] or 'over 10,000'} pretraining seeds at these settings "
                "(`replicate --plan` lists the other ways).")  # fmt: skip
    _POWER.update(at=time.time(), root=str(reports_dir()), text=text)
    return text


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
    "trains MLM, the CLM detour, a seed-noise control and two freeze interventions over two token budgets and "
    "five pretraining seeds, fine-tunes each on a biomedical NER suite, compares their layers (CKA), and says in "
    "plain words whether each finding replicated and from how many tokens the detour pays (if it does within "
    "them). Make one with **{button}** above, or from a terminal: `python -m backend replicate`."
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
    time_md = gr.Markdown(_time_text(power=False), elem_id="rep-time")  # its power follows on page load
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
        "stop": stop_btn,
        "resume": resume_btn,
        "empty": empty,
        "view": view_col,
        "listing": listing,
        "times": times,
        "suites": suites,
    }


def _time_text(power: bool = True) -> str:
    """The quick study's time and (once the page has loaded: it reads the earlier studies) its detectable
    difference, with where the presets go further."""
    said = power_note() if power else ""
    return (
        f"{time_note()} {said} The quick preset shows the study at a CPU's scale; `--preset standard` (CPU) and "
        "`--preset gpu` give numbers to read (`python -m backend replicate --preset standard --plan` gives their time "
        f"and power). The second paper's study: {hybrid_time_note()}"
    )


def _mtime(name: str | None) -> float | None:
    if not name:
        return None
    try:
        return (report_dir(name) / "report.json").stat().st_mtime
    except (DetourError, OSError):
        return None

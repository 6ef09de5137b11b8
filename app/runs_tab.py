"""Runs tab: every run on disk with status and progress; live curves polled from the run directories by a timer;
log tail; Cancel / Resume through ``backend.runs.jobs``; Export of a finished run (``export_panel``). Nothing here
trains: it only reads run directories."""

from __future__ import annotations

import textwrap
from pathlib import Path

from app import export_panel, run_folder, throughput_panel, timeline_editor, warn
from app.figure_cache import FileKeyed
from app.throughput_panel import panel_markdown
from backend.analysis import plots
from backend.core.errors import ConfigError, DetourError
from backend.core.paths import runs_dir
from backend.engine.config import check_run_name
from backend.engine.progress import run_progress
from backend.engine.rundir import list_runs, no_run, read_log, read_metrics, read_status, root_problem
from backend.runs import jobs

POLL_S = 2.0
LOG_WIDTH = 110  # characters: the log panel does not wrap (CodeMirror's wrapping breaks its line numbers here)
TABLE_COLUMNS = ["run", "state", "phase", "step", "tokens", "%", "ETA", "time", "tok/s", "train loss", "held-out MLM",
                 "held-out CLM", "error"]  # fmt: skip
# each column's width in pixels: wide enough for what it holds (a loss of 10.108, 45.1k/45.1k tokens, "cancelled")
# at 8.4 px a character plus the cell's 16 px of padding, so no number breaks across lines (shares of the width broke
# "10.108" into "10." and "108" at 1,000 px). On a page narrower than their sum (1,164 px) the table scrolls sideways
# with the run's name kept in view (``main.CSS``). The run's name and the error wrap.
WIDTHS = {"run": 140, "state": 94, "phase": 64, "step": 96, "tokens": 112, "%": 56, "ETA": 94, "time": 76, "tok/s": 60,
          "train loss": 70, "held-out MLM": 76, "held-out CLM": 76, "error": 150}  # fmt: skip
COLUMN_WIDTHS = [f"{WIDTHS[c]}px" for c in TABLE_COLUMNS]
FIGURES = [  # (row type, metrics key, elem id): the Runs tab's curves, in their order on the page
    ("train", "loss", "plot-train"),
    ("eval", "eval_mlm_loss", "plot-eval"),
    ("eval", "eval_clm_loss", "plot-eval-clm"),
    ("train", "lr", "plot-lr"),
    ("train", "grad_norm", "plot-grad-norm"),
    ("train", "tokens_per_s", "plot-tokens-per-s"),
]
CURVES = FileKeyed(32)  # the curves of each set of runs, shared by every page until a metrics file changes


def run_infos():
    """Runs newest first (``state`` accounts for a dead process: running + gone = failed)."""
    runs = list_runs(runs_dir())
    return sorted(runs, key=lambda r: (r.status.get("created_at") or 0, r.name), reverse=True)


_summaries: dict[Path, tuple[tuple, list[dict], dict]] = {}  # metrics.jsonl -> ((size, mtime), rows, table numbers)


def _metrics(run_dir: Path) -> tuple[list[dict], dict]:
    """The run's metrics rows and the table's losses, read again only when metrics.jsonl changed (the table is
    polled)."""
    p = run_dir / "metrics.jsonl"
    try:
        st = p.stat()
    except OSError:
        return [], {}
    sig = (st.st_size, st.st_mtime_ns)
    hit = _summaries.get(p)
    if hit is None or hit[0] != sig:
        try:
            rows = read_metrics(run_dir)
        except DetourError:  # a metrics.jsonl that links out of the run folder: not read (the log panel says why)
            rows = []
        hit = _summaries[p] = (sig, rows, plots.metrics_summary(rows))
    return hit[1], hit[2]


_config_problems: dict[Path, tuple[tuple, str | None]] = {}  # config.yaml -> ((size, mtime), why unreadable)


def config_problem(run_dir: Path) -> str | None:
    """Why the run's config.yaml cannot be read (an unknown key, an empty file, a link out of the folder), or None;
    read again only when the file changed (the table is polled). Such a run is listed as unreadable, never fatal."""
    from backend.engine.rundir import read_config

    p = run_dir / "config.yaml"
    try:
        st = p.lstat()
    except OSError as exc:
        return f"config.yaml: {exc.strerror or exc}"
    sig = (st.st_size, st.st_mtime_ns, st.st_ino)
    hit = _config_problems.get(p)
    if hit is None or hit[0] != sig:
        try:
            read_config(run_dir)
            why = None
        except (DetourError, OSError, ValueError) as exc:  # the file's own path is the row's: not repeated
            text = exc.allowed if isinstance(exc, ConfigError) and exc.key == "config" else str(exc)
            why = " ".join(text.replace(str(p), "config.yaml").split())
        hit = _config_problems[p] = (sig, why)
    return hit[1]


def metrics_summary(run_dir: Path) -> dict:
    """The run table's losses and throughput (cached on metrics.jsonl's size and time)."""
    return _metrics(run_dir)[1]


def runs_table() -> list[list]:
    """One row per run; state, step, ETA and tok/s are ``engine.progress.run_progress``, the reading the throughput
    panel (the doctor) shows too."""
    rows = []
    for r in run_infos():
        status = {**r.status, "state": r.state}
        metrics, summary = _metrics(r.path)
        if why := config_problem(r.path):  # listed with its reason: the app starts whatever one folder holds
            status["error"] = f"unreadable: {why}"
        row = plots.run_summary(r.name, status, summary, progress=run_progress(status, metrics))
        rows.append([row[c] for c in TABLE_COLUMNS])
    return rows


def run_names() -> list[str]:
    return [r.name for r in run_infos()]


def default_run() -> str | None:
    """The run the log panel shows first: the newest running one, else the newest that has started, else the
    newest (a queued run has no log yet; an old failed run is not what one opens the tab for)."""
    runs = run_infos()
    for wanted in (lambda r: r.state == "running", lambda r: r.state != "queued", lambda r: True):
        picked = next((r.name for r in runs if wanted(r)), None)
        if picked:
            return picked
    return None


def default_selection(limit: int = 2) -> list[str]:
    """What the curves show when nothing is ticked: the running runs, then the newest ones (a pair's sibling)."""
    runs = run_infos()
    picked = [r.name for r in runs if r.state == "running"][:limit]
    for r in runs:
        if len(picked) >= limit:
            break
        if r.name not in picked:
            picked.append(r.name)
    return picked


def run_path(name: str) -> Path:
    """A run name from the UI -> its folder (names only: no paths reach the file system from here)."""
    check_run_name(name)
    p = run_folder(name)  # resolved, and refused when it is a link out of the runs folder
    if p is None:
        raise no_run(name)
    return p


def curves(names: list[str] | None, axis: str = "tokens_seen") -> tuple:
    """One figure per ``FIGURES`` entry for the runs ``names`` (default: ``default_selection``)."""
    names = list(names or []) or default_selection()
    paths = {}
    for n in names:
        try:
            paths[n] = run_path(n) / "metrics.jsonl"
        except DetourError:
            continue

    def build() -> tuple:
        data = {}
        for n, p in paths.items():
            try:
                data[n] = read_metrics(p.parent)
            except DetourError:
                continue
        return tuple(
            plots.train_metric_figure(data, key, axis) if kind == "train" else plots.eval_loss_figure(data, axis, key)
            for kind, key, _ in FIGURES
        )

    return CURVES.get((tuple(paths), axis), paths.values(), build)


NO_RUNS = (
    "No runs yet. Make one on the Launch tab: the defaults train the bundled model (a few minutes on a laptop; "
    "recipe 'pair' trains a CLM-detour run and its MLM sibling), then press 'Launch'. It shows here as it "
    "queues, and this page follows it. From a terminal: python -m backend train --name my-run"
)


def log_tail(name: str | None, lines: int = 40) -> str:
    """The end of the run's train.log, after its error in full when it has one (the table shows its start); with no
    run at all, what to do first."""
    if not name:
        return root_problem() or ("" if run_infos() else textwrap.fill(NO_RUNS, LOG_WIDTH))
    try:
        d = run_path(name)
    except DetourError as exc:
        return str(exc)
    st = read_status(d)
    head = textwrap.fill(f"[{st.get('state')}] {st['error']}", LOG_WIDTH) + "\n\n" if st.get("error") else ""
    p = d / "train.log"
    if not p.exists() and not p.is_symlink():
        return head + "(no train.log yet: the run is waiting in the queue)"
    try:
        text = read_log(d)  # a log that links out of the run folder is refused, never shown
    except (OSError, DetourError) as exc:  # a folder, a permission, a link out: one line, never a raw error
        return head + warn(exc)
    return head + "\n".join(text.splitlines()[-lines:])


def cancel_run(name: str | None) -> str:
    if not name:
        return "choose a run first"
    try:
        return "" + jobs.cancel(run_path(name))
    except (DetourError, OSError) as exc:
        return warn(exc)


def resume_run(name: str | None, max_concurrent: int | None = None) -> str:
    if not name:
        return "choose a run first"
    try:
        return "" + jobs.resume(run_path(name), root=runs_dir(), max_concurrent=max_concurrent)
    except (DetourError, OSError) as exc:
        return warn(exc)


def action_state(name: str | None, message: str) -> dict | None:
    """What the message under Cancel/Resume spoke of: the run and the state it left it in (None: nothing to follow)."""
    if not name or message.startswith("choose"):
        return None
    try:
        return {"run": name, "state": read_status(run_path(name)).get("state")}
    except (DetourError, OSError):
        return None


def action_followup(action: dict | None) -> tuple[str | None, dict | None]:
    """(new message or None to leave it, what to follow next). 'queued to resume' stayed under the buttons after the
    run had finished: once the run moves on from the state the action left it in, the line says where it is now."""
    if not action:
        return None, None
    try:
        state = read_status(run_path(action["run"])).get("state")
    except (DetourError, OSError):
        return None, None
    if state == action["state"]:
        return None, action
    return f"{action['run']}: {state} now", None


def ensure_worker_if_queued(max_concurrent: int | None = None) -> int | None:
    """At app start: queued runs with no worker (the machine rebooted, the worker was killed) get one."""
    if any(r.state == "queued" for r in run_infos()):
        return jobs.ensure_worker(runs_dir(), max_concurrent)
    return None


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return -1


def poll_update(
    selected, log_name, axis: str, state: dict | None, force: bool = False, pinned: str | None = None
) -> dict:
    """One timer tick: what changed since ``state``. ``None`` for a part = unchanged (the UI sends nothing), so an
    idle page costs a few stat() calls, not a re-sent figure every two seconds. ``pinned``: the run the user last
    pressed Cancel or Resume on; the Run picker stays on it (it jumped to the pair's sibling, which then started,
    within one tick, and the next Resume or Cancel went to that run)."""
    state = dict(state or {})
    names = run_names()
    out = {"names": names, "names_changed": names != state.get("names"), "selected": list(selected or [])}
    if out["names_changed"]:
        out["selected"] = [s for s in out["selected"] if s in names]
    # the log follows the running run (a pair's second run, a new launch) until the user picks another one
    auto = state.get("log_auto", log_name if "names" not in state else None)
    vanished = log_name in (state.get("names") or []) and log_name not in names  # a deleted run; a typo stays
    follow = (log_name in (None, auto) and (log_name is None or log_name != pinned)) or vanished
    picked = default_run() if follow else log_name
    out["log_run_changed"] = picked != log_name
    out["log_run"] = log_name = picked
    rows = runs_table()
    out["table"] = rows if force or rows != state.get("rows") else None
    plotted = [n for n in (out["selected"] or default_selection()) if n in names]  # names only, never paths
    plot_sig = [axis, *[(n, _size(runs_dir() / n / "metrics.jsonl")) for n in plotted]]
    out["curves"] = curves(plotted, axis) if force or plot_sig != state.get("plot_sig") else None
    log_sig = [
        log_name,
        *[_size(runs_dir() / log_name / f) if log_name in names else -1 for f in ("train.log", "status.json")],
    ]
    out["log"] = log_tail(log_name) if force or log_sig != state.get("log_sig") else None
    # the doctor's panel follows the picked run's metrics, the timeline the plotted runs (their configs and status)
    panel_sig = [  # its state and ETA change with status.json (a run's end) as the table's do
        log_name,
        *[_size(runs_dir() / log_name / f) if log_name in names else -1 for f in ("metrics.jsonl", "status.json")],
        next((r[1] for r in rows if r[0] == log_name), None),
    ]
    out["panel"] = panel_markdown(log_name) if force or panel_sig != state.get("panel_sig") else None
    timeline_sig = [axis, *[(n, _size(runs_dir() / n / "status.json") > 0) for n in plotted]]
    fresh = force or timeline_sig != state.get("timeline_sig")
    out["timeline"] = timeline_editor.runs_figure(plotted, axis, default_selection) if fresh else None
    out["state"] = {"names": names, "rows": rows, "plot_sig": plot_sig, "log_sig": log_sig, "panel_sig": panel_sig,
                    "timeline_sig": timeline_sig, "log_auto": log_name if follow else None}  # fmt: skip
    return out


# --- UI -----------------------------------------------------------------------------------------


def build(ctx) -> dict:
    import gradio as gr
    from gradio.context import get_render_context

    from app.refresh import on_show

    tab = get_render_context()
    names = run_names()
    with gr.Row():
        axis = gr.Radio(["tokens_seen", "step"], value="tokens_seen", label="x axis", scale=2, min_width=300)
        live = gr.Checkbox(value=True, label=f"Live (poll every {POLL_S:g} s)", scale=1, min_width=200)
        refresh_btn = gr.Button("Refresh", scale=1, min_width=120)
    table = gr.Dataframe(
        value=None,  # filled when the tab is shown (``poll``), not on every page's opening
        headers=TABLE_COLUMNS,
        column_widths=COLUMN_WIDTHS,
        interactive=False,
        wrap=True,
        label="Runs (an error's full text: pick the run below)",
        elem_id="runs-table",
        max_height=300,
    )
    compare = gr.Dropdown(
        choices=names,
        value=[],
        multiselect=True,
        label="Compare runs (overlay)",
        info="empty = the running runs, then the newest ones (two)",
        elem_id="runs-compare",
        allow_custom_value=True,  # runs appear after the page was built; handlers accept run names only
    )
    plots_ = []  # drawn when the tab is shown (``poll``): the page carries no figure for a tab it does not show
    for i in range(0, len(FIGURES), 2):
        with gr.Row():
            for _, _, elem_id in FIGURES[i : i + 2]:
                plots_.append(gr.Plot(value=None, show_label=False, elem_id=elem_id))
    timeline = timeline_editor.build_runs(compare, axis, default_selection)  # the phases under the curves, same x
    with gr.Row():
        with gr.Column(scale=3):
            log_run = gr.Dropdown(
                choices=names,
                value=None,  # the running run, else the newest: chosen when the tab is shown (``poll``)
                label="Run",
                info="its log, and Cancel / Resume",
                elem_id="runs-selected",
                allow_custom_value=True,
            )
            log_box = gr.Code(
                value="",
                label="train.log (tail; a failed run's error first)",
                lines=14,
                interactive=False,
                elem_id="runs-log",
            )
        with gr.Column(scale=1, min_width=200):
            cancel_btn = gr.Button("Cancel", variant="stop", elem_id="runs-cancel")
            resume_btn = gr.Button("Resume", elem_id="runs-resume")
            action_msg = gr.Markdown("", elem_id="runs-action")
    export_panel.build(log_run)  # the picked finished run as a folder with its model card
    panel = throughput_panel.build(log_run)  # the doctor's diagnosis of the run picked here, following it
    known = gr.State({})  # empty: the first tick of every page sends the run names and curves as they are now
    action = gr.State(None)  # the run the message under Cancel/Resume speaks of, and the state it left it in
    pinned = gr.State(None)  # the run last cancelled or resumed here: the Run picker stays on it (``poll_update``)
    timer = gr.Timer(POLL_S, active=True)

    def poll(selected, log_name, axis_, state, followed, pin, force=False):
        up = poll_update(selected, log_name, axis_, state, force=force, pinned=pin)
        note, followed = action_followup(followed)
        sk = gr.skip()
        # new choices keep the user's ticks (a value sent here would undo a tick made since this tick began)
        dropped = up["selected"] != list(selected or [])
        sel_up = gr.update(choices=up["names"], **({"value": up["selected"]} if dropped else {}))
        sel_up = sel_up if up["names_changed"] else sk
        log_value = {"value": up["log_run"]} if up["log_run_changed"] else {}
        log_up = gr.update(choices=up["names"], **log_value) if up["names_changed"] or log_value else sk
        table_up = sk if up["table"] is None else (up["table"] or None)
        figs = up["curves"] if up["curves"] is not None else (sk,) * len(FIGURES)
        log_val = sk if up["log"] is None else up["log"]
        panel_val = sk if up["panel"] is None else up["panel"]
        timeline_val = sk if up["timeline"] is None else up["timeline"]
        note_up = gr.skip() if note is None else note
        return table_up, *figs, log_val, sel_up, log_up, panel_val, timeline_val, up["state"], note_up, followed

    def refresh(selected, log_name, axis_, state, followed, pin):
        return poll(selected, log_name, axis_, state, followed, pin, force=True)

    outs = [table, *plots_, log_box, compare, log_run, panel, timeline, known, action_msg, action]
    timer.tick(
        poll,
        inputs=[compare, log_run, axis, known, action, pinned],
        outputs=outs,
        show_progress="hidden",
        queue=False,
        api_name="runs_poll",
    )
    refresh_btn.click(refresh, inputs=[compare, log_run, axis, known, action, pinned], outputs=outs,
                      api_name="runs_refresh")  # fmt: skip
    # shown: the table, curves and log as they are now, without waiting for the timer's first tick
    gr.on(on_show(tab), poll, inputs=[compare, log_run, axis, known, action, pinned], outputs=outs, queue=False,
          show_progress="hidden", api_visibility="private")  # fmt: skip
    live.change(lambda on: gr.Timer(active=on), inputs=[live], outputs=[timer], api_visibility="private")

    def replot(selected, axis_):
        return curves(selected, axis_)

    compare.change(replot, inputs=[compare, axis], outputs=plots_, show_progress="hidden", api_name="curves")
    axis.change(replot, inputs=[compare, axis], outputs=plots_, show_progress="hidden", api_visibility="private")
    log_run.change(log_tail, inputs=[log_run], outputs=[log_box], show_progress="hidden", api_name="log_tail")

    def cancel(name):
        msg = cancel_run(name)
        return msg, action_state(name, msg), name or None

    def resume(name):
        msg = resume_run(name, ctx.max_concurrent)
        return msg, action_state(name, msg), name or None

    cancel_btn.click(cancel, inputs=[log_run], outputs=[action_msg, action, pinned], api_name="cancel")
    resume_btn.click(resume, inputs=[log_run], outputs=[action_msg, action, pinned], api_name="resume")
    return {
        "table": table,
        "plot_train": plots_[0],
        "plot_eval": plots_[1],
        "plots": plots_,
        "timer": timer,
        "live": live,
    }

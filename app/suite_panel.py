"""Reports tab, "Task suites": pick a suite (configs/suites), pick models, run ``python -m backend evaluate --suite``
detached (output to ``<evals>/suites/<name>/suite.log``, so closing the browser never stops it), and read its
progress line with the ETA and, once written, the suite report (table, aggregate panel, verdict, delta figure) and,
over three or more models, its leaderboard (table and figure: scores, rank intervals, tie groups).

The handlers are plain functions (tested without a browser); ``build()`` only wires them. The evaluation itself is
the CLI's: the same backend function, the same folder layout, resumable by running it again."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from backend.core import atomic
from backend.core.errors import DetourError
from backend.core.paths import is_plain_name
from backend.evaluation.leaderboard_report import ROW_HEADERS

LOG = "suite.log"
MODEL_WORD = re.compile(r"\S+ \(cached, [^)]*\)|[^\s,]+")  # a picker's label pasted whole is one model
PID = "suite.pid"


def suites_root() -> Path:
    from backend.core.catalogue import suites_dir

    return suites_dir()


def suite_choices() -> list[tuple[str, str]]:
    from backend.evaluation.suite import list_suites

    return [(p.stem, str(p)) for p in list_suites()]


def suite_runs() -> list[str]:
    """Suite evaluations started here (newest first), by folder name."""
    return [v for _, v in suite_run_choices()]


def suite_run_choices() -> list[tuple[str, str]]:
    """(label, folder name) of each suite evaluation under ``<evals>/suites`` (``catalogue.entries``), newest
    first; one that cannot be read is labelled ``NAME (unreadable: why)``, never fatal."""
    from backend.core import catalogue

    def newest(d: Path) -> float:
        try:
            return max((p.lstat().st_mtime for p in d.iterdir()), default=d.lstat().st_mtime)
        except OSError:
            return 0.0

    found = catalogue.entries("suite", suites_root(), read=_readable)
    return [(e.label(), e.name) for e in sorted(found, key=lambda e: newest(e.path), reverse=True)]


def _readable(out: Path) -> None:
    """Raise when the suite's report exists but cannot be shown (a link out of the folder, torn JSON)."""
    from backend.core.paths import confined

    for f in ("suite.json", "suite.md"):
        if (out / f).exists() or (out / f).is_symlink():
            confined(out / f, out)
    if (out / "suite.json").exists():
        json.loads((out / "suite.json").read_text(encoding="utf-8"))


def default_name(suite: str | None) -> str:
    """The output name a picked suite starts with: its own name (the folder ``<evals>/suites/<name>``), so two
    suites never share a folder by default."""
    from backend.evaluation.suite import load_suite

    if not (suite or "").strip():
        return ""
    try:
        return load_suite(suite)["name"]
    except DetourError:
        return Path(suite).stem


def _running(out: Path) -> int | None:
    from backend.core.process import pid_alive

    try:
        pid = int((out / PID).read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def argv_for(suite: str, models: list[str], out: Path, labels: list[str], caps: dict) -> list[str]:
    argv = [sys.executable, "-m", "backend", "evaluate", "--suite", suite, "--models", *models, "--out", str(out)]
    if labels:
        argv += ["--labels", *labels]
    for k, v in caps.items():
        if v not in (None, "", 0):
            argv += [f"--{k.replace('_', '-')}", str(int(v))]
    return argv + ["--no-keep-models"]


def suite_models(models_text: str) -> list[str]:
    """The Models box -> what ``evaluate --models`` is given. Each name is resolved as in every model field
    (``app.check_model_spec``), so one that names nothing is refused here, with the names it was close to, before
    anything starts. A name is passed on as its resolved name (a run by its name: the evaluation calls it so; a
    cached model's label: its hub id), a path made absolute."""
    from app import check_model_spec, looks_like_path, model_name

    typed = MODEL_WORD.findall(models_text or "")
    if not typed:
        raise DetourError("models: give at least one (a bundled name, a run, a model folder or a hub id)")
    models = []
    for i, m in enumerate(typed, 1):
        checked = check_model_spec(m, f"model {i}")
        models.append(checked if looks_like_path(m) or not Path(checked).is_absolute() else model_name(m))
    return models


def default_labels(models_text: str, models: list[str]) -> list[str]:
    """What the report calls each model when no labels are typed: a run by its name (typed as ``../runs/X`` too),
    a picker's label by its hub id, any other folder as it was typed; never the absolute path it resolved to. [] when
    two would read alike (the evaluation then names them as it does)."""
    from app import looks_like_path, model_name
    from backend.core.catalogue import run_owning

    out = []
    for typed, passed in zip(MODEL_WORD.findall(models_text or ""), models, strict=True):
        run = run_owning(passed) if looks_like_path(typed) else None
        if run is not None and Path(passed).absolute() in (run, run / "final"):
            out.append(run.name)
        else:
            out.append(model_name(typed).rstrip("/") if looks_like_path(typed) else passed)
    return out if len(set(out)) == len(out) else []


def start_suite(suite: str, models_text: str, labels_text: str, name: str, caps: dict | None = None) -> str:
    """Check everything a run needs (the suite file key by key, each model), then start it detached. Returns the
    run's name; raises DetourError with one line otherwise."""
    from backend.core.process import spawn_detached
    from backend.evaluation.suite import load_suite

    if not (suite or "").strip():
        raise DetourError("suite: pick one (configs/suites/*.yaml)")
    spec = load_suite(suite)
    models = suite_models(models_text)
    labels = [x for x in re.split(r"[\s,]+", labels_text or "") if x]
    if labels and len(labels) != len(models):
        raise DetourError(f"labels: give one per model ({len(models)}) or none")
    labels = labels or default_labels(models_text, models)
    name = (name or spec["name"]).strip()
    if not is_plain_name(name):
        raise DetourError(f"name '{name}': use letters, digits, '_', '-' or '.'")
    out = suites_root() / name
    if pid := _running(out):
        raise DetourError(f"'{name}' is still running (pid {pid}); wait for it, or give another name")
    from backend.core.catalogue import claim_folder

    claim_folder(out, "suite", spec["name"], flag="name")  # another suite's folder, or anything else: refused
    proc = spawn_detached(argv_for(spec["path"], models, out, labels, caps or {}), out / LOG)
    atomic.write_text(out / PID, str(proc.pid))
    return name


def _last_progress(log: Path) -> str:
    try:
        lines = [ln for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    prog = [ln for ln in lines if ln.startswith("[task ")]
    err = [ln for ln in lines if ln.startswith("error:")]
    return err[-1] if err else (prog[-1] if prog else (lines[-1] if lines else ""))


def suite_view(name: str | None) -> dict:
    """``{status, report, figure, board, board_figure}`` of suite run ``name``: the latest progress line (task, run,
    epoch, suite ETA), the suite report's Markdown once written, its first per-task delta figure, and its
    leaderboard's rows and figure (None with fewer than three models)."""
    from backend.evaluation.leaderboard_report import leaderboard_figure, leaderboard_rows
    from backend.evaluation.suite_report import delta_figure

    view = {"status": "", "report": "", "figure": None, "board": None, "board_figure": None}
    if not name:
        return view
    if not is_plain_name(name):
        view["status"] = f"**'{name}' is not a suite run name**"
        return view
    out = suites_root() / name
    pid = _running(out)
    line = _last_progress(out / LOG)
    view["status"] = (f"**{name}**: running (pid {pid})" if pid else f"**{name}**: not running") + (
        f" · `{line}`" if line else ""
    )
    try:
        _readable(out)
        if (out / "suite.md").exists():
            view["report"] = (out / "suite.md").read_text(encoding="utf-8")
        if (out / "suite.json").exists():
            rep = json.loads((out / "suite.json").read_text(encoding="utf-8"))
            if isinstance(rep, dict) and rep.get("comparisons"):
                view["figure"] = delta_figure(rep["comparisons"][0])
            if isinstance(rep, dict) and rep.get("leaderboard"):
                view["board"] = leaderboard_rows(rep["leaderboard"])
                view["board_figure"] = leaderboard_figure(rep["leaderboard"])
    except (DetourError, OSError, ValueError) as exc:  # never fatal to the page
        view["report"] = f"⚠ {' '.join(str(exc).split())}"
    return view


def report_mtime(name: str | None) -> float | None:
    """When the suite's suite.json was written (the poll redraws the figure only when it changed)."""
    if not name or not is_plain_name(name):
        return None
    try:
        return (suites_root() / name / "suite.json").stat().st_mtime
    except OSError:
        return None


def listing(name: str | None) -> list:
    """The suite-run list and the picked run's view, read again (page load, tab select, Refresh)."""
    import gradio as gr

    choices = suite_run_choices()
    values = [v for _, v in choices]
    value = name if name in values else (values[0] if values else None)
    v = suite_view(value)
    return [gr.update(choices=choices, value=value), v["status"], v["report"], v["figure"], *board_updates(v),
            report_mtime(value)]  # fmt: skip


def board_updates(v: dict) -> list:
    """The leaderboard's table and figure, shown only where the suite ranks three or more models."""
    import gradio as gr

    shown = v["board"] is not None
    return [gr.update(value=v["board"] if shown else None, visible=shown),
            gr.update(value=v["board_figure"], visible=shown)]  # fmt: skip


def build(refresh=None) -> dict:
    """The 'Task suites' section (inside the Reports tab); ``refresh``: the tab's Refresh button."""
    import gradio as gr

    from app.refresh import keep_fresh

    choices = suite_choices()
    run_choices = suite_run_choices()
    runs = [v for _, v in run_choices]
    with gr.Accordion("Task suites: several tasks, one verdict", open=True):
        gr.Markdown(
            "Fine-tune each model on every task of a suite and pool the tasks (`python -m backend evaluate --suite`): "
            "models x tasks table, IQM and P(improvement) (descriptive), and one verdict over the suite by the "
            "few-seed rule (a t interval that must exclude 0: see the guide's Evaluation page). "
            "Caps left at 0 keep the suite's settings."
        )
        with gr.Row():
            suite = gr.Dropdown(choices=choices, value=choices[0][1] if choices else None, label="Suite",
                                elem_id="suite-pick", scale=2)  # fmt: skip
            models = gr.Textbox(label="Models (space-separated; the first is the reference)", elem_id="suite-models",
                                placeholder="detour-tiny-en runs/my-run", scale=3)  # fmt: skip
            labels = gr.Textbox(label="Labels (optional, one per model)", elem_id="suite-labels", scale=2)
            name = gr.Textbox(label="Name (output folder)", value=default_name(choices[0][1]) if choices else "",
                              elem_id="suite-name", scale=1)  # fmt: skip
        with gr.Row():
            seeds = gr.Number(label="Seeds", value=0, precision=0, elem_id="suite-seeds")
            epochs = gr.Number(label="Epochs", value=0, precision=0, elem_id="suite-epochs")
            max_train = gr.Number(label="Max train examples", value=0, precision=0, elem_id="suite-max-train")
            max_eval = gr.Number(label="Max eval examples", value=0, precision=0, elem_id="suite-max-eval")
            run_btn = gr.Button("Run the suite", variant="primary", elem_id="suite-run")
        msg = gr.Markdown("", elem_id="suite-msg")
        pick = gr.Dropdown(choices=run_choices, value=runs[0] if runs else None, label="Suite run",
                           elem_id="suite-runs", allow_custom_value=True)  # fmt: skip
        v0 = suite_view(runs[0] if runs else None)
        status = gr.Markdown(v0["status"], elem_id="suite-status")
        board = gr.Dataframe(value=v0["board"], headers=ROW_HEADERS, interactive=False, visible=v0["board"] is not None,
                             label="Leaderboard: models sharing a tie group cannot be told apart (95%, all pairs "
                             "together)", elem_id="suite-board")  # fmt: skip
        board_fig = gr.Plot(value=v0["board_figure"], visible=v0["board"] is not None, show_label=False,
                            elem_id="suite-board-fig")  # fmt: skip
        report = gr.Markdown(v0["report"], elem_id="suite-report")
        fig = gr.Plot(value=v0["figure"], label="Δ per task (95% CI)", elem_id="suite-fig")
        seen = gr.State(report_mtime(runs[0] if runs else None))  # suite.json's time when the figure was drawn
    timer = gr.Timer(5.0, active=True)

    def show(n):
        v = suite_view(n)
        return v["status"], v["report"], v["figure"], *board_updates(v)

    def run(s, m, lab, n, sd, ep, mt, me):
        caps = {"seeds": sd, "epochs": ep, "max_train_examples": mt, "max_eval_examples": me}
        try:
            started = start_suite(s, m, lab, n, caps)
        except DetourError as exc:
            return f"**Not started:** {exc}", *(gr.skip(),) * 6
        listed = gr.update(choices=suite_run_choices(), value=started)
        return f"Started `{started}` in `{suites_root() / started}`.", listed, *show(started)

    pick.change(lambda n: (*show(n), report_mtime(n)), inputs=[pick], outputs=[status, report, fig, board, board_fig,
                seen], show_progress="hidden", api_visibility="undocumented")  # fmt: skip
    suite.change(default_name, inputs=[suite], outputs=[name], show_progress="hidden",
                 api_visibility="undocumented")  # the folder follows it  # fmt: skip
    run_btn.click(run, inputs=[suite, models, labels, name, seeds, epochs, max_train, max_eval],
                  outputs=[msg, pick, status, report, fig, board, board_fig], api_name="suite_run")  # fmt: skip

    def poll(n, drawn):
        """Status and report every tick; the figures and the leaderboard again only when suite.json was
        (re)written."""
        v = suite_view(n)
        now = report_mtime(n)
        if now != drawn:
            return v["status"], v["report"], v["figure"], *board_updates(v), now
        return v["status"], v["report"], *(gr.skip(),) * 4

    timer.tick(poll, inputs=[pick, seen], outputs=[status, report, fig, board, board_fig, seen],
               show_progress="hidden", queue=False, api_visibility="private")  # fmt: skip
    keep_fresh(listing, [pick, status, report, fig, board, board_fig, seen], inputs=[pick], button=refresh)
    return {"suite": suite, "models": models, "run": run_btn, "status": status, "report": report, "pick": pick,
            "name": name, "figure": fig, "board": board, "board_figure": board_fig, "listing": listing,
            "poll": poll}  # fmt: skip

"""Sweeps tab: launch a grid over one or two config keys x seeds, and view every sweep under ``sweeps/``: its cells
and their states, the report (mean and 95% CI per cell, paired verdicts against the reference) and its figure.

Launching does what ``python -m backend sweep ... `` does: ``backend.sweeps.sweep.plan_sweep`` checks the grid
(matched budgets included) and ``launch`` queues the cells on the sweep's own detached queue worker; then a
detached ``python -m backend sweep --report DIR --wait`` (output to ``DIR/sweep.log``) waits, evaluates and writes
the report, so closing the browser stops nothing. The handlers are plain functions; ``build(ctx)`` wires them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from backend.core.errors import DetourError
from backend.core.paths import is_plain_name, read_text_confined, sweeps_dir
from backend.sweeps.bound import MAX_RUNS

POLL_S = 3.0
AXIS_KEYS = [
    "hybrid.clm_share",
    "hybrid.tokens",
    "phases.main.tokens",
    "phases.main.freeze.layers",
    "phases.decay.mlm_probability",
    "phases.decay.fraction",
    "mask_schedule.rates",
    "recipe",
    "train.lr",
]
LOG_NAME = "sweep.log"
EXECUTORS = {"This machine (queue)": "queue", "Slurm cluster (job array)": "slurm"}


def sweep_names() -> list[str]:
    """The folder names of the readable sweeps under the sweeps root, newest first."""
    return [value for label, value in sweep_choices() if label == value]


def sweep_choices() -> list[tuple[str, str]]:
    """(label, folder name) of every sweep under the sweeps root (``catalogue.entries``), newest first; a sweep
    whose manifest cannot be read is listed as ``NAME (unreadable: why)``, never dropped and never fatal."""
    from backend.core import catalogue
    from backend.sweeps.manifest import read_manifest

    found = catalogue.entries("sweep", read=read_manifest)

    def newest(e) -> float:
        try:
            return (e.path / "sweep.json").lstat().st_mtime
        except OSError:
            return 0.0

    return [(e.label(), e.name) for e in sorted(found, key=newest, reverse=True)]


def listing(name: str | None) -> list:
    """The sweep list and the view, read again (page load, Refresh): the picked sweep, else the newest."""
    import gradio as gr

    choices = sweep_choices()
    values = [v for _, v in choices]
    value = name if name in values else (values[0] if values else None)
    return [gr.update(choices=choices, value=value), *_show(value)]


def _show(name: str | None) -> list:
    from app import warn

    try:
        v = view(name)
    except DetourError as exc:
        return [warn(exc), [], None, ""]
    return [v["status"], v["table"], v["figure"], v["report"]]


def sweep_dir(name: str | None) -> Path:
    """A sweep folder by its plain name under the sweeps root, never a path."""
    name = (name or "").strip()
    if not is_plain_name(name) or not (sweeps_dir() / name / "sweep.json").exists():
        raise DetourError(f"sweep '{name}': no such sweep under {sweeps_dir()}")
    return sweeps_dir() / name


def _waiter(out: Path) -> list[str]:
    """The detached process that waits for the cells, evaluates them and writes the report (it re-queues nothing:
    a cancel from the CLI or this tab stays a cancel)."""
    return [sys.executable, "-m", "backend", "sweep", "--report", str(out), "--wait"]


def _lines(text: str | None) -> list[str]:
    return [ln.strip() for ln in (text or "").splitlines() if ln.strip() and not ln.strip().startswith("#")]


def start_sweep(
    config_path: str | None,
    sets: str | None,
    axis1: str,
    values1: str,
    axis2: str | None,
    values2: str | None,
    seeds: int,
    max_concurrent: int,
    name: str | None = None,
    allow_unmatched: bool = False,
    eval_task: str | None = None,
    eval_data: str | None = None,
    executor: str = "queue",
    max_runs: int | None = None,
) -> tuple[str, str]:
    """Check and queue a sweep, start its detached waiter; returns (message, sweep name). ``max_runs``: the most
    runs it may queue (``--max-runs``; default ``bound.MAX_RUNS``), raised on purpose for a larger grid."""
    from app import check_path
    from backend.core.process import spawn_detached
    from backend.sweeps.sweep import launch, plan_sweep

    config = str(check_path(config_path, "config")) if (config_path or "").strip() else None
    grid = [f"{axis1.strip()}={values1.strip()}"]
    if (axis2 or "").strip() and (values2 or "").strip():
        grid.append(f"{axis2.strip()}={values2.strip()}")
    ev = None
    if eval_task and eval_task != "none":
        ev = {"task": eval_task, "data": str(check_path(eval_data, "evaluation data")) if eval_data else None}
    m = plan_sweep(
        config,
        _lines(sets),
        grid,
        int(seeds),
        name=(name or "").strip() or None,
        allow_unmatched_budget=bool(allow_unmatched),
        evaluation=ev,
        max_concurrent=int(max_concurrent),
        executor=EXECUTORS.get(executor, executor),
        max_runs=MAX_RUNS if max_runs in (None, "") else int(max_runs),
    )
    out = launch(m)
    spawn_detached(_waiter(out), out / LOG_NAME)
    n, tokens = sum(len(c["runs"]) for c in m["cells"]), sum(c["tokens"] * len(c["runs"]) for c in m["cells"])
    return (f"Queued **{n} runs** ({len(m['cells'])} cells x {len(m['seeds'])} seeds, {tokens:,} training tokens) "
            f"in `{out}`. {m['summary']}", out.name)  # fmt: skip


def status_table(name: str | None) -> list[list]:
    """One row per cell: its label, tokens, and each seed's run state."""
    from backend.sweeps.sweep import sweep_status

    if not name:
        return []
    st = sweep_status(sweep_dir(name))
    from backend.sweeps.cluster import runs_line

    return [[c["label"], c["tokens"], runs_line(c)] for c in st["cells"]]


def view(name: str | None) -> dict:
    """Status line, cell table, report markdown and figure of a sweep (what exists)."""
    from backend.sweeps.report import figure
    from backend.sweeps.sweep import sweep_status

    if not name:
        return {
            "status": "No sweep yet: launch one above, or `python -m backend sweep`.",
            "table": [],
            "report": "",
            "figure": None,
        }
    d = sweep_dir(name)
    st = sweep_status(d)
    counts = ", ".join(f"{n} {s}" for s, n in sorted(st["counts"].items()))
    status = f"**{st['name']}** ({st.get('state')}): {counts}. {st['summary']}"
    fig = None
    try:  # a report file that links out of the sweep folder is one line, never shown
        rep_md = (
            read_text_confined(d / "report.md")
            if (d / "report.md").exists()
            else "_No report yet: it is written when every cell has finished._"
        )
        if (d / "report.json").exists():
            rep = json.loads(read_text_confined(d / "report.json"))
            if isinstance(rep, dict) and rep.get("primary") in rep.get("tables", {}):
                fig = figure(rep, rep["primary"])
    except (DetourError, OSError, ValueError) as exc:
        rep_md = f"⚠ {exc}"
    return {"status": status, "table": status_table(name), "report": rep_md, "figure": fig}


def cancel_sweep(name: str) -> str:
    from backend.sweeps.sweep import cancel

    return "\n".join(f"- {m}" for m in cancel(sweep_dir(name))) or "Nothing was running."


def resume_sweep(name: str) -> str:
    """Queue again what the sweep left unfinished and start its waiter; a sweep with nothing to queue says so (and,
    every run done without a report, has its report written)."""
    from backend.core.process import spawn_detached
    from backend.sweeps.manifest import cell_states, resume_line, to_resume
    from backend.sweeps.sweep import resume

    d = sweep_dir(name)
    left = to_resume(d)
    line = resume_line(d, left)  # before the runs change state
    if left:
        spawn_detached(_waiter(resume(d)), d / LOG_NAME)
    elif not (d / "report.md").exists() and all(s == "done" for s in cell_states(d).values()):
        spawn_detached(_waiter(d), d / LOG_NAME)  # every run done, no report (its waiter was stopped): write it
        line += " (writing it now)"
    return line


def build(ctx) -> dict:
    import gradio as gr

    from app import warn
    from app.refresh import keep_fresh

    choices = sweep_choices()
    names = [v for _, v in choices]
    gr.Markdown(
        "### Sweeps: a grid of matched runs\nOne or two config keys (any `--set` key) x seeds. Every cell of a seed "
        "reads the same data in the same order; a grid that would change the compute of only some cells is refused. "
        "The report gives each cell's mean with a 95% CI and a paired verdict against the first value of axis 1."
    )
    with gr.Accordion("Launch a sweep", open=not names):
        with gr.Row():
            config = gr.Textbox(label="Config YAML (optional path; empty = defaults)", elem_id="sw-config")
            sw_name = gr.Textbox(label="Sweep name (optional)", elem_id="sw-name")
        sets = gr.Textbox(label="--set for every cell (one key=value per line)", lines=3, elem_id="sw-sets")
        with gr.Row():
            # the defaults launch as they are: a sweep cell is one run, so the detour and MLM are an axis (the
            # default config's recipe 'pair' is refused), MLM first as the reference, one line per budget
            a1 = gr.Dropdown(AXIS_KEYS, value="recipe", allow_custom_value=True, label="Axis 1 (x)", elem_id="sw-a1")
            v1 = gr.Textbox(label="values (comma-separated)", value="mlm,clm_detour", elem_id="sw-v1")
        with gr.Row():
            a2 = gr.Dropdown(
                ["", *AXIS_KEYS],
                value="phases.main.tokens",
                allow_custom_value=True,
                label="Axis 2 (lines, optional)",
                elem_id="sw-a2",
            )
            # the smallest budgets at which the default config's decay (10% of them) holds one optimizer step of
            # 16 x 256 = 4,096 tokens, and twice that: 20,000 and 40,000 were refused as each run was queued
            v2 = gr.Textbox(label="values", value="40960,81920", elem_id="sw-v2")
        # two rows, the check box sharing its row with the two numbers alone: in one row of six, a 1000-px page gave
        # it 40 px (Gradio lays a check box out with no min_width or scale of its own), its label a letter a line
        with gr.Row():
            seeds = gr.Number(value=2, precision=0, minimum=1, label="Seeds", elem_id="sw-seeds")
            conc = gr.Number(
                value=ctx.max_concurrent or 1, precision=0, minimum=1, label="Cells at once", elem_id="sw-conc"
            )
            unmatched = gr.Checkbox(label="Allow unmatched budgets", value=False, elem_id="sw-unmatched")
        with gr.Row():
            task = gr.Dropdown(["none", "ner", "classification"], value="none", label="Fine-tune each cell on")
            eval_data = gr.Textbox(label="Task data folder", elem_id="sw-evaldata")
            executor = gr.Radio(list(EXECUTORS), value=next(iter(EXECUTORS)), label="Cells run on", scale=2,
                                min_width=380, info="Slurm: a job array, at most 'Cells at once' running; the "
                                "config's slurm.* settings", elem_id="sw-executor")  # fmt: skip
            most = gr.Number(value=MAX_RUNS, precision=0, minimum=1, label="At most runs (cells x seeds)",
                             info="a larger grid is refused, saying its size; raise this on purpose",
                             elem_id="sw-max-runs")  # fmt: skip
        go_btn = gr.Button("Launch sweep", variant="primary", elem_id="sw-launch")
        msg = gr.Markdown("", elem_id="sw-msg")
    with gr.Row():
        pick = gr.Dropdown(
            choices,
            value=names[0] if names else None,
            label="Sweep",
            allow_custom_value=True,
            elem_id="sw-pick",
            scale=3,
            min_width=300,
        )
        # buttons narrower than the 160-px default: three of those left the picker 176 px of a 1000-px page
        refresh = gr.Button("Refresh", scale=1, min_width=100)
        cancel_btn = gr.Button("Cancel the rest", scale=1, min_width=100, elem_id="sw-cancel")
        resume_btn = gr.Button("Resume", scale=1, min_width=100, elem_id="sw-resume")
    v0 = view(names[0] if names else None)
    status = gr.Markdown(v0["status"], elem_id="sw-status")
    table = gr.Dataframe(value=v0["table"], headers=["cell", "tokens", "runs"], interactive=False, elem_id="sw-cells")
    plot = gr.Plot(value=v0["figure"], label="Metric vs axis 1 (95% CI)", elem_id="sw-plot")
    report = gr.Markdown(v0["report"], elem_id="sw-report")
    timer = gr.Timer(POLL_S, active=True)

    show = _show
    outs = [status, table, plot, report]

    def launch(*args):
        try:
            text, name = start_sweep(*args)
        except DetourError as exc:
            return [f"**Not started:** {exc}", gr.skip(), *([gr.skip()] * len(outs))]
        return [text, gr.update(choices=sweep_choices(), value=name), *show(name)]

    def act(fn, name):
        try:
            return fn(name)
        except DetourError as exc:
            return warn(exc)

    go_btn.click(
        launch,
        inputs=[config, sets, a1, v1, a2, v2, seeds, conc, sw_name, unmatched, task, eval_data, executor, most],
        outputs=[msg, pick, *outs],
        api_name="sweep_launch",
    )
    pick.change(show, inputs=[pick], outputs=outs, show_progress="hidden", api_name="sweep_view")
    keep_fresh(listing, [pick, *outs], inputs=[pick], button=refresh)  # page load, tab select, Refresh
    cancel_btn.click(lambda n: act(cancel_sweep, n), inputs=[pick], outputs=[msg], api_name="sweep_cancel")
    resume_btn.click(lambda n: act(resume_sweep, n), inputs=[pick], outputs=[msg], api_name="sweep_resume")
    timer.tick(show, inputs=[pick], outputs=outs, show_progress="hidden", queue=False, api_visibility="private")
    return {"pick": pick, "status": status, "table": table, "plot": plot, "report": report, "launch": go_btn}

"""The Runs tab's handlers on fake run directories: every logged metric is drawn, phases read apart, the table
holds final losses, duration and throughput without a long error crushing it, and the selectors start on the run
one came for."""

from __future__ import annotations

import os
import time
from pathlib import Path

from app import runs_tab
from backend.analysis import plots
from backend.core import atomic
from backend.engine import rundir
from backend.engine.config import default_config


def make_run(root: Path, name: str, objective: str = "clm", decay_steps: int = 4, **status) -> Path:
    """A finished-looking run: main (``objective``) for 8 steps, then an MLM decay of ``decay_steps`` rows."""
    d = root / name
    d.mkdir(parents=True)
    atomic.write_yaml(d / "config.yaml", {**default_config(), "name": name})
    rundir.write_status(d, **{"state": "done", "created_at": time.time(), **status})
    rows = [{"type": "phase", "step": 0, "phase": "main", "objective": objective, "tokens_seen": 0}]
    rows += [{"type": "eval", "step": 0, "tokens_seen": 0, "eval_mlm_loss": 9.0, "eval_clm_loss": 9.5}]
    for s in range(1, 9 + decay_steps):
        phase, obj = ("main", objective) if s <= 8 else ("decay", "mlm")
        if s == 9:
            rows.append({"type": "phase", "step": 8, "phase": "decay", "objective": "mlm", "tokens_seen": 8 * 256})
        rows.append({"type": "train", "step": s, "phase": phase, "objective": obj, "loss": 9 - s / 10,
                     "lr": 1e-4 * s, "grad_norm": 2.0 + s, "tokens_per_s": 1000.0 * (1 + s % 2),
                     "tokens_seen": 256 * s})  # fmt: skip
    rows += [{"type": "eval", "step": 8 + decay_steps, "tokens_seen": 256 * (8 + decay_steps), "eval_mlm_loss": 7.0,
              "eval_clm_loss": 8.0}]  # fmt: skip
    for r in rows:
        atomic.append_jsonl(d / "metrics.jsonl", r)
    (d / "train.log").write_text("line 1\nline 2\n")
    return d


def _by_name(fig) -> dict:
    return {t.name: t for t in fig.data}


def test_every_logged_metric_has_a_curve(isolated_runs_dir):
    make_run(isolated_runs_dir, "det")
    figs = runs_tab.curves(["det"])
    assert [f for _, _, f in runs_tab.FIGURES] == ["plot-train", "plot-eval", "plot-eval-clm", "plot-lr",
                                                   "plot-grad-norm", "plot-tokens-per-s"]  # fmt: skip
    by_key = {key: fig for (_, key, _), fig in zip(runs_tab.FIGURES, figs, strict=True)}
    main = {k: _by_name(by_key[k])["det · main (clm)"] for k in ("lr", "grad_norm", "tokens_per_s")}
    assert list(main["lr"].y) == [1e-4 * s for s in range(1, 9)]
    assert list(main["grad_norm"].y) == [2.0 + s for s in range(1, 9)]
    assert list(main["tokens_per_s"].y) == [1000.0 * (1 + s % 2) for s in range(1, 9)]
    assert list(by_key["eval_clm_loss"].data[0].y) == [9.5, 8.0]  # the held-out CLM curve: the one the detour lowers
    assert "CLM" in by_key["eval_clm_loss"].layout.title.text


def test_main_and_decay_read_apart_and_a_one_row_phase_is_a_marker(isolated_runs_dir):
    make_run(isolated_runs_dir, "base", objective="mlm", decay_steps=1)  # MLM then MLM: only the phase differs
    traces = _by_name(runs_tab.curves(["base"])[0])
    main, decay = traces["base · main (mlm)"], traces["base · decay (mlm)"]
    assert main.line.dash != decay.line.dash and main.line.color == decay.line.color
    assert list(decay.x) == [9 * 256] and decay.mode == "markers"  # one point: a line would draw nothing
    assert main.mode == "lines"


def test_table_has_final_losses_duration_throughput_and_a_short_error(isolated_runs_dir):
    make_run(isolated_runs_dir, "ok", started_at=1000.0, finished_at=1000.0 + 125)
    long_error = "RuntimeError: " + "the disk said no; " * 30
    make_run(isolated_runs_dir, "bad", state="failed", error=long_error, started_at=1000.0, finished_at=1010.0)
    rows = {r[0]: dict(zip(runs_tab.TABLE_COLUMNS, r, strict=True)) for r in runs_tab.runs_table()}
    ok = rows["ok"]
    assert ok["train loss"] == f"{9 - 12 / 10:.3f}" and ok["held-out MLM"] == "7.000" and ok["held-out CLM"] == "8.000"
    assert ok["time"] == "2m05s"
    assert ok["tok/s"] == "1k"  # rates alternating 1000/2000: the median, each phase's first left out (the doctor's)
    assert len(rows["bad"]["error"]) <= plots.ERROR_CHARS and rows["bad"]["error"].endswith("…")
    assert len(runs_tab.COLUMN_WIDTHS) == len(runs_tab.TABLE_COLUMNS)
    shown = runs_tab.log_tail("bad")  # the whole error, where the log is read, in lines the panel shows whole
    assert " ".join(shown.split("\n\n")[0].split()) == f"[failed] {long_error.strip()}"
    assert max(len(line) for line in shown.splitlines()) <= runs_tab.LOG_WIDTH


def test_selectors_start_on_the_running_run_else_the_newest(isolated_runs_dir):
    make_run(isolated_runs_dir, "old-failed", state="failed", created_at=1.0, error="boom")
    make_run(isolated_runs_dir, "finished", created_at=2.0)
    make_run(isolated_runs_dir, "queued-new", state="queued", created_at=4.0)
    assert runs_tab.default_run() == "finished"  # no running run: the newest that started (a queued one has no log)
    make_run(isolated_runs_dir, "training", state="running", pid=os.getpid(), created_at=3.0)
    assert runs_tab.default_run() == "training"
    assert runs_tab.default_selection() == ["training", "queued-new"]  # running first, then the newest
    first = runs_tab.poll_update([], None, "tokens_seen", None)
    assert first["log_run"] == "training"


def test_the_log_follows_the_running_run_until_one_is_picked(isolated_runs_dir):
    a = make_run(isolated_runs_dir, "pair-detour", state="running", pid=os.getpid(), created_at=2.0)
    make_run(isolated_runs_dir, "pair-mlm", state="queued", created_at=2.0)
    tick = runs_tab.poll_update([], "pair-detour", "tokens_seen", {})  # the page opened on the running run
    assert tick["log_run"] == "pair-detour" and not tick["log_run_changed"]
    rundir.write_status(a, state="done")
    rundir.write_status(isolated_runs_dir / "pair-mlm", state="running", pid=os.getpid())
    tick = runs_tab.poll_update([], "pair-detour", "tokens_seen", tick["state"])
    assert tick["log_run"] == "pair-mlm" and tick["log_run_changed"]  # the pair's second run took over
    make_run(isolated_runs_dir, "older", created_at=1.0)
    tick = runs_tab.poll_update([], "older", "tokens_seen", tick["state"])  # the user picked a run: it stays
    assert tick["log_run"] == "older" and not tick["log_run_changed"]
    tick = runs_tab.poll_update([], "older", "tokens_seen", tick["state"])
    assert tick["log_run"] == "older"


def test_the_run_cancelled_or_resumed_stays_picked_when_its_sibling_starts(isolated_runs_dir):
    """Cancel on a pair's running detour run: its MLM sibling started and the picker followed it within one poll,
    so Resume and a second Cancel went to the sibling. The run acted on is pinned."""
    a = make_run(isolated_runs_dir, "pair-detour", state="running", pid=os.getpid(), created_at=2.0)
    make_run(isolated_runs_dir, "pair-mlm", state="queued", created_at=2.0)
    tick = runs_tab.poll_update([], "pair-detour", "tokens_seen", {})
    rundir.write_status(a, state="cancelled")  # Cancel pressed on it (pinned), then its sibling starts
    rundir.write_status(isolated_runs_dir / "pair-mlm", state="running", pid=os.getpid())
    tick = runs_tab.poll_update([], "pair-detour", "tokens_seen", tick["state"], pinned="pair-detour")
    assert tick["log_run"] == "pair-detour" and not tick["log_run_changed"]


def test_the_throughput_panel_and_the_timeline_follow_the_run(isolated_runs_dir):
    tick = runs_tab.poll_update([], None, "tokens_seen", None)  # a page opened before any run
    assert tick["timeline"] is not None and tick["timeline"].layout.annotations[0].text == "no run to draw"
    d = isolated_runs_dir / "live"
    d.mkdir(parents=True)
    atomic.write_yaml(d / "config.yaml", {**default_config(), "name": "live"})
    rundir.write_status(d, state="running", pid=os.getpid(), created_at=time.time(), step=0, total_steps=36)
    tick = runs_tab.poll_update([], None, "tokens_seen", tick["state"])  # the run was launched: the timer's tick
    assert tick["log_run"] == "live" and "no metrics yet" in tick["panel"]
    assert [t for t in tick["timeline"].data if t.type == "bar"]  # its phases drawn, no Refresh pressed
    idle = runs_tab.poll_update([], "live", "tokens_seen", tick["state"])
    assert idle["panel"] is None and idle["timeline"] is None  # nothing changed: nothing sent
    for s in range(1, 7):  # six steps logged
        row = {"type": "train", "step": s, "phase": "main", "objective": "clm", "loss": 9.0, "tokens_seen": 256 * s}
        atomic.append_jsonl(d / "metrics.jsonl", {**row, "tokens_per_s": 100.0 * s})
    moved = runs_tab.poll_update([], "live", "tokens_seen", idle["state"])
    assert "**live** (running)" in moved["panel"] and "| main | clm | 400 |" in moved["panel"]  # no Diagnose


def test_one_run_has_one_rate_in_the_table_and_the_panel(isolated_runs_dir):
    from app.throughput_panel import panel_markdown

    d = make_run(isolated_runs_dir, "rate", started_at=1000.0, finished_at=1125.0)
    rows = [r for r in rundir.read_metrics(d)]
    rows[2]["tokens_per_s"] = 65.0  # the first interval: compiling, the step-0 evaluation
    atomic.write_text(d / "metrics.jsonl", "".join(atomic.json_line(r) for r in rows))
    table = dict(zip(runs_tab.TABLE_COLUMNS, runs_tab.runs_table()[0], strict=True))
    assert table["tok/s"] == "1k"  # the median interval, the warm-up left out (the mean of rates said 65 here)
    assert "| whole run | | 1,000 |" in panel_markdown("rate")


def test_no_runs_yet_says_what_to_do(isolated_runs_dir):
    from app.throughput_panel import panel_markdown

    assert runs_tab.runs_table() == [] and "Launch" in runs_tab.log_tail(None)
    assert "No runs yet" in runs_tab.poll_update([], None, "tokens_seen", None)["log"]
    assert "Launch" in panel_markdown(None)
    make_run(isolated_runs_dir, "one")
    assert runs_tab.log_tail(None) == "" and "Pick a run" in panel_markdown(None)


def test_a_small_rate_is_rounded_as_the_panel_rounds_it():
    assert plots._fmt_int(5.6) == "6" == f"{5.6:,.0f}" and plots._fmt_int(1500) == "1.5k"


def test_the_line_under_cancel_resume_follows_the_run(isolated_runs_dir):
    """'queued to resume' stayed under the buttons after the run had finished: the next poll says where it is now,
    and says nothing while the run is still where the action left it."""
    from app import runs_tab
    from backend.engine import rundir

    run = isolated_runs_dir / "r1"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("name: r1\n")
    rundir.write_status(run, state="queued")
    followed = runs_tab.action_state("r1", "r1: queued to resume")
    assert followed == {"run": "r1", "state": "queued"}
    assert runs_tab.action_followup(followed) == (None, followed)  # not moved yet: the line stays
    rundir.write_status(run, state="done")
    assert runs_tab.action_followup(followed) == ("r1: done now", None)
    assert runs_tab.action_state("r1", "choose a run first") is None


def test_the_no_runs_texts_name_buttons_the_page_has(isolated_runs_dir):
    """The empty Runs tab said to press 'Launch (queue)', a button called "Launch": each tab's text for a lab with
    no run names, after "press", only buttons the built page shows."""
    import re

    import gradio as gr

    from app import analyze_tab, detour_tab, main

    demo = main.build_app(main.AppContext())
    buttons = {b.value for b in demo.blocks.values() if isinstance(b, gr.Button)}
    for text in (runs_tab.NO_RUNS, analyze_tab.NO_RUNS, detour_tab.NO_RUNS):
        named = re.findall(r"press (?:'([^']+)'|\*\*([^*]+)\*\*)", text)
        assert named, text
        for quoted, bold in named:
            assert (quoted or bold) in buttons, (quoted or bold, sorted(buttons))

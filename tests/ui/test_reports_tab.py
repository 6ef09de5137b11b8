"""Reports tab: one message and one button when there is no report (not eight empty boxes), the report view once
there is one, and a launch button whose time is what the quick preset takes."""

from __future__ import annotations

import json

import gradio as gr
import pytest

from app import reports_tab
from backend.core import paths


@pytest.fixture(autouse=True)
def reports_root(tmp_path, monkeypatch):
    root = tmp_path / "reports"
    monkeypatch.setenv(paths.REPORTS_ENV, str(root))
    return root


def finished_quick(root, name: str, wall_s: float, loads=(None, None), cpus=None, **changed):
    """A finished quick detour study's small files: settings (the preset's, with ``changed``), timing (wall time,
    load at start and end), report."""
    from backend.replication.budget_study import ARMS, BUDGET_PRESETS

    d = root / name
    d.mkdir(parents=True)
    s = {**BUDGET_PRESETS["quick"], "study": "detour-budgets", "preset": "quick", "arms": list(ARMS), **changed}
    (d / "settings.json").write_text(json.dumps(s))
    timing = {"wall_s": wall_s, "load_start": {"load_1m": loads[0]}, "load_end": {"load_1m": loads[1]}, "cpus": cpus}
    (d / "timing.json").write_text(json.dumps(timing))
    (d / "report.md").write_text("# a report\n")
    return d


def build():
    with gr.Blocks() as demo:
        with gr.Tab("Reports"):
            parts = reports_tab.build(None)
    return demo, parts


def test_no_report_is_one_message_and_the_button(reports_root):
    _, parts = build()
    assert parts["empty"].visible and "No report yet" in parts["empty"].value
    assert "`python -m backend replicate`" in parts["empty"].value
    assert not parts["view"].visible and not parts["pick"].visible  # no empty boxes, no empty list
    assert reports_tab.quick_measurement()["rate"] is None  # a fresh cache: no training rate measured here
    assert parts["launch"].value == "Run the detour study (quick, time not measured here yet)"
    assert parts["launch"].value in parts["empty"].value

    (reports_root / "later").mkdir(parents=True)  # a report started after the page was built
    (reports_root / "later" / "status.json").write_text(json.dumps({"state": "failed", "error": "x"}))
    out = parts["listing"](None)
    pick, *view = out
    assert pick["value"] == "later" and pick["visible"]
    assert view[-2]["visible"] and not view[-1]["visible"]  # the report view shown, the empty message hidden
    plots = view[4 : 4 + len(reports_tab.FIGURES)]
    assert all(p["visible"] is False for p in plots)  # a report without figures shows no figure boxes


def test_the_button_says_what_the_last_quick_study_took(reports_root):
    finished_quick(reports_root, "detour-quick", 369.0)  # 6 min 9 s
    # a newer quick study over other budgets is not what the button launches: its time is not the button's
    finished_quick(reports_root, "wider", 2400.0, budgets=[25_600, 81_920, 204_800])
    assert reports_tab.quick_duration() == (369.0, "measured")
    _, parts = build()
    assert parts["launch"].value == "Run the detour study (quick, ~6 min)"
    assert "took 6 min 09 s" in reports_tab.time_note() and "load was not recorded" in reports_tab.time_note()


def test_the_button_shows_a_study_that_finished_after_build_with_its_machine_load(reports_root):
    """Issue 24 #7: the button's time is read again on Refresh: the last measured one, with its machine load."""
    _, parts = build()
    estimated = parts["launch"].value
    finished_quick(reports_root, "detour-quick", 1362.0, loads=(3.0, 5.0), cpus=2)  # 22 min 42 s
    label, note, empty, _ = parts["times"]()
    assert label["value"] == "Run the detour study (quick, ~23 min)" != estimated
    assert "took 22 min 42 s under a machine load of 4.0 on 2 CPUs" in note
    assert label["value"] in empty["value"]


def test_showing_the_tab_plans_the_quick_study_once(reports_root, monkeypatch):
    """The tab's times are read each time it is shown; the label and the note came from two plans of the same study
    (100 ms on 2 cores, for each of 20 students picking the tab)."""
    from app import study_notes

    _, parts = build()
    plans = []
    real = study_notes.quick_measurement
    for module in (reports_tab, study_notes):
        monkeypatch.setattr(module, "quick_measurement", lambda: plans.append(1) or real())
    label, note, *_ = parts["times"]()
    assert len(plans) == 1 and "time not measured here yet" in label["value"] and "No training rate" in note


def test_the_quick_studys_time_uses_this_machines_rate(tmp_path, monkeypatch):
    """Before a quick study finished here, the button's time is its runs' tokens at this machine's measured
    training rate for the base (as the Launch form's estimate) plus the fine-tunes at the plan's rates."""
    import torch

    from backend.engine.models import model_config_of
    from backend.engine.precision import resolve_precision
    from backend.replication import budget_study as bs
    from backend.runs.doctor import parameter_count
    from tests.conftest import measured_rate, require_shared

    for name in ("craft_pmc_oa_text", "ncbi_disease", "anatem", "bc2gm"):
        require_shared(name)
    monkeypatch.setenv("DETOUR_CACHE_DIR", str(tmp_path / "cache"))
    s = bs.resolve_budget_study("quick")
    assert reports_tab.quick_measurement()["seconds"] is None  # nothing measured here yet
    n = parameter_count(model_config_of({"name": s["model"]}))
    assert not torch.cuda.is_available()
    prec, t = resolve_precision(s["train"]["precision"], "cpu")[0], s["train"]
    measured_rate(n, prec, "cpu", "clm", 460.0, t["seq_len"], t["batch_size"])
    m = reports_tab.quick_measurement()
    assert m["how"] == "estimated" and m["rate"] == 460.0
    assert m["seconds"] == pytest.approx(bs.plan(s)["total_s"]) and m["seconds"] > bs.plan(s)["finetune_s"]
    assert "460 tokens/s" in reports_tab.time_note()


def test_the_second_studys_time_is_this_machines_not_a_fixed_string(reports_root, tmp_path, monkeypatch):
    """Issue 32: the second study's button said "~15 min" whatever this machine does. Its time is now its training
    tokens over this machine's measured rate for an encoder of its size (as the Launch form's estimate), or it says
    that no rate is measured here yet."""
    from backend.replication.hybrid import HYBRID_PRESETS, hybrid_estimate
    from tests.conftest import measured_rate

    est = hybrid_estimate("quick")
    assert est["rate"] is None and est["total_s"] is None  # a fresh cache: nothing measured for this size
    assert reports_tab.hybrid_button_label() == "Run the second paper's study (quick, time not measured here yet)"
    assert "No training rate is measured on this machine yet" in reports_tab.hybrid_time_note()
    labels = []
    for rate in (400.0, 4000.0):  # a slow machine, then a fast one (each its own rate book)
        monkeypatch.setenv("DETOUR_CACHE_DIR", str(tmp_path / f"cache-{rate:.0f}"))
        t = HYBRID_PRESETS["quick"]["train"]
        measured_rate(est["n_params"], est["precision"], est["device"], "mlm", rate, t["seq_len"], t["batch_size"])
        again = hybrid_estimate("quick")
        minutes = max(1, round(again["total_s"] / 60))
        assert again["rate"] == rate and again["total_s"] > again["train_tokens"] / rate
        label = reports_tab.hybrid_button_label()  # what the button shows on each page load (and Refresh)
        assert label == f"Run the second paper's study (quick, ~{minutes} min)"
        assert f"at {rate:,.0f} tokens/s (the 1 calm rate" in reports_tab.hybrid_time_note()
        labels.append(label)
    assert labels[0] != labels[1]  # a slower machine, a longer time


def test_a_budget_study_folder_is_listed_and_its_report_shown(reports_root):
    """A ``replicate --budgets`` folder (settings.json, sweep/, report.md) is one of the tab's reports."""
    from backend.replication import budget_study
    from tests.replication.test_crossover import _constructed_sweep

    d = reports_root / "budgets"
    s = _constructed_sweep(d / "sweep", {2_560: -3.0, 8_192: 0.0, 25_600: 3.0})
    (d / "settings.json").write_text(json.dumps(s))
    budget_study.write_report(d)
    assert reports_tab.list_reports() == ["budgets"]
    view = reports_tab.load_view("budgets")
    assert "The sign changes between 2.56k and 25.6k tokens" in view["summary"]
    assert any(f.endswith("report.json") for f in view["files"])
    assert ": finished" in view["status"] and "report written" in view["status"]
    assert view["figures"]["crossover"] is not None  # the chart against tokens, drawn in the tab


def test_stop_shows_while_a_study_runs_and_resume_once_it_stopped(reports_root):
    """The Stop button is there while the selected study runs (its process proven alive), Resume once it was stopped
    and recorded how to resume; neither for a finished report."""
    import os

    from backend.core.process import identity

    d = reports_root / "s"
    d.mkdir(parents=True)
    (d / "settings.json").write_text(json.dumps({"study": "detour-budgets"}))
    running = {"state": "running", "pid": os.getpid(), "pid_identity": identity(), "resume_argv": ["--out", str(d)]}
    (d / "status.json").write_text(json.dumps(running))
    _, parts = build()
    assert parts["stop"].visible and not parts["resume"].visible
    (d / "status.json").write_text(json.dumps({**running, "state": "cancelled", "error": "stopped (SIGTERM)"}))
    view = parts["listing"]("s")[1:]
    assert view[-4]["visible"] is False and view[-3]["visible"] is True  # Stop hidden, Resume shown
    assert "**s**: cancelled" in view[0] and "note: stopped (SIGTERM)" in view[0]
    (d / "status.json").write_text(json.dumps({**running, "state": "done"}))
    assert reports_tab.controls("s") == (False, False)


def test_the_quick_studys_detectable_difference_is_shown_beside_its_button(reports_root):
    """On page load the note beside the button gives the quick study's detectable difference and where its seed
    noise was measured (the studies published with the code), and what 1 point would take."""
    from tests.conftest import require_shared

    for name in ("craft_pmc_oa_text", "ncbi_disease", "anatem", "bc2gm"):
        require_shared(name)
    _, parts = build()
    note = parts["times"]()[1]
    assert "**Detectable difference:** ±7.6 points (80% power, 95% level) at 5 pretraining seeds" in note
    assert "`bench/results/crossover/detour-study" in note and "To detect 1 point would take 163" in note


def test_a_report_of_the_retired_one_task_pipeline_stays_readable(reports_root):
    """Its files stay as they are: the tab lists it, shows its summary and figures, and says what it is; the command
    line does not rebuild it."""
    import plotly.graph_objects as go

    from backend.__main__ import main

    d = reports_root / "quick"
    (d / "figures").mkdir(parents=True)
    (d / "settings.json").write_text(json.dumps({"preset": "quick", "version": 1, "ner_data": "x", "eval": {}}))
    (d / "status.json").write_text(json.dumps({"state": "done", "steps_total": 11, "preset": "quick"}))
    (d / "report.md").write_text("# Mini replication\n\n## Findings\n")
    (d / "figures" / "f1.json").write_text(go.Figure(go.Bar(y=[60.9, 61.7])).to_json())
    view = reports_tab.load_view("quick")
    assert "## Findings" in view["summary"] and view["figures"]["f1"] is not None
    assert "a report of the retired one-task pipeline (its report stays readable" in view["status"]
    assert main(["replicate", "--out", "quick", "--report-only"]) == 2
    assert (d / "report.md").read_text() == "# Mini replication\n\n## Findings\n"

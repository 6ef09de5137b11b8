"""The Sweeps tab's handlers, without a browser: launch a real (tiny) sweep the way the form does, see its cells,
cancel the rest, and read a finished sweep's report and figure."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from app import sweeps_tab
from backend.core import paths
from backend.core.errors import DetourError
from conftest import tiny_config_file


@pytest.fixture
def roots(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.SWEEPS_ENV, str(tmp_path / "sweeps"))
    monkeypatch.setenv(paths.UPLOADS_ENV, str(tmp_path / "uploads"))
    (tmp_path / "uploads").mkdir()
    return tmp_path


def _config(roots, model_dir) -> str:
    return str(tiny_config_file(roots / "uploads" / "tab.yaml", model_dir, "tab"))


def test_launch_view_and_cancel_from_the_tab(roots, tiny_modernbert_dir):
    cfg = _config(roots, tiny_modernbert_dir)
    msg, name = sweeps_tab.start_sweep(cfg, "", "recipe", "mlm,clm_detour", "", "", 2, 1)
    assert "Queued **4 runs**" in msg and "same documents in the same order" in msg
    assert sweeps_tab.sweep_names() == [name]
    rows = sweeps_tab.status_table(name)
    assert [r[0] for r in rows] == ["recipe=mlm", "recipe=clm_detour"] and all("s0:" in r[2] for r in rows)
    assert sweeps_tab.cancel_sweep(name).count("- ") >= 3  # the queued runs (and the running one, if any)
    deadline = time.time() + 90
    while time.time() < deadline and "queued" in sweeps_tab.view(name)["status"]:
        time.sleep(0.5)
    v = sweeps_tab.view(name)
    assert "cancelled" in v["status"]
    with pytest.raises(DetourError):
        sweeps_tab.sweep_dir("../etc")


def test_the_form_refuses_a_grid_with_unmatched_budgets(roots, tiny_modernbert_dir):
    cfg = _config(roots, tiny_modernbert_dir)
    with pytest.raises(DetourError, match="allow-unmatched-budget"):
        sweeps_tab.start_sweep(cfg, "", "train.batch_size", "4,8", "phases.decay.steps", "1,2", 1, 1)
    assert sweeps_tab.sweep_names() == []


def test_the_reports_tab_does_not_start_the_hybrid_study_twice(tmp_path, monkeypatch):
    import os

    from app import reports_tab
    from backend.core import atomic

    monkeypatch.setenv(paths.REPORTS_ENV, str(tmp_path / "reports"))
    from backend.core.process import identity

    running = {"state": "running", "pid": os.getpid(), "pid_identity": identity()}  # this process, proven
    atomic.write_json(tmp_path / "reports" / "hybrid-quick" / "status.json", running)
    with pytest.raises(DetourError, match="already running"):
        reports_tab.launch("hybrid-splits", "quick")
    assert reports_tab.status_text("hybrid-quick")[0].startswith("**hybrid-quick**: running")


def test_the_forms_defaults_plan_a_sweep_that_launches(roots):
    """With an empty config (recipe pair) the form's axes were a budget alone: the launch was refused (a pair is two
    runs a cell); its defaults now make the recipe an axis, so pressing Launch as the page opens works. Its budgets
    (20,000 and 40,000 tokens) were then refused as each run was queued: the decay, 10% of them, held less than one
    optimizer step of the default config (4,096 tokens). Every run of the default grid passes the check a run is
    queued with."""
    from app import main
    from backend.runs.preflight import check
    from backend.sweeps.grid import Cell, run_config
    from backend.sweeps.sweep import check_one_run_per_cell, plan_sweep

    demo = main.build_app(main.AppContext())
    value = {b.elem_id: b.value for b in demo.blocks.values() if str(getattr(b, "elem_id", "")).startswith("sw-")}
    grid = [f"{value['sw-a1']}={value['sw-v1']}"]
    if value["sw-a2"] and value["sw-v2"]:  # as start_sweep reads the form
        grid.append(f"{value['sw-a2']}={value['sw-v2']}")
    m = plan_sweep(None, [], grid, int(value["sw-seeds"]))
    check_one_run_per_cell(m)  # raises for a cell with the recipe pair
    assert {c["values"]["recipe"] for c in m["cells"]} == {"mlm", "clm_detour"} and m["reference"] == "mlm"
    for c in m["cells"]:
        cell = Cell(c["index"], c["values"], c["label"], c["slug"])
        for seed in c["runs"]:
            check(run_config(m["base"], cell, int(seed), m["name"]), check_data=False)  # jobs.submit's preflight


def _finished_sweep(roots, model_dir, report: bool = True) -> Path:
    """A sweep whose two runs are done (folders as the queue leaves them), with its report when ``report``."""
    from backend.engine import rundir
    from backend.sweeps.manifest import write_manifest
    from backend.sweeps.sweep import plan_sweep

    m = plan_sweep(_config(roots, model_dir), [], ["recipe=mlm,clm_detour"], 1, name="done-sweep")
    out = paths.sweeps_dir() / "done-sweep"
    write_manifest(out, {**m, "state": "done"})
    for c in m["cells"]:
        for r in c["runs"].values():
            (out / "runs" / r).mkdir(parents=True)
            (out / "runs" / r / "config.yaml").write_text(f"name: {r}\n")
            rundir.write_status(out / "runs" / r, state="done")
    if report:
        (out / "report.md").write_text("# done-sweep\n")
    return out


def test_resume_on_a_finished_sweep_says_nothing_was_queued(roots, tiny_modernbert_dir, capsys):
    """Resume on a finished sweep said "unfinished cells are queued again" (the CLI: "queued 2 runs"); nothing was."""
    from backend.__main__ import main as cli
    from backend.engine import rundir

    out = _finished_sweep(roots, tiny_modernbert_dir)
    msg = sweeps_tab.resume_sweep("done-sweep")
    assert msg == "done-sweep: nothing to resume: all 2 runs are done; its report is written", msg
    assert cli(["sweep", "--resume", str(out)]) == 0
    assert capsys.readouterr().out.strip() == msg
    runs = sorted((out / "runs").iterdir())
    assert all(rundir.read_status(r)["state"] == "done" for r in runs)  # nothing was queued again
    from backend.sweeps.manifest import resume_line, to_resume

    rundir.write_status(runs[0], state="cancelled")
    assert resume_line(out, to_resume(out)) == f"done-sweep: 1 of 2 runs queued again ({runs[0].name})"

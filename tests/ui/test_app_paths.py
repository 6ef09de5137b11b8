"""Issue 25, mechanism 4: every path the app accepts stays inside the allowed roots after resolution ('..' and
symlinks included), and a run deleted while the app lists it is a missing run, never a hub id."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from app import PathNotAllowed, analyze_tab, check_model_spec, fill_mask_tab, model_choices, reports_tab, runs_tab
from backend.core.errors import DetourError
from backend.engine.rundir import write_status


def _fake_run(root: Path, name: str, model_dir: Path | None = None) -> Path:
    """A run folder as the lists see it: config.yaml, status and a final/ model (copied from ``model_dir``)."""
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(f"name: {name}\nrecipe: mlm\n")
    write_status(run, state="done")
    if model_dir is not None:
        shutil.copytree(model_dir, run / "final")
    else:
        (run / "final").mkdir()
    return run


def test_dotdot_is_never_the_runs_folders_parent(isolated_runs_dir, monkeypatch):
    """'..' once resolved to <runs>/.. whenever that folder held a config.yaml; the Detour tab loaded it as a run."""
    isolated_runs_dir.mkdir(parents=True, exist_ok=True)
    (isolated_runs_dir.parent / "config.yaml").write_text("name: outside\n")
    for cwd in (Path.cwd(), isolated_runs_dir):  # even from inside the runs folder, '..' is outside every root
        monkeypatch.chdir(cwd)
        for spec in ("..", "../", "./..", "../runs/.."):
            with pytest.raises(PathNotAllowed, match="outside the folders this app may read"):
                check_model_spec(spec)


def test_a_run_that_links_out_of_the_runs_folder_is_refused_and_not_listed(isolated_runs_dir, tmp_path):
    outside = _fake_run(tmp_path / "elsewhere", "secret")
    isolated_runs_dir.mkdir(parents=True, exist_ok=True)
    os.symlink(outside, isolated_runs_dir / "innocent")
    assert "innocent" not in model_choices()
    with pytest.raises(PathNotAllowed, match="outside the runs folder"):
        check_model_spec("innocent")
    with pytest.raises(DetourError, match="outside the runs folder"):
        runs_tab.run_path("innocent")


def test_a_path_through_a_symlink_out_of_an_allowed_root_is_refused(isolated_runs_dir, tmp_path):
    (tmp_path / "etc-like").mkdir()
    (tmp_path / "etc-like" / "config.json").write_text("{}")
    isolated_runs_dir.mkdir(parents=True, exist_ok=True)
    os.symlink(tmp_path / "etc-like", isolated_runs_dir / "door")
    with pytest.raises(PathNotAllowed, match="outside"):
        check_model_spec(str(isolated_runs_dir / "door"))


def test_a_report_folder_that_links_outside_is_refused(tmp_path, monkeypatch):
    reports = tmp_path / "reports"
    reports.mkdir()
    (tmp_path / "private").mkdir()
    monkeypatch.setenv("DETOUR_REPORTS_DIR", str(reports))
    os.symlink(tmp_path / "private", reports / "r1")
    with pytest.raises(DetourError, match="outside"):
        reports_tab.report_dir("r1")


def test_a_run_deleted_while_listed_is_a_missing_run_in_fill_mask_and_analyze(isolated_runs_dir, tiny_modernbert_dir):
    run = _fake_run(isolated_runs_dir, "gone-run", tiny_modernbert_dir)
    assert "gone-run" in model_choices()  # the app lists it ...
    shutil.rmtree(run)  # ... and it is deleted before it is picked
    _, msg = fill_mask_tab.predict("The [MASK] is red.", ["gone-run", None], [False, False])
    assert "no run named gone-run" in msg and "hub" not in msg.lower(), msg
    _, _, msg = analyze_tab.compute_trajectory("gone-run", None, None)
    assert "no run named gone-run" in msg and "hub" not in msg.lower(), msg


def test_a_report_status_that_is_garbage_reads_unknown(tmp_path):
    from backend.replication.study_run import read_status

    (tmp_path / "status.json").write_text("[1, 2]")
    assert read_status(tmp_path)["state"] == "unknown"


def test_a_symlink_loop_is_a_message_not_a_runtime_error(isolated_runs_dir):
    isolated_runs_dir.mkdir(parents=True, exist_ok=True)
    (isolated_runs_dir / "loop").symlink_to("loop")
    with pytest.raises(PathNotAllowed, match="cannot be resolved"):
        check_model_spec(str(isolated_runs_dir / "loop"))


def test_a_runs_folder_that_is_a_file_leaves_the_lists_working(isolated_runs_dir):
    isolated_runs_dir.parent.mkdir(parents=True, exist_ok=True)
    isolated_runs_dir.write_text("not a folder")
    assert "detour-tiny-en" in model_choices()


def test_a_config_in_etc_is_refused_naming_the_roots():
    from app import launch_tab

    values, msg, cfg = launch_tab.load_config_file("/etc/passwd")
    assert values is None and cfg is None and "outside the folders this app may read" in msg

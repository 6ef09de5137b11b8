"""Issue 25, mechanism 3 in the app: a fault of the machine at Launch is one line under the button, never a raw
Gradio error. The read-only runs folder is a real read-only tmpfs (skipped where this process cannot mount)."""

from __future__ import annotations

import subprocess

import pytest
from test_app_handlers import form

from app import launch_tab, warn


@pytest.fixture
def read_only_runs(tmp_path, monkeypatch):
    target = tmp_path / "ro-runs"
    target.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(target)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {r.stderr.decode().strip()}")
    monkeypatch.setenv("DETOUR_RUNS_DIR", str(target))
    yield target
    subprocess.run(["umount", "-l", str(target)], capture_output=True)


def test_launch_into_a_read_only_runs_folder_is_one_line(read_only_runs):
    out = launch_tab.launch(form("detour-tiny-en"), max_concurrent=1)  # type: ignore[arg-type]
    assert out["ok"] is False and out["runs"] == []
    msg = out["message"]
    assert "read-only file system" in msg and str(read_only_runs) in msg and "\n" not in msg, msg


def test_warn_gives_a_machine_fault_its_path_and_what_to_do():
    msg = warn(OSError(28, "No space left on device", "/data/runs/x/status.json"))
    assert "no space left on device" in msg and "/data/runs/x/status.json" in msg and "free space" in msg


def test_the_runs_tab_answers_a_read_only_folder_and_an_unreadable_log_in_one_line(tmp_path, monkeypatch):
    """Resume and cancel write status.json; the log tail is polled every few seconds: none may raise."""
    from app import runs_tab
    from backend.engine.rundir import write_status

    target = tmp_path / "runs-ro"
    target.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(target)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        monkeypatch.setenv("DETOUR_RUNS_DIR", str(target))
        run = target / "r"
        run.mkdir()
        (run / "config.yaml").write_text("name: r\n")
        (run / "train.log").mkdir()  # not a file
        write_status(run, state="failed", error="killed")
        assert "is a directory" in runs_tab.log_tail("r")
        subprocess.run(["mount", "-o", "remount,ro", str(target)], check=True)
        msg = runs_tab.resume_run("r", max_concurrent=1)
        assert msg.startswith("⚠") and "read-only file system" in msg and str(run) in msg, msg
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True)

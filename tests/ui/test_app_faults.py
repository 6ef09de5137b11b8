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

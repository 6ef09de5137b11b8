"""Issue 40: the app's model inference runs below training. One lane thread at a lower priority with a bounded torch
thread count; the thread that serves the page (and starts trainers) keeps the normal priority."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import json, os, subprocess, sys, threading, torch
from backend.core import inference_lane
inference_lane.bound_threads()
def probe():
    return {"nice": inference_lane.thread_nice(), "torch_threads": torch.get_num_threads(),
            "name": threading.current_thread().name}
lane = inference_lane.run(probe)
# a child started by the serving thread (as a queue worker is): its priority is the serving thread's
child = subprocess.run([sys.executable, "-c", "import os; print(os.nice(0))"], capture_output=True, text=True)
print(json.dumps({"lane": lane, "again": inference_lane.run(probe)["name"], "caller": inference_lane.thread_nice(),
                  "child": int(child.stdout), "interop": torch.get_num_interop_threads()}))
"""


def _probe(**env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def test_inference_runs_in_one_low_priority_thread_and_the_trainers_keep_normal_priority():
    base = os.nice(0)
    proc = _probe(DETOUR_APP_NICE="7", DETOUR_APP_THREADS="1")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["lane"]["nice"] == max(base, 7) and out["lane"]["torch_threads"] == 1 and out["interop"] == 1
    assert out["again"] == out["lane"]["name"]  # one thread: requests queue for it, never two at once
    assert out["caller"] == base and out["child"] == base  # only the lane yields; a trainer started here does not


def test_a_bad_setting_is_one_line_before_the_app_starts():
    env = {**os.environ, "DETOUR_APP_NICE": "low"}
    proc = subprocess.run([sys.executable, "-m", "app", "--port", "1"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: DETOUR_APP_NICE='low': expected a whole number from 0 to 19"


def test_an_app_that_leads_its_session_lowers_that_session_only(tmp_path):
    """Under 20 users a run kept 2% of its solo rate: a per-thread nice does not reach across the kernel's session
    groups (autogroup), and the trainers run in sessions of their own. An app leading its own session lowers it; one
    started from a terminal leaves the user's session alone."""
    import subprocess
    import sys
    from pathlib import Path

    if (
        not Path("/proc/self/autogroup").exists()
        or Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() != "1"
    ):
        pytest.skip("this kernel groups no processes by session (no autogroup)")
    code = (
        "from backend.core import inference_lane as l; print(l.lower_session(7)); "
        "print(open('/proc/self/autogroup').read())"
    )
    root = Path(__file__).resolve().parents[2]
    led = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120,
                         start_new_session=True)  # fmt: skip
    assert led.stdout.split()[0] == "7" and "nice 7" in led.stdout, led.stdout + led.stderr
    follower = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert follower.stdout.split()[0] == "None", follower.stdout + follower.stderr

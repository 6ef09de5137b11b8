"""``bench/bench_train.py`` ends on SIGTERM and Ctrl-C (issue 33): the training loop installs a stop flag that makes a
run stop at the next step and *return*, so the bench went on to its next round and ``timeout`` could not end it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import TINY_MODERNBERT, save_tiny_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_bench_ends_on_signal_during_our_run(tmp_path, sig):
    model = save_tiny_model(tmp_path / "model", TINY_MODERNBERT)
    env = {**os.environ, "DETOUR_CACHE_DIR": str(tmp_path / "cache"), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "bench/bench_train.py", "--model", str(model), "--steps", "15", "--rounds", "3",
           "--first", "ours", "--name", "signalled", "--results", str(tmp_path / "results")]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        seen = []
        for line in proc.stdout:  # signal once our run logs a step
            seen.append(line)
            if "(mlm): loss" in line:
                break
        else:
            pytest.fail("the bench ended before our run logged a step:\n" + "".join(seen[-20:]))
        proc.send_signal(sig)
        t0 = time.monotonic()
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc != 0, "the bench finished as if nothing had been asked"
    assert time.monotonic() - t0 < 60
    assert not (tmp_path / "results").exists(), "a signalled bench wrote results"

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


@pytest.mark.parametrize("sig", [signal.SIGTERM])  # Ctrl-C: the in-process test below
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


def test_ctrl_c_and_sigterm_end_the_bench_in_process(monkeypatch):
    """The bench's handlers (installed at start and again after each of our runs, replacing the loop's stop flag):
    Ctrl-C is a KeyboardInterrupt and SIGTERM a SystemExit(143) wherever the bench is."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import bench_train

    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        bench_train._end_on_signals()
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        with pytest.raises(SystemExit) as ended:
            signal.raise_signal(signal.SIGTERM)
        assert ended.value.code == 143
    finally:
        for s, h in old.items():
            signal.signal(s, h)

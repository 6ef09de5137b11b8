"""Loopback ports and the app in its own process: what the tests (app, accelerate rendezvous, the Slurm daemons) and
the load benchmarks (bench/common.py) start.

Ports come from below the kernel's ephemeral range: a port picked there stays free until its server binds it, however
many connections and ``bind(0)`` listeners (gloo, torchrun, the app's clients) open meanwhile; a port of
``bind(0)`` could be handed to one of them in the seconds a server takes to start. Each pytest-xdist worker draws
from its own slice, so two workers never pick the same port.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOWEST = 10000  # below: the well-known and registered services a machine may run
_RANDOM = random.SystemRandom()  # not the seeded global one: two seeded runs would draw the same ports


class AppDidNotStart(RuntimeError):
    pass


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _worker_slice(lo: int, hi: int) -> tuple[int, int]:
    """This pytest-xdist worker's share of [lo, hi) (all of it outside xdist)."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker[2:].isdigit() and count.isdigit() and int(count) > 1):
        return lo, hi
    width = (hi - lo) // int(count)
    return lo + int(worker[2:]) * width, lo + (int(worker[2:]) + 1) * width


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port free now, below the ephemeral range (in this xdist worker's slice of it)."""
    top = _ephemeral_start()
    if top - LOWEST >= 1000:
        lo, hi = _worker_slice(LOWEST, top)
        for port in _RANDOM.sample(range(lo, hi), min(200, hi - lo)):
            if _bindable(port):
                return port
    with socket.socket() as s:  # no room below the ephemeral range on this machine: the kernel's pick
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(
    runs: Path, log: Path, *extra: str, env: dict | None = None, wait_s: float = 300, own_session: bool = False
) -> tuple[subprocess.Popen, str]:
    """``python -m app`` on a free loopback port with ``runs`` as its runs folder, once it answers (HTTP 200); its
    output goes to ``log``. Raises ``AppDidNotStart`` with that output if it exits first or does not answer in
    ``wait_s``: long, since on a busy machine importing torch, transformers and gradio takes minutes (90 s failed
    three browser tests with the app still importing, on a 2-core machine at load 20); a quick start waits no
    longer for it. ``own_session``: the app leads its own session, as on a lab server (``setsid python -m app``)."""
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app", "--host", "127.0.0.1", "--port", str(port), "--runs-dir", str(runs), *extra],
            cwd=REPO, env=os.environ if env is None else env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=own_session,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + wait_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AppDidNotStart(f"the app exited with code {proc.returncode}:\n{log.read_text(errors='replace')}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise AppDidNotStart(f"the app did not answer in {wait_s:.0f} s:\n{log.read_text(errors='replace')}")

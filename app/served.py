"""The app's own check that its server answers, in place of Gradio's at launch.

Gradio's launch asks its local address five times with a 3-second timeout and gives up at the first timeout, then
refuses to start ("When localhost is not accessible, a shareable link must be created"): on a machine whose cores
are busy training (the lab's usual state) the first answer can take longer, and the app did not start at all. The
server is up once uvicorn listens; this waits, patiently, for its first HTTP answer of any kind."""

from __future__ import annotations

import time

import httpx

from backend.core.errors import DetourError


class NotServing(DetourError):
    """The app's server gave no HTTP answer within the patience given."""


def wait_until_served(url: str, patience_s: float = 120.0, timeout_s: float = 10.0) -> float:
    """Seconds until ``url`` answered an HTTP request (any status: a login redirect or a 401 is an answer). Raises
    ``NotServing`` naming the address and the last error after ``patience_s``."""
    start = time.monotonic()
    last = "no answer"
    while True:
        try:
            httpx.head(url, timeout=timeout_s, verify=False)  # the app may serve TLS with its own certificate
            return time.monotonic() - start
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if time.monotonic() - start >= patience_s:
            raise NotServing(f"the app's server at {url} gave no answer within {patience_s:.0f} s ({last})")
        time.sleep(0.5)

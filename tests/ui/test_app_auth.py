"""Issue 30: the app as on a lab server. A wrong password is refused, a public host without a password is refused at
start with one line, and a session cookie that another app on the same machine handed out opens nothing here
(browsers send cookies to every port of a host, so a second app's login must not count as this one's)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import gradio as gr
import httpx
import pytest

from app.main import AppContext, start
from backend.core.paths import REPO_ROOT

USER, PASSWORD = "lab", "right-password"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab_app():
    """The Detour Lab app with its password, served on 127.0.0.1 (in this process, as ``python -m app`` starts it)."""
    demo, url = start("127.0.0.1", free_port(), False, AppContext(), auth=(USER, PASSWORD), block=False)
    yield url
    demo.close()


def login(url: str, user: str, password: str) -> httpx.Response:
    return httpx.post(url + "login", data={"username": user, "password": password}, timeout=30)


def test_a_wrong_password_is_refused_and_the_right_one_opens_the_app(lab_app):
    assert httpx.get(lab_app + "config", timeout=30).status_code == 401  # nothing without a login
    wrong = login(lab_app, USER, "wrong-password")
    assert wrong.status_code == 400 and "Incorrect credentials" in wrong.text and not wrong.cookies
    assert login(lab_app, "someone-else", PASSWORD).status_code == 400
    ok = login(lab_app, USER, PASSWORD)
    assert ok.status_code == 200
    assert httpx.get(lab_app + "config", cookies=ok.cookies, timeout=30).status_code == 200


def test_a_session_cookie_from_another_app_is_refused(lab_app):
    """Another gradio app on this machine, even with the same user and password: its cookie, sent as is (what a
    browser does across ports) or renamed to this app's cookie name, is no session here."""
    with gr.Blocks() as other:
        gr.Markdown("another app")
    _, other_url, _ = other.launch(
        server_name="127.0.0.1", server_port=free_port(), auth=(USER, PASSWORD), prevent_thread_lock=True
    )
    try:
        theirs = login(other_url, USER, PASSWORD)
        assert theirs.status_code == 200 and theirs.cookies
        assert httpx.get(other_url + "config", cookies=theirs.cookies, timeout=30).status_code == 200
        assert httpx.get(lab_app + "config", cookies=theirs.cookies, timeout=30).status_code == 401
        ours = login(lab_app, USER, PASSWORD).cookies
        renamed = {name: theirs.cookies[theirs_name] for name, theirs_name in zip(ours, theirs.cookies, strict=True)}
        assert httpx.get(lab_app + "config", cookies=renamed, timeout=30).status_code == 401
    finally:
        other.close()


@pytest.mark.parametrize("flags", [["--host", "0.0.0.0"], ["--share"]])
def test_no_password_on_a_public_host_is_refused_at_start_with_one_line(flags):
    env = {k: v for k, v in os.environ.items() if k != "DETOUR_PASSWORD"}
    proc = subprocess.run(
        [sys.executable, "-m", "app", *flags], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "set DETOUR_PASSWORD" in lines[0], proc.stderr

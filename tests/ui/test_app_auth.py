"""Issue 30: the app as on a lab server. A wrong password is refused, a public host without a password is refused at
start with one line, and a session cookie that another app on the same machine handed out opens nothing here
(browsers send cookies to every port of a host, so a second app's login must not count as this one's)."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from http.cookies import SimpleCookie

import gradio as gr
import pytest

from app.main import AppContext, start
from backend.core.paths import REPO_ROOT
from conftest import free_port

USER, PASSWORD = "lab", "right-password"


@pytest.fixture(scope="module")
def lab_app():
    """The Detour Lab app with its password, served on 127.0.0.1 (in this process, as ``python -m app`` starts it)."""
    demo, url = start("127.0.0.1", free_port(), False, AppContext(), auth=(USER, PASSWORD), block=False)
    yield url
    demo.close()


def login(url: str, user: str, password: str) -> tuple[int, str, dict[str, str]]:
    """POST /login as the login form does: (status, body, the cookies it set)."""
    data = urllib.parse.urlencode({"username": user, "password": password}).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url + "login", data=data), timeout=30) as r:
            jar = SimpleCookie()
            for header in r.headers.get_all("set-cookie") or []:
                jar.load(header)
            return r.status, r.read().decode(), {k: m.value for k, m in jar.items()}
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), {}


def config_status(url: str, cookies: dict[str, str] | None = None) -> int:
    """What GET /config answers with these cookies (the page's first request after the login)."""
    headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in (cookies or {}).items())} if cookies else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url + "config", headers=headers), timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_wrong_password_is_refused_and_the_right_one_opens_the_app(lab_app):
    assert config_status(lab_app) == 401  # nothing without a login
    code, body, cookies = login(lab_app, USER, "wrong-password")
    assert code == 400 and "Incorrect credentials" in body and not cookies
    assert login(lab_app, "someone-else", PASSWORD)[0] == 400
    code, _, cookies = login(lab_app, USER, PASSWORD)
    assert code == 200 and cookies
    assert config_status(lab_app, cookies) == 200


def test_a_session_cookie_from_another_app_is_refused(lab_app):
    """Another gradio app on this machine, even with the same user and password: its cookie, sent as is (what a
    browser does across ports) or renamed to this app's cookie name, is no session here."""
    with gr.Blocks() as other:
        gr.Markdown("another app")
    _, other_url, _ = other.launch(
        server_name="127.0.0.1", server_port=free_port(), auth=(USER, PASSWORD), prevent_thread_lock=True
    )
    try:
        code, _, theirs = login(other_url, USER, PASSWORD)
        assert code == 200 and theirs and config_status(other_url, theirs) == 200
        assert config_status(lab_app, theirs) == 401
        ours = login(lab_app, USER, PASSWORD)[2]
        assert set(ours).isdisjoint(theirs)  # each app names its cookie with its own random id
        renamed = dict(zip(sorted(ours), [theirs[k] for k in sorted(theirs)], strict=True))
        assert config_status(lab_app, renamed) == 401
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


@pytest.mark.parametrize("password", [" ", "   \t", "abc", "aaaaaaaaaa", "detour"])
def test_a_blank_or_trivial_password_off_loopback_is_refused_at_start(password):
    """A one-space DETOUR_PASSWORD once passed on --host 0.0.0.0, and a one-space login then opened the lab."""
    env = {**os.environ, "DETOUR_PASSWORD": password, "DETOUR_USER": "detour"}
    proc = subprocess.run(
        [sys.executable, "-m", "app", "--host", "0.0.0.0"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: DETOUR_PASSWORD"), proc.stderr


def test_a_real_password_passes_the_check():
    from app.__main__ import weak_password

    assert weak_password("detour", "correct horse battery") is None
    assert weak_password("detour", "DETOUR") is not None

"""The page a browser opens is rendered once per address and user and shared (``app.shared_page``), compressed for a
browser that accepts it; a browser that is not logged in never gets it. The app is served in this process, with a
password, as on a lab server."""

from __future__ import annotations

import gzip

import gradio.routes
import httpx
import pytest

from app import main
from tests.local_servers import free_port

pytestmark = pytest.mark.slow  # serves the app (a few seconds)
USER, PASSWORD = "detour", "a-lab-password"


@pytest.fixture(scope="module")
def served():
    demo = main.build_app(main.AppContext())
    demo, url = main.serve(demo, "127.0.0.1", free_port(), False, main.AppContext(), auth=(USER, PASSWORD), block=False)
    try:
        yield url
    finally:
        demo.close()


@pytest.fixture
def renders(monkeypatch):
    """How many times Gradio fills its page template."""
    made = []
    real = gradio.routes.templates.TemplateResponse
    monkeypatch.setattr(gradio.routes.templates, "TemplateResponse", lambda *a, **k: made.append(1) or real(*a, **k))
    return made


def browser(url: str) -> httpx.Client:
    http = httpx.Client(base_url=url, timeout=120)
    http.post("login", data={"username": USER, "password": PASSWORD}).raise_for_status()
    return http


def test_the_page_is_rendered_once_for_every_logged_in_browser(served, renders):
    first = browser(served).get("", headers={"accept-encoding": "identity"})
    pages = [browser(served).get("", headers={"accept-encoding": "identity"}) for _ in range(3)]
    assert b"window.gradio_config" in first.content and b'"auth_required"' not in first.content
    assert all(p.content == first.content for p in pages)
    assert len(renders) <= 1  # none when an earlier test had it made already


def test_a_browser_that_accepts_gzip_gets_it_compressed(served):
    http = browser(served)
    plain = http.get("", headers={"accept-encoding": "identity"})
    raw = http.send(http.build_request("GET", "", headers={"accept-encoding": "gzip, deflate"}), stream=True)
    zipped = b"".join(raw.iter_raw())
    assert raw.headers["content-encoding"] == "gzip" and "Accept-Encoding" in raw.headers["vary"]
    assert gzip.decompress(zipped) == plain.content and len(zipped) < len(plain.content) / 4


def test_a_browser_not_logged_in_gets_the_login_page_not_the_shared_one(served):
    browser(served).get("")  # the app's page is made and kept
    for cookies in ({}, {"access-token-unknown": "x"}):
        page = httpx.get(served, cookies=cookies, timeout=120).text
        assert '"auth_required": true' in page.replace('"auth_required":true', '"auth_required": true'), page[:300]
        assert "ner-model-0" not in page  # none of the app's components


def test_the_page_follows_the_address_the_app_is_reached_at(served, renders):
    http = browser(served)
    here = http.get("", headers={"accept-encoding": "identity"}).text
    renders.clear()
    there = http.get("", headers={"accept-encoding": "identity", "host": "lab.example.org:8080"}).text
    assert "lab.example.org:8080" in there and "lab.example.org" not in here and len(renders) == 1

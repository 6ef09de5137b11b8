"""The app starts on a machine too busy to answer its first request within 3 seconds: Gradio's launch check refused
to start it there (seen with the suite's browser tests under load), the app's own check waits."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from app import served


def _slow_server(delay_s: float) -> tuple[str, socket.socket]:
    """A real HTTP server on a free port whose every answer comes ``delay_s`` after the request, as from a server
    whose process waits for a core."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)

    def answer(conn: socket.socket) -> None:
        with conn:
            conn.recv(4096)
            time.sleep(delay_s)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    def accept() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:  # closed at the test's end
                return
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return f"http://127.0.0.1:{sock.getsockname()[1]}/", sock


def test_a_server_slower_than_gradios_check_is_waited_for():
    from gradio import networking

    url, sock = _slow_server(4.0)
    try:
        assert networking.url_ok(url) is False  # Gradio's launch check: this server 'is not accessible'
        waited = served.wait_until_served(url, patience_s=30)
        assert 3.5 < waited < 30
    finally:
        sock.close()


def test_no_server_is_said_with_its_address_after_the_patience():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    t = time.monotonic()
    with pytest.raises(served.NotServing, match=rf"app's server at {url} gave no answer within 1 s \(ConnectError"):
        served.wait_until_served(url, patience_s=1)
    assert time.monotonic() - t < 5


def test_the_app_launches_without_gradios_three_second_check(monkeypatch, tmp_path):
    """The launch no longer asks Gradio's check at all (it would refuse to start under load): the app serves, and its
    page answers."""
    import httpx
    from gradio import networking

    from app import main

    def refuse(url):
        raise AssertionError("Gradio's 3-second launch check was asked")

    monkeypatch.setattr(networking, "url_ok", refuse)
    monkeypatch.setenv("DETOUR_UPLOADS_DIR", str(tmp_path / "uploads"))
    import gradio as gr

    with gr.Blocks() as demo:
        gr.Markdown("served")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo, url = main.serve(demo, "127.0.0.1", port, False, main.AppContext(), block=False)
    try:
        assert httpx.get(url, timeout=30).status_code == 200
    finally:
        demo.close()

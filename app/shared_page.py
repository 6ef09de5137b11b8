"""The app's page, made once and shared by every browser that opens it.

Gradio renders the page a browser opens (``GET /``, with the app's whole config and API description inside: 555 KB)
anew for every request: it copies the config, rewrites its file addresses for the address the app was reached at,
describes the API and fills its template, ~80 ms of the server's CPU on 2 cores, the largest part of a page's
opening once a page sends only its first tab's events. The page is the same for every browser that reaches the app
at the same address as the same user, and a lab shares one user: it is kept here, keyed by what Gradio renders it
from (the address and the query it was asked with, the user the browser's cookie logs in), and sent compressed to a
browser that accepts it (Gradio compresses only paths with a file extension): ~75 KB instead of 555 KB over a
classroom's network. A browser that is not logged in gets the login page, never the app's."""

from __future__ import annotations

import asyncio
import gzip
from collections import OrderedDict

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request

# what Gradio builds the page's root address from (gradio.route_utils.get_request_origin), besides the request's URL
ADDRESS_HEADERS = ("host", "x-forwarded-host", "x-gradio-server", "x-forwarded-proto")
KEPT = 8  # pages kept: one per address and user a lab reaches the app at


class SharedPage:
    """ASGI middleware in front of Gradio's routes (``launch(app_kwargs={"middleware": ...})``)."""

    def __init__(self, app, kept: int = KEPT) -> None:
        self.app, self.kept = app, kept
        self.pages: OrderedDict[tuple, tuple[list, bytes, bytes]] = OrderedDict()  # key -> (headers, body, gzipped)
        self.making: dict[tuple, asyncio.Future] = {}  # pages being rendered now, by key

    async def __call__(self, scope, receive, send) -> None:
        key = self.key(scope) if scope["type"] == "http" and scope["method"] == "GET" and scope["path"] == "/" else None
        if key is None:
            await self.app(scope, receive, send)
            return
        if key not in self.pages:
            if key in self.making:  # another browser's request is rendering this page: wait for it
                await asyncio.shield(self.making[key])
            else:
                self.making[key] = asyncio.get_running_loop().create_future()
                try:
                    made = await self.render(scope, receive, send)
                    if made is not None:
                        self.pages[key] = made
                        while len(self.pages) > self.kept:
                            self.pages.popitem(last=False)
                finally:
                    self.making.pop(key).set_result(None)
                if made is None:  # not a page to share (an error, a redirect, a cookie): sent as Gradio made it
                    return
            if key not in self.pages:  # the render waited for was not shared: this request gets its own
                await self.app(scope, receive, send)
                return
        self.pages.move_to_end(key)
        await self.reply(scope, send, *self.pages[key])

    def key(self, scope) -> tuple | None:
        """What the page depends on, or None when this request's page is not shared (an app with its own
        authentication function: who the user is cannot be told here)."""
        app = scope.get("app")
        if app is None or getattr(app, "auth_dependency", None) is not None or not hasattr(app, "tokens"):
            return None
        cookies = Request(scope).cookies
        cookie_id = getattr(app, "cookie_id", "")
        token = cookies.get(f"access-token-{cookie_id}") or cookies.get(f"access-token-unsecure-{cookie_id}")
        headers = Headers(scope=scope)
        address = tuple(headers.get(h) for h in ADDRESS_HEADERS)
        return (app.tokens.get(token), scope.get("scheme"), scope.get("root_path"), scope.get("query_string"), address)

    async def render(self, scope, receive, send) -> tuple[list, bytes, bytes] | None:
        """Gradio's page for this request; kept when it is one (200, HTML), passed on as it is otherwise."""
        start: dict = {}
        body: list[bytes] = []

        async def capture(message) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            else:
                body.append(message.get("body", b""))

        await self.app(scope, receive, capture)
        headers = MutableHeaders(raw=list(start.get("headers", [])))
        page = b"".join(body)
        shareable = start.get("status") == 200 and headers.get("content-type", "").startswith("text/html")
        if not shareable or "set-cookie" in headers:
            await send(start)
            await send({"type": "http.response.body", "body": page})
            return None
        return (
            [(k, v) for k, v in headers.raw if k.lower() not in (b"content-length", b"date")],
            page,
            gzip.compress(page),
        )

    async def reply(self, scope, send, raw: list, page: bytes, gzipped: bytes) -> None:
        zipped = "gzip" in Headers(scope=scope).get("accept-encoding", "")
        body = gzipped if zipped else page
        headers = MutableHeaders(raw=list(raw))
        headers["content-length"] = str(len(body))
        headers["vary"] = "Accept-Encoding"
        if zipped:
            headers["content-encoding"] = "gzip"
        await send({"type": "http.response.start", "status": 200, "headers": headers.raw})
        await send({"type": "http.response.body", "body": body})

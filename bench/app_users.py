"""Users of the app as the load benchmark drives them: each one a logged-in page that asks the server what a browser
asks, over HTTP, and nothing more.

A browser opening the app logs in, reads the page (its config is inside), then sends every event the config
triggers on ``load``: unqueued ones as ``POST /gradio_api/run/predict``, queued ones through ``/gradio_api/queue/join``
and the session's stream. Picking a tab sends that tab's ``select`` events; an open tab's active timers tick at their
interval. ``Page`` does the same from the config the server sent, so the benchmark measures what the app's own
config asks of the server, not a list written here that the app could outgrow. Named events (fill-mask, NER, ...)
are called through Gradio's REST API (``POST /gradio_api/call/NAME``).

Async (httpx): 20 users with pauses between their actions are coroutines in one thread, light on the cores the app
and its run share with the benchmark.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import secrets
import ssl
import time

import httpx

CONFIG_START = "window.gradio_config = "
BROWSER_CONNECTIONS = 6  # what a browser opens to one host (HTTP/1.1): a page's load events share them


class EventFailed(RuntimeError):
    pass


_CONFIGS: dict[bytes, dict] = {}  # page digest -> its config: 20 users read the same page, parsed once here


def page_config(html: bytes) -> dict:
    """The config a page carries (``window.gradio_config = {...};`` in its HTML). The benchmark's users share the
    cores with the app at nice 19: parsing 450 KB of JSON for each one was their largest cost, so a page already
    seen is not parsed again (its config is read, never changed)."""
    digest = hashlib.sha1(html).digest()
    if digest not in _CONFIGS:
        text = html.decode()
        at = text.find(CONFIG_START)
        if at < 0:
            raise EventFailed("the page carries no gradio_config (not logged in?)")
        _CONFIGS[digest] = json.JSONDecoder().raw_decode(text, at + len(CONFIG_START))[0]
    return _CONFIGS[digest]


@functools.cache
def tls() -> ssl.SSLContext:
    """One TLS context for every user: httpx loads the system's CA certificates for each client it makes otherwise
    (90 ms of the users' CPU per page opened, on the cores the app and its run share with them)."""
    return ssl.create_default_context()


class BrowserTransport(httpx.AsyncHTTPTransport):
    """A request sent on a kept-alive connection that the server closed meanwhile (uvicorn closes idle ones after 5 s)
    fails before any response (the connection reset, or closed with nothing sent back); a browser sends it again on a
    new connection, unseen, and so does this. A user starved of CPU at nice 19 met it often: it picks a connection,
    then waits seconds for its turn to send."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return await super().handle_async_request(request)
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
            return await super().handle_async_request(request)


class Page:
    """One browser tab on the app: its session, the config it was served and the values its components hold."""

    def __init__(self, url: str, user: str, password: str, patience: float) -> None:
        # an idle connection is dropped before the server's keep-alive (uvicorn: 5 s) closes it; one the server closed
        # all the same is retried, as a browser does (``BrowserTransport``)
        limits = httpx.Limits(max_connections=BROWSER_CONNECTIONS, keepalive_expiry=2.0)
        transport = BrowserTransport(limits=limits, verify=tls())
        self.http = httpx.AsyncClient(base_url=url, timeout=patience, transport=transport)
        self.user, self.password = user, password
        self.session = secrets.token_hex(6)  # one per page, as a browser's
        self.config: dict = {}
        self.values: dict[int, object] = {}
        self.timer_on: dict[int, bool] = {}
        self._waiting: dict[str, asyncio.Future] = {}  # queued events waiting for their completion, by event id
        self._done: dict[str, dict] = {}  # completions that came before their event was waited for
        self._reader: asyncio.Task | None = None
        self.page_bytes = 0
        self.open_tab: str | None = None  # the id of the tab the page shows

    async def close(self) -> None:
        await self.http.aclose()

    # --- what a browser does ---------------------------------------------------------------------------------------

    async def open(self) -> int:
        """Log in, read the page, send its load events; returns how many events the opening sent."""
        r = await self.http.post("login", data={"username": self.user, "password": self.password})
        r.raise_for_status()
        r = await self.http.get("")
        r.raise_for_status()
        self.page_bytes = len(r.content)
        self.config = page_config(r.content)
        self.values = {c["id"]: (c.get("props") or {}).get("value") for c in self.config["components"]}
        self.timer_on = {
            c["id"]: bool(c["props"].get("active")) for c in self.config["components"] if c["type"] == "timer"
        }
        self.open_tab = self.opening_tab()
        deps = self.triggered_by(self.config["layout"]["id"], "load")
        await asyncio.gather(*(self.send(d) for d in deps))
        return len(deps)

    async def select_tab(self, tab_id: str) -> int:
        """Click the tab ``tab_id`` (its ``id=``): send its select events; returns how many."""
        block = self.tab_block(tab_id)
        self.open_tab = tab_id
        deps = self.triggered_by(block, "select")
        await asyncio.gather(*(self.send(d, event_data={"index": 0, "value": tab_id, "selected": True}) for d in deps))
        return len(deps)

    async def stay(self, tab_id: str, seconds: float) -> list[float]:
        """Read the open tab for ``seconds``: its running timers tick at their interval, as in a browser; returns how
        long each tick took to answer."""
        timers = [c for c in self.components_in(self.tab_block(tab_id)) if c["type"] == "timer"]
        ticking = [d for c in timers if self.timer_on.get(c["id"]) for d in self.triggered_by(c["id"], "tick")]
        if not ticking:
            await asyncio.sleep(seconds)
            return []
        every = min(float(c["props"].get("value") or 1.0) for c in timers if self.timer_on.get(c["id"]))
        end, took = time.monotonic() + seconds, []
        while (left := end - time.monotonic()) > 0:
            await asyncio.sleep(min(every, left))
            if time.monotonic() < end:
                t = time.perf_counter()
                await asyncio.gather(*(self.send(d) for d in ticking))
                took.append(time.perf_counter() - t)
        return took

    async def call(self, api_name: str, *data, rest_as_shown: bool = False) -> list:
        """A named event through Gradio's REST API: the call, then its stream; the outputs. ``rest_as_shown``: the
        inputs after ``data`` (a form's states and options) as the page holds them."""
        if rest_as_shown:
            (dep,) = [d for d in self.config["dependencies"] if d.get("api_name") == api_name]
            data = (*data, *[self.values.get(i) for i in dep["inputs"][len(data) :]])
        r = await self.http.post(f"gradio_api/call/{api_name}", json={"data": list(data), "session_hash": self.session})
        r.raise_for_status()
        stream = await self.http.get(f"gradio_api/call/{api_name}/{r.json()['event_id']}")
        stream.raise_for_status()
        event, payload = None, None
        for line in stream.text.splitlines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event in ("complete", "error"):
                payload = line.split(":", 1)[1].strip()
                break
        if event != "complete" or payload is None:
            raise EventFailed(f"{api_name}: {event or 'no event'}: {payload}")
        return json.loads(payload)

    # --- one event, as the browser sends it ------------------------------------------------------------------------

    async def send(self, dep: dict, event_data: dict | None = None) -> None:
        data = [self.values.get(i) for i in dep["inputs"]]
        body = {"data": data, "fn_index": dep["id"], "trigger_id": dep["targets"][0][0], "session_hash": self.session,
                "event_data": event_data}  # fmt: skip
        if dep.get("queue") is False:
            r = await self.http.post("gradio_api/run/predict", json=body)
            if r.status_code != 200:
                raise EventFailed(f"{self.name(dep)}: HTTP {r.status_code}: {r.text[:200]}")
            self.take(dep, r.json().get("data") or [])
            return
        r = await self.http.post("gradio_api/queue/join", json=body)
        r.raise_for_status()
        event_id = r.json()["event_id"]
        msg = self._done.pop(event_id, None)  # answered before this coroutine was back from the join
        if msg is None:
            self._waiting[event_id] = asyncio.get_running_loop().create_future()
            if self._reader is None or self._reader.done():
                self._reader = asyncio.create_task(self._read_stream())
            msg = await self._waiting[event_id]
        if not msg.get("success"):
            raise EventFailed(f"{self.name(dep)}: {json.dumps(msg.get('output'))[:300]}")
        self.take(dep, (msg.get("output") or {}).get("data") or [])

    async def _read_stream(self) -> None:
        """The page's one stream of queued events' messages, as a browser keeps it: open while an event waits (the
        server closes it when none is pending); each completion goes to the event that waits for it."""
        try:
            while self._waiting:
                async with self.http.stream("GET", "gradio_api/queue/data", params={"session_hash": self.session}) as s:
                    async for line in s.aiter_lines():
                        if not line.startswith("data:"):
                            continue
                        msg = json.loads(line[5:])
                        if msg.get("msg") == "process_completed":
                            waiter = self._waiting.pop(msg.get("event_id"), None)
                            if waiter is None:
                                self._done[msg.get("event_id")] = msg
                            else:
                                waiter.set_result(msg)
                        elif msg.get("msg") in ("close_stream", "unexpected_error"):
                            break
        except Exception as exc:  # the stream failed: every waiting event fails with it, none hangs
            for waiter in self._waiting.values():
                waiter.set_exception(EventFailed(f"the session's stream failed: {type(exc).__name__}: {exc}"))
            self._waiting.clear()

    def take(self, dep: dict, outputs: list) -> None:
        """Keep what an event sent back, as the page shows it: a new value, or a component update's value."""
        for comp, out in zip(dep["outputs"], outputs, strict=False):
            if isinstance(out, dict) and out.get("__type__") == "update":
                if "value" in out:
                    self.values[comp] = out["value"]
                if "active" in out:  # a timer switched on or off
                    self.timer_on[comp] = bool(out["active"])
            elif not (isinstance(out, dict) and out.get("__type__") == "skip"):
                self.values[comp] = out

    # --- reading the config ----------------------------------------------------------------------------------------

    def triggered_by(self, block: int, event: str) -> list[dict]:
        return [
            d
            for d in self.config["dependencies"]
            if [block, event] in d["targets"] and d.get("backend_fn", True) and not d.get("trigger_after")
        ]

    def opening_tab(self) -> str | None:
        """The tab a page shows when it opens: its tabs' ``selected`` one, else the first."""
        tabs = [c["props"] for c in self.config["components"] if c["type"] == "tabitem"]
        chosen = next((c["props"].get("selected") for c in self.config["components"] if c["type"] == "tabs"), None)
        return chosen if chosen is not None else (tabs[0].get("id") if tabs else None)

    def tab_block(self, tab_id: str) -> int:
        for c in self.config["components"]:
            if c["type"] == "tabitem" and (c.get("props") or {}).get("id") == tab_id:
                return c["id"]
        raise EventFailed(f"no tab '{tab_id}' in the app's config")

    def components_in(self, block: int) -> list[dict]:
        by_id = {c["id"]: c for c in self.config["components"]}
        found, todo = [], [self._layout_node(self.config["layout"], block)]
        while todo:
            node = todo.pop()
            if node is None:
                continue
            found.append(by_id[node["id"]])
            todo += node.get("children") or []
        return found

    def _layout_node(self, node: dict, block: int) -> dict | None:
        if node["id"] == block:
            return node
        for child in node.get("children") or []:
            if (hit := self._layout_node(child, block)) is not None:
                return hit
        return None

    def name(self, dep: dict) -> str:
        return dep.get("api_name") or f"event {dep['id']}"

"""What the served app does for each page's events: a page's first event makes no copy of every component's config
(``app.session_state``), and a queued event no longer makes Gradio rebuild a table of its past events. The app is
served in this process (``app.main.serve``) so its session holder and queue can be read."""

from __future__ import annotations

import json
import secrets

import httpx
import pytest
from gradio.queueing import Queue
from gradio.state_holder import SessionState

from app import main, session_state
from tests.local_servers import free_port

pytestmark = pytest.mark.slow  # serves the app (a few seconds)


@pytest.fixture(scope="module")
def served():
    demo = main.build_app(main.AppContext())
    demo, url = main.serve(demo, "127.0.0.1", free_port(), False, main.AppContext(), block=False)
    try:
        yield demo, httpx.Client(base_url=url, timeout=120)
    finally:
        demo.close()


def named(demo, api_name: str):
    return next(f for f in demo.fns.values() if f.api_name == api_name)


def first_event(demo, http, session: str) -> None:
    """What a browser's opening sends first: the Launch form's proposed name (unqueued)."""
    fn = named(demo, "proposed_name")
    body = {"data": ["detour"], "fn_index": fn._id, "trigger_id": demo._id, "session_hash": session}
    assert http.post("gradio_api/run/predict", json=body).status_code == 200


def test_a_pages_first_event_copies_no_component_config(served):
    demo, http = served
    session = secrets.token_hex(6)
    first_event(demo, http, session)
    state = demo.server_app.state_holder.session_data[session]
    assert isinstance(state, session_state.LazySessionState)
    made = dict.__len__(state.config_values)
    assert made <= 2 < len(demo.blocks) / 10, made  # the event's output at most, not the app's 565 blocks


def test_a_lazy_session_reads_as_gradios_eager_one_and_keeps_its_writes_to_itself(served):
    demo, _ = served
    eager, lazy, other = SessionState(demo), session_state.LazySessionState(demo), session_state.LazySessionState(demo)
    name = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "yaml-preview")
    lazy._update_value_in_config(name._id, "seen by this page only")
    assert lazy.config_values[name._id]["props"]["value"] == "seen by this page only"
    assert other.config_values[name._id]["props"]["value"] == eager.config_values[name._id]["props"]["value"]
    assert name._id in other.config_values and -1 not in other.config_values
    other_view = {c["id"]: c for c in other.components}  # a deep link's copy: every block, as Gradio's
    assert json.dumps(other_view, default=str, sort_keys=True) == json.dumps(
        {c["id"]: c for c in eager.components}, default=str, sort_keys=True
    )


def test_a_queued_event_does_not_rebuild_gradios_table_of_past_events(served, monkeypatch):
    """Gradio's queue made a pandas table of up to its last 10,000 events after every queued event (for a monitoring
    page this app does not serve): 20-80 ms of the app's CPU on each fill-mask answer."""
    demo, http = served
    built = []
    monkeypatch.setattr(Queue, "_get_df", staticmethod(lambda records: built.append(len(records))))
    for _ in range(3):
        r = http.post("gradio_api/call/log_tail", json={"data": [None], "session_hash": secrets.token_hex(6)})
        stream = http.get(f"gradio_api/call/log_tail/{r.json()['event_id']}")
        assert "event: complete" in stream.text, stream.text
    assert built == []
    assert http.get("monitoring/summary").status_code in (403, 404)  # and no monitoring page to read it

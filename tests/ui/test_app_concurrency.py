"""Issue 30: heavy actions (CKA, trajectories, fine-tuning) must not stall light ones, and a waiting request is told
where it waits. The limits are set on purpose in ``app.main`` (``QUEUE``, ``HEAVY``) and on the events."""

from __future__ import annotations

import socket
import time

import pytest
from gradio_client import Client
from gradio_client.utils import Status

from app.main import HEAVY, QUEUE, AppContext, build_app, start

LIGHT = ("fill_mask", "ner_tag", "curves", "runs_refresh", "log_tail")


def test_heavy_actions_share_one_slot_per_group_and_light_ones_are_in_no_group():
    demo = build_app(AppContext())
    fns = {f.api_name: f for f in demo.fns.values() if f.api_name}
    for group, names in HEAVY.items():
        for name in names:
            assert (fns[name].concurrency_id, fns[name].concurrency_limit) == (group, 1), name
    heavy_ids = set(HEAVY)
    for name in LIGHT:
        assert fns[name].concurrency_id not in heavy_ids, name
    assert QUEUE["max_size"] and QUEUE["default_concurrency_limit"] > 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_light_action_answers_while_heavy_ones_run_and_wait_and_the_waiting_one_knows_its_place(
    tiny_bert_dir, tmp_path, monkeypatch
):
    """Three fine-tuning evaluations (the NER tab's heavy action) are sent at once: one runs, the others wait in the
    queue with their place (the page shows it as "queue: 1/2"); meanwhile the Runs tab's reads answer at once."""
    monkeypatch.setenv("DETOUR_ALLOWED_ROOTS", str(tiny_bert_dir))
    monkeypatch.setenv("DETOUR_EVALS_DIR", str(tmp_path / "evals"))
    demo, url = start("127.0.0.1", free_port(), False, AppContext(), block=False)
    try:
        client = Client(url, verbose=False)
        args = ([str(tiny_bert_dir)], "0", 4, 16, None, None, None, None)
        jobs = [client.submit(*args, api_name="/ner_evaluate") for _ in range(3)]
        deadline = time.time() + 120
        while time.time() < deadline and not any(j.status().code == Status.PROCESSING for j in jobs):
            time.sleep(0.2)
        waiting = [j.status() for j in jobs if j.status().code == Status.IN_QUEUE]
        assert len(waiting) == 2, [j.status() for j in jobs]
        assert sorted(s.rank for s in waiting) == [0, 1], waiting  # 0 and 1 ahead of them: "queue: 1/2", "2/2"
        t = time.perf_counter()
        client.predict(None, None, "tokens_seen", api_name="/runs_refresh")
        client.predict([], "tokens_seen", api_name="/curves")
        light = time.perf_counter() - t
        assert any(not j.done() for j in jobs), "the heavy ones ended before the light ones were asked"
        assert light < 15, f"the Runs tab's reads took {light:.1f} s behind the evaluations"
        for j in jobs:
            j.cancel()
    finally:
        demo.close()

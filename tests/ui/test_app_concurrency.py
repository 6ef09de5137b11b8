"""Issue 30: heavy actions (CKA, trajectories, fine-tuning) must not stall light ones, and a waiting request is told
where it waits. The limits are set on purpose in ``app.main`` (``QUEUE``, ``HEAVY``) and on the events."""

from __future__ import annotations

from app.main import HEAVY, QUEUE, AppContext, build_app

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


def test_fill_mask_and_ner_tagging_answer_their_waiting_users_in_batches():
    """Issue 40: 20 users' fill-mask requests were run one by one (fill-mask p95 10 s on 2 cores); the requests that
    wait while one batch runs now form the next batch (Gradio's ``batch=True``), one batch at a time."""
    fns = {f.api_name: f for f in build_app(AppContext()).fns.values() if f.api_name}
    for name in ("fill_mask", "ner_tag"):
        assert fns[name].batch and fns[name].max_batch_size >= 8 and fns[name].concurrency_limit == 1, name

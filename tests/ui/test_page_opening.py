"""What a page's opening asks of the server. Twenty people opening the app at once waited 7-10 s on 2 cores: each
page's opening read every tab's lists (15 events, most for tabs not shown), and its HTML carried the whole API page.
A page now opens with the events of the tab it shows; every other tab is read when it is first shown."""

from __future__ import annotations

import json
import time

import gradio as gr
import plotly.graph_objects as go
import pytest

from app import main
from backend.core import atomic
from backend.engine import rundir
from backend.engine.config import default_config


@pytest.fixture(scope="module")
def demo():
    return main.build_app(main.AppContext())


def below(block) -> set[int]:
    found = {block._id}
    for child in getattr(block, "children", None) or []:
        found |= below(child)
    return found


def tabs(demo) -> dict[str, gr.Tab]:
    return {b.id: b for b in demo.blocks.values() if isinstance(b, gr.Tab)}


def test_a_page_opens_with_the_events_of_its_first_tab_only(demo):
    in_tabs = {tab_id: below(t) for tab_id, t in tabs(demo).items()}
    anywhere = set().union(*in_tabs.values())
    opening = [f for f in demo.fns.values() if (demo._id, "load") in f.targets]
    assert opening, "the Launch form proposes a free name and lists the saved configs when a page opens"
    for f in opening:  # writing to the Launch tab, or to the page around the tabs: never to a tab not shown
        hidden = {o._id for o in f.outputs} & (anywhere - in_tabs[main.TABS[0][1]])
        assert not hidden, f"{f.name} runs at every page's opening and writes to a hidden tab"
    assert len(opening) <= 3, [f.name for f in opening]


def test_the_runs_tab_shows_its_runs_curves_and_log_as_soon_as_it_is_picked(demo, isolated_runs_dir):
    """Its table, log and figures are no longer computed on every page's opening (nor carried in the page): picking
    the tab sends them, without waiting for the timer's first tick."""
    runs = tabs(demo)["runs"]
    shown = [f for f in demo.fns.values() if (runs._id, "select") in f.targets and f.fn is not None]
    (poll,) = [f for f in shown if any(getattr(o, "elem_id", None) == "runs-table" for o in f.outputs)]
    ids = [getattr(o, "elem_id", None) for o in poll.outputs]
    for elem_id in ("plot-train", "runs-timeline"):
        assert poll.outputs[ids.index(elem_id)].value is None  # the page carries no figure for a tab not shown

    d = isolated_runs_dir / "picked-run"  # made after the page was built
    d.mkdir(parents=True)
    atomic.write_yaml(d / "config.yaml", {**default_config(), "name": "picked-run"})
    rundir.write_status(d, state="done", created_at=time.time())
    (d / "train.log").write_text("step 1 loss 9.0\n")
    for s in (1, 2):
        row = {"type": "train", "step": s, "phase": "main", "objective": "clm", "loss": 9.0, "tokens_seen": 64 * s}
        atomic.append_jsonl(d / "metrics.jsonl", row)
    out = dict(zip(ids, poll.fn([], None, "tokens_seen", {}, None, None), strict=False))
    assert out["runs-table"][0][0] == "picked-run"
    assert "loss 9.0" in out["runs-log"]
    assert isinstance(out["plot-train"], go.Figure) and isinstance(out["runs-timeline"], go.Figure)


def test_the_api_page_lists_the_actions_and_not_the_forms_plumbing(demo):
    """The form's own events each list its 60 fields: left out of the API page (still callable by name), the page a
    browser loads is 45% lighter in API description."""
    documented = demo.get_api_info()["named_endpoints"]
    callable_ = demo.get_api_info(all_endpoints=True)["named_endpoints"]
    for name in ("validate", "save_config", "load_config", "load_saved_config", "upload_corpus", "proposed_name"):
        assert f"/{name}" not in documented and f"/{name}" in callable_, name
    for name in ("launch", "fill_mask", "ner_tag", "runs_refresh", "curves", "cancel", "resume", "sweep_cancel"):
        assert f"/{name}" in documented, name
    assert not [n for n in documented if n.startswith("/lambda")]  # every documented action has a name


def test_the_page_a_browser_loads_stays_small(demo):
    """Its HTML carries the config and the API description: 680 KB before, 555 KB now."""
    config = json.dumps(demo.get_config_file(), default=str)
    api = json.dumps(demo.get_api_info(), default=str)
    assert len(config) + len(api) < 600_000, (len(config), len(api))

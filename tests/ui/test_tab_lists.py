"""Model and report lists stay current: what is made after the page was built appears when the tab is shown (its
select; page load too for the tab a page opens on) and on the tab's refresh button (the NER tab's evaluation list
once never did)."""

from __future__ import annotations

import shutil
import time

import pytest

from app import main
from backend.core import atomic, paths
from backend.engine import rundir
from backend.engine.config import default_config


@pytest.fixture(autouse=True)
def app_env(tmp_path, monkeypatch, tiny_bert_dir):
    monkeypatch.setenv("DETOUR_ALLOWED_ROOTS", str(tiny_bert_dir))
    monkeypatch.setenv("DETOUR_UPLOADS_DIR", str(tmp_path / "uploads"))
    monkeypatch.setenv("DETOUR_EVALS_DIR", str(tmp_path / "evals"))
    monkeypatch.setenv(paths.REPORTS_ENV, str(tmp_path / "reports"))


def saved_run(root, name: str, model_dir, recipe: str = "clm_detour", pair: str | None = None):
    """A finished run directory whose final/ model is ``model_dir``."""
    d = root / name
    d.mkdir(parents=True)
    cfg = {**default_config(), "name": name, "recipe": recipe}
    if pair:
        cfg["_meta"] = {"pair": pair, "role": "detour" if recipe == "clm_detour" else "mlm"}
    atomic.write_yaml(d / "config.yaml", cfg)
    rundir.write_status(d, state="done", created_at=time.time())
    shutil.copytree(model_dir, d / "final")
    return d


def refresher(demo, component):
    """The one function that sends ``component`` new choices, and the events that run it."""
    found = [
        f for f in demo.fns.values() if component in f.outputs and f.fn is not None and f.api_visibility == "private"
    ]
    found = [f for f in found if {ev for _, ev in f.targets} >= {"select", "click"}]
    assert len(found) == 1, [(f.name, f.targets) for f in found]
    return found[0]


def tab_id(demo, tab_name: str) -> int:
    return next(b._id for b in demo.blocks.values() if getattr(b, "id", None) == tab_name)


def test_ner_evaluation_list_shows_a_run_made_after_build(isolated_runs_dir, tiny_bert_dir):
    demo = main.build_app(main.AppContext())
    ev_models = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "ner-ev-models")
    fn = refresher(demo, ev_models)
    targets = {(bid, ev) for bid, ev in fn.targets}
    assert (tab_id(demo, "ner"), "select") in targets and (demo._id, "load") not in targets  # read when shown

    saved_run(isolated_runs_dir, "late-run", tiny_bert_dir)  # made after the page was built
    updates = fn.fn()
    new = updates[fn.outputs.index(ev_models)]
    assert "late-run" in new["choices"]


def built_state(fn):
    """The value the page was built with of the refresher's last input: the defaults its pickers were given."""
    return fn.inputs[-1].value


def test_analyze_and_fill_mask_lists_refresh_and_fill_defaults(isolated_runs_dir, tiny_bert_dir):
    demo = main.build_app(main.AppContext())
    by_id = {getattr(b, "elem_id", None): b for b in demo.blocks.values()}
    fn = refresher(demo, by_id["an-b"])
    assert (tab_id(demo, "analyze"), "select") in set(fn.targets)
    # built with the bundled base only: nothing to compare, and the page says so
    assert by_id["an-b"].value is None and "Only one model" in by_id["an-note"].value
    built = built_state(fn)

    saved_run(isolated_runs_dir, "x-detour", tiny_bert_dir, "clm_detour", pair="x")
    saved_run(isolated_runs_dir, "x-mlm", tiny_bert_dir, "mlm", pair="x")
    ids = [o.elem_id for o in fn.outputs]
    values = dict(zip(ids, fn.fn("detour-tiny-en", None, None, built), strict=True))  # the page as built: A = base
    assert {"x-detour", "x-mlm"} <= {v for _, v in values["an-a"]["choices"]}
    assert values["an-a"]["value"] == "x-detour" and values["an-b"]["value"] == "x-mlm"  # the pair, as on a new page
    assert values["an-run"]["value"] == "x-detour" and values["an-note"] == ""
    chosen = dict(zip(ids, fn.fn("x-mlm", None, "x-mlm", built), strict=True))
    assert chosen["an-a"]["value"] == "x-mlm" and chosen["an-run"]["value"] == "x-mlm"  # a chosen model is kept
    assert chosen["an-b"]["value"] is None  # B is A's partner in a comparison the user is making: it stays empty
    kept = dict(zip(ids, fn.fn("detour-tiny-en", "x-mlm", None, built), strict=True))
    assert kept["an-a"]["value"] == "detour-tiny-en" and kept["an-b"]["value"] == "x-mlm"

    fm = refresher(demo, by_id["fm-model-1"])
    assert (tab_id(demo, "fill-mask"), "select") in set(fm.targets)
    slots = fm.fn("detour-tiny-en", None, None, None, built_state(fm))  # as built: the base only
    assert "x-mlm" in slots[1]["choices"]
    assert [s["value"] for s in slots[:3]] == ["detour-tiny-en", "x-detour", "x-mlm"]  # the base and the pair
    picked = fm.fn("x-mlm", None, "detour-tiny-en", None, built_state(fm))
    assert [s["value"] for s in picked[:3]] == ["x-mlm", None, "detour-tiny-en"]


def test_detour_tab_lists_fill_in_the_newest_pair_made_after_build(isolated_runs_dir, tiny_bert_dir):
    """A teacher opens the page, trains a pair, comes back to the Detour tab: the surprise compares the base with
    the pair's two runs and the scrub shows the detour run, without a reload; a model already picked is kept."""
    demo = main.build_app(main.AppContext())
    by_id = {getattr(b, "elem_id", None): b for b in demo.blocks.values()}
    fn = refresher(demo, by_id["dt-run"])
    assert (tab_id(demo, "detour"), "select") in set(fn.targets)
    assert by_id["dt-run"].value is None and by_id["dt-model-1"].value is None  # built with no run
    built = built_state(fn)

    saved_run(isolated_runs_dir, "y-detour", tiny_bert_dir, "clm_detour", pair="y")
    saved_run(isolated_runs_dir, "y-mlm", tiny_bert_dir, "mlm", pair="y")
    ids = [o.elem_id for o in fn.outputs]
    page = ("detour-tiny-en", "detour-tiny-en", None, None, None, None, "")
    values = dict(zip(ids, fn.fn(*page, built), strict=True))
    assert [values[f"dt-model-{i}"]["value"] for i in range(3)] == ["detour-tiny-en", "y-detour", "y-mlm"]
    assert values["dt-run"]["value"] == "y-detour" and ("y-mlm", "y-mlm") in values["dt-run"]["choices"]

    page = ("detour-tiny-en", "y-mlm", "detour-tiny-en", None, None, "y-mlm", "")
    picked = dict(zip(ids, fn.fn(*page, built), strict=True))
    assert [picked[f"dt-model-{i}"]["value"] for i in range(2)] == ["y-mlm", "detour-tiny-en"]  # kept as chosen
    assert picked["dt-run"]["value"] == "y-mlm"


def test_a_page_opened_while_a_pair_trains_shows_its_second_run_once_saved(isolated_runs_dir, tiny_bert_dir):
    """A page opened while a pair's detour run trained (its MLM run queued, nothing saved) showed the detour run
    beside the base in Fill-mask, Detour and Analyze, and never the MLM run, even after Refresh: a slot filled once
    was a choice. Pickers still on the defaults the page gave them follow the newest pair; a choice made is kept."""
    demo = main.build_app(main.AppContext())
    by_id = {getattr(b, "elem_id", None): b for b in demo.blocks.values()}
    saved_run(isolated_runs_dir, "z-detour", tiny_bert_dir, "clm_detour", pair="z")
    mlm = isolated_runs_dir / "z-mlm"
    mlm.mkdir()
    atomic.write_yaml(mlm / "config.yaml", {**default_config(), "name": "z-mlm", "recipe": "mlm",
                                            "_meta": {"pair": "z", "role": "mlm"}})  # fmt: skip
    rundir.write_status(mlm, state="queued", created_at=time.time())

    tabs = {"fill-mask": "fm-model-2", "detour": "dt-model-2", "analyze": "an-b"}  # where the MLM run belongs
    pages = {}
    for tab, elem in tabs.items():  # the page loads while the detour run alone has saved a model
        fn = refresher(demo, by_id[elem])
        ids = [o.elem_id for o in fn.outputs]
        page = {o.elem_id: by_id[o.elem_id].value for o in fn.inputs[:-1]}  # the picks as built
        out = fn.fn(*page.values(), built_state(fn))
        values = {i: (u.get("value") if isinstance(u, dict) else u) for i, u in zip(ids, out, strict=True)}
        pages[tab] = (fn, ids, {k: values[k] for k in page}, out[-1])  # what the page holds now
    assert [pages["fill-mask"][2][f"fm-model-{i}"] for i in range(3)] == ["detour-tiny-en", "z-detour", None]
    assert "z-mlm" not in pages["detour"][2].values()

    shutil.copytree(tiny_bert_dir, mlm / "final")  # the MLM run saves its model
    rundir.write_status(mlm, state="done")
    for tab, (fn, ids, page, given) in pages.items():  # Refresh on the page opened before
        out = fn.fn(*page.values(), given)
        got = {i: u["value"] for i, u in zip(ids, out, strict=True) if isinstance(u, dict) and "value" in u}
        assert got[tabs[tab]] == "z-mlm", (tab, got)
    fm, ids, page, given = pages["fill-mask"]
    out = fm.fn("detour-tiny-en", "z-detour", "detour-tiny-en", None, given)  # a slot the user changed: kept
    assert [u["value"] for u in out[:3]] == ["detour-tiny-en", "z-detour", "detour-tiny-en"]

"""The app and its lists follow the catalogue (issue 38): one unreadable run folder never stops the app, lists are
read when a page opens and on Refresh, a suite's output folder follows the picked suite, and what the lab wrote
itself (a sweep's runs) is inside the allowed roots."""

from __future__ import annotations

import os

import pytest

from app import check_model_spec, main, newest_pair, suite_panel, sweeps_tab
from backend.core import atomic, catalogue, paths
from tests.ui.test_tab_lists import saved_run  # one way to lay out a finished run


@pytest.fixture(autouse=True)
def app_env(tmp_path, monkeypatch):
    monkeypatch.setenv("DETOUR_UPLOADS_DIR", str(tmp_path / "uploads"))
    monkeypatch.setenv("DETOUR_EVALS_DIR", str(tmp_path / "evals"))
    monkeypatch.setenv(paths.REPORTS_ENV, str(tmp_path / "reports"))
    monkeypatch.setenv(paths.SWEEPS_ENV, str(tmp_path / "sweeps"))
    monkeypatch.delenv("DETOUR_ALLOWED_ROOTS", raising=False)


def bad_runs(root, model_dir, tmp_path) -> dict[str, str]:
    """Three finished runs whose config.yaml cannot be read, each newer than the good ones."""
    unknown = saved_run(root, "bad-key", model_dir)
    unknown.joinpath("config.yaml").write_text(unknown.joinpath("config.yaml").read_text() + "no_such_key: 1\n")
    saved_run(root, "bad-empty", model_dir).joinpath("config.yaml").write_text("")
    linked = saved_run(root, "bad-link", model_dir)
    (tmp_path / "outside.yaml").write_text("name: x\n")
    linked.joinpath("config.yaml").unlink()
    os.symlink(tmp_path / "outside.yaml", linked / "config.yaml")
    return {"bad-key": "no_such_key", "bad-empty": "empty", "bad-link": "outside"}


def test_the_app_starts_whatever_one_run_folder_holds(isolated_runs_dir, tiny_bert_dir, tmp_path):
    saved_run(isolated_runs_dir, "good-detour", tiny_bert_dir, pair="good")
    saved_run(isolated_runs_dir, "good-mlm", tiny_bert_dir, pair="good", recipe="mlm")
    reasons = bad_runs(isolated_runs_dir, tiny_bert_dir, tmp_path)
    assert newest_pair() == ("good-detour", "good-mlm", True)  # the bad ones are skipped, not fatal
    demo = main.build_app(main.AppContext())  # ConfigError from newest_pair -> read_config stopped this
    assert demo is not None
    from app import runs_tab

    rows = {r[0]: r for r in runs_tab.runs_table()}
    for name, word in reasons.items():  # listed, with why it cannot be read
        assert name in rows and rows[name][-1].startswith("unreadable: "), rows[name]
        assert word in runs_tab.config_problem(isolated_runs_dir / name)


def test_sweeps_list_is_read_when_a_page_opens(tmp_path):
    demo = main.build_app(main.AppContext())  # built before the sweep exists
    pick = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "sw-pick")
    fns = [f for f in demo.fns.values() if pick in f.outputs and {ev for _, ev in f.targets} >= {"load", "click"}]
    assert len(fns) == 1, [(f.name, f.targets) for f in fns]
    out = paths.sweeps_dir() / "late"
    out.mkdir(parents=True)
    atomic.write_json(out / "sweep.json", _manifest("late"))
    atomic.write_text(out / "report.md", "# Sweep late\n\nthe report\n")
    upd = fns[0].fn(None)  # a newly opened page: nothing picked yet
    assert upd[0]["choices"] and upd[0]["value"] == "late"
    assert "No sweep yet" not in upd[1] and "the report" in upd[-1]


def _manifest(name: str) -> dict:
    from backend.sweeps.sweep import plan_sweep

    return plan_sweep(None, [], ["train.lr=1e-4,2e-4"], 1, name=name)


def test_suite_runs_list_and_figure_are_read_on_page_load_and_refresh(tmp_path):
    demo = main.build_app(main.AppContext())  # the page is built before any suite ran
    pick = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "suite-runs")
    fig = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "suite-fig")
    fns = [f for f in demo.fns.values() if pick in f.outputs and {ev for _, ev in f.targets} >= {"load", "click"}]
    assert len(fns) == 1 and fig in fns[0].outputs
    out = catalogue.suites_dir() / "bio-ner"
    catalogue.claim_folder(out, "suite", "bio-ner")
    (out / "suite.md").write_text("# Suite bio-ner\n")
    upd = fns[0].fn(None)
    assert upd[0]["value"] == "bio-ner" and ("bio-ner", "bio-ner") in [tuple(c) for c in upd[0]["choices"]]
    assert "Suite bio-ner" in upd[2]


def test_suite_output_folder_follows_the_picked_suite(tmp_path):
    demo_suite, other = tmp_path / "demo.yaml", tmp_path / "other.yaml"
    data = paths.DEMO_NER_DIR
    demo_suite.write_text(f"name: demo\ntasks:\n  - name: t1\n    task: ner\n    data: {data}\n")
    other.write_text(f"name: other\ntasks:\n  - name: t1\n    task: ner\n    data: {data}\n")
    assert suite_panel.default_name(str(demo_suite)) == "demo"
    assert suite_panel.default_name(str(other)) == "other"
    page = main.build_app(main.AppContext())
    name = next(b for b in page.blocks.values() if getattr(b, "elem_id", None) == "suite-name")
    pick = next(b for b in page.blocks.values() if getattr(b, "elem_id", None) == "suite-pick")
    follows = [f for f in page.fns.values() if name in f.outputs and (pick._id, "change") in f.targets]
    assert len(follows) == 1 and follows[0].fn(str(other)) == "other"  # the Name field follows the picked suite
    assert name.value == suite_panel.default_name(pick.value)  # and starts as the first suite's, not 'bio-ner'

    # the folder a suite ran into is its own: another suite under the same name is refused before it starts
    catalogue.claim_folder(catalogue.suites_dir() / "demo", "suite", "demo")
    with pytest.raises(catalogue.OutTaken, match="holds the suite 'demo', not 'other'"):
        suite_panel.start_suite(str(other), "detour-tiny-en", "", "demo")


def test_a_sweeps_runs_are_inside_the_allowed_roots(tiny_bert_dir):
    run = saved_run(paths.sweeps_dir() / "sw" / "runs", "sw-s0", tiny_bert_dir)
    assert check_model_spec(str(run), "control seed 1") == str(run.resolve())
    suite_task = catalogue.suites_dir() / "bio-ner" / "tasks" / "t1"
    suite_task.mkdir(parents=True)
    from app import check_path

    assert check_path(suite_task, "evaluation") == suite_task.resolve()


def test_unreadable_sweep_is_listed_with_its_reason():
    out = paths.sweeps_dir() / "torn"
    out.mkdir(parents=True)
    (out / "sweep.json").write_text("{not json")
    names = sweeps_tab.sweep_choices()
    assert any("torn" in str(c) and "unreadable" in str(c) for c in names), names


def test_two_uploads_of_one_name_in_one_second_are_both_kept(tmp_path, monkeypatch):
    from app import launch_configs, launch_tab

    monkeypatch.setattr(launch_configs.time, "strftime", lambda fmt, *a: "20260101-000000")  # the same second
    first, second = tmp_path / "a" / "corpus.txt", tmp_path / "b" / "corpus.txt"
    for p, text in ((first, "first corpus\n"), (second, "second corpus\n")):
        p.parent.mkdir()
        p.write_text(text)
    kept = [launch_tab.store_upload(str(p), 10_000)[0] for p in (first, second)]
    assert kept[0] != kept[1]
    assert [open(k).read() for k in kept] == ["first corpus\n", "second corpus\n"]


def test_the_suite_figure_follows_a_report_written_while_the_page_is_open(tmp_path):
    demo = main.build_app(main.AppContext())
    fig = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "suite-fig")
    ticks = [f for f in demo.fns.values() if fig in f.outputs and {ev for _, ev in f.targets} == {"tick"}]
    assert len(ticks) == 1  # the poll draws the figure too, not only a re-selection of the run
    out = catalogue.claim_folder(catalogue.suites_dir() / "s1", "suite", "s1")
    atomic.write_json(out / "suite.json", {"suite": "s1", "comparisons": []})
    status, report, figure, board, board_fig, seen = ticks[0].fn("s1", None)  # suite.json appeared since drawn
    assert seen == (out / "suite.json").stat().st_mtime
    assert board["visible"] is False and board_fig["visible"] is False  # no leaderboard: fewer than three models
    again = ticks[0].fn("s1", seen)  # unchanged: the figures are left as drawn
    assert again[5] is not None and type(again[2]).__name__ == "dict" and again[2].get("__type__") == "update"


def test_a_served_report_copy_never_writes_through_a_planted_link(tmp_path, monkeypatch):
    from app import reports_tab

    monkeypatch.setattr(reports_tab.tempfile, "tempdir", str(tmp_path / "tmp"))
    rep = paths.reports_dir() / "quick"
    rep.mkdir(parents=True)
    (rep / "report.html").write_text("<p>report</p>")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    served = tmp_path / "tmp" / "detour-reports" / "quick"
    served.mkdir(parents=True)
    (served / "report.html").symlink_to(victim)  # another user of the shared temp dir planted it
    got = reports_tab._served_copy(rep / "report.html", "quick")
    assert victim.read_text() == "keep me\n" and open(got).read() == "<p>report</p>"

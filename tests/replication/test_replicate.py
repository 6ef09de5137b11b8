"""The mini replication end to end on a tiny random model: the quick plan with tiny budgets and 2 seeds completes,
writes report.json / report.html (self-contained) / PNGs, a rerun recomputes nothing, a failed step is reported
and retried; plus the pieces (layer thirds, corpus split) and the Reports tab handlers."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import types
from pathlib import Path

import pytest
import torch

from backend.__main__ import main as cli
from backend.core import paths, process
from backend.core.errors import DetourError
from backend.core.paths import DEMO_CORPUS, DEMO_NER_DIR
from backend.replication import plan, steps
from backend.replication import replicate as rep
from backend.replication.corpus import split_corpus
from backend.reporting import figure_files

TINY_SETS = [
    "train.main_tokens=2560",  # the decay (10%) is one whole step of 4 x 64 tokens
    "train.seq_len=64",
    "train.batch_size=4",
    "train.precision=fp32",
    "logging.eval_every=4",
    "logging.eval_batches=2",
    "eval.epochs=1",
    "eval.max_train_examples=24",
    "eval.max_eval_examples=16",
    "eval.max_len=64",
    "cka.n_texts=12",
    "cka.max_len=64",
]
OUTPUTS = ["report.json", "report.html", "report.md", "analysis/cka.json", "analysis/weights.json", "ner/results.json"]


def _argv(model: Path, out: Path) -> list[str]:
    argv = ["replicate", "--single-task", "--preset", "quick", "--model", str(model), "--corpus", str(DEMO_CORPUS)]
    argv += ["--ner-data", str(DEMO_NER_DIR), "--seeds", "2", "--out", str(out)]
    for s in TINY_SETS:
        argv += ["--set", s]
    return argv


def _steps_log(out: Path) -> list[dict]:
    return [json.loads(ln) for ln in (out / "steps.jsonl").read_text().splitlines() if ln.strip()]


def _mtimes(out: Path) -> dict[str, int]:
    files = [out / f for f in OUTPUTS] + sorted((out / "figures").glob("*")) + sorted((out / "runs").glob("*/final/*"))
    files += sorted((out / "steps").glob("*.json")) + [out / "settings.json", out / "data" / "train.txt"]
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in files}


@pytest.fixture(scope="module")
def one_thread():
    n, omp = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    torch.set_num_threads(1)  # 2 threads on a loaded 2-core machine are ~10x slower
    os.environ["OMP_NUM_THREADS"] = "1"
    yield
    torch.set_num_threads(n)
    if omp is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = omp


@pytest.fixture(scope="module")
def replication(tmp_path_factory, tiny_modernbert_dir, one_thread):
    """One quick replication on a 4-layer random model, built once for the module (about a minute)."""
    out = tmp_path_factory.mktemp("reports") / "quick-test"
    rc = cli(_argv(tiny_modernbert_dir, out))
    return {"out": out, "rc": rc, "model": tiny_modernbert_dir, "log": _steps_log(out)}


@pytest.mark.slow  # shares the module's end-to-end quick replication
def test_quick_plan_completes_with_a_self_contained_report(replication):
    out = replication["out"]
    assert replication["rc"] == 0
    assert json.loads((out / "status.json").read_text())["state"] == "done"
    for f in OUTPUTS:
        assert (out / f).is_file(), f
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "complete"
    assert [f["id"] for f in report["findings"]] == ["downstream", "low_layers", "freeze"]
    assert [st["step"] for st in report["steps"]] == plan.STEP_NAMES
    for f in report["findings"]:  # every finding has its numbers, the paper's and a verdict in words
        assert f["measured"] and f["paper"] and f["text"]
        assert f["verdict"].startswith(("replicated", "partly", "not replicated", "inconclusive"))
    # the model's depth decided the thirds: 4 layers -> lower 0-1, middle 2; the freeze runs used them
    assert report["settings"]["layers"]["low_range"] == "0-1" and report["settings"]["layers"]["mid_range"] == "2"
    assert report["runs"]["freeze_low"]["freeze_main"] == "0-1" and report["runs"]["freeze_mid"]["freeze_main"] == "2"
    ner = report["ner"]
    assert [m["key"] for m in ner["models"]] == ["mlm", "detour", "freeze_low", "freeze_mid"]  # the quick preset's
    assert all(m["n"] == 2 for m in ner["models"])
    c = next(c for c in ner["comparisons"] if (c["a"], c["b"]) == ("mlm", "detour"))
    assert c["n"] == 2 and c["ci95_t"] and c["ci95_bootstrap"] and c["wins_a"] + c["wins_b"] + c["ties"] == 2
    cka = report["cka"]
    assert len(cka["divergence"]) == len(cka["control_divergence"]) == len(cka["ratio"]) == 5  # embeddings + 4 blocks
    assert cka["freeze_low_vs_mlm"]["divergence"] and cka["end_main_detour_vs_mlm"]["divergence"]
    # every run trained on the same split files: one token store, built by the first run, opened by the others
    infos = [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*/data_info.json"))]
    assert len(infos) == 5 and len({i["cache_path"] for i in infos}) == 1
    assert sorted(i["cache_hit"] for i in infos) == [False, True, True, True, True]
    # CKA texts are held-out paragraphs, never in the training file
    train = set((out / "data" / "train.txt").read_text().splitlines())
    assert not train & set((out / "data" / "cka_texts.txt").read_text().splitlines())
    assert len(report["weights"]["from_base"]["freeze_low"]) == 5 and report["weights"]["detour_vs_mlm"][1] > 0

    html = (out / "report.html").read_text()
    assert not re.search(r"<script[^>]*\bsrc\s*=\s*[\"']?\s*(https?:)?//", html, re.I)
    assert not re.search(r"<link[^>]*\bhref\s*=\s*[\"']?\s*(https?:)?//", html, re.I)
    assert html.count("<script type='text/javascript'>") == 1  # plotly.js inlined once
    assert html.count("Plotly.newPlot") >= 6 and "The CLM detour beats MLM downstream" in html
    names = {"loss_curves", "divergence", "cka_heatmaps", "f1", "f1_table", "weight_change"}
    assert names <= {p.stem for p in (out / "figures").glob("*.json")}
    # PNGs: whatever this machine has decides what the report must say (each case is unit-tested below)
    if figure_files._find_browser() is None:
        assert "no Chromium/Chrome found" in report["png_error"]
    elif importlib.util.find_spec("kaleido") is None:
        assert "kaleido is not installed" in report["png_error"]
    else:  # a browser and kaleido: every figure is a real PNG, and the report points at it
        assert report["png_error"] is None
        for n in names:
            assert (out / "figures" / f"{n}.png").read_bytes()[:8] == PNG_MAGIC, n
            assert report["figures"][n]["png"] == f"figures/{n}.png"
    md = (out / "report.md").read_text()
    assert "## Findings" in md and "95% CI" in md and "paper:" in md


# export_pngs decides between three outcomes; each one is forced here, whatever this machine has installed.
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _figs():
    import plotly.graph_objects as go

    return {"a": go.Figure(go.Scatter(y=[1, 3, 2])), "b": go.Figure(go.Bar(y=[2, 1]), layout={"height": 300})}


@pytest.fixture
def browser_env(monkeypatch):
    """BROWSER_PATH unset for the test and restored after (export_pngs sets it for kaleido)."""
    monkeypatch.setenv("BROWSER_PATH", "placeholder")  # records the original value for undo
    monkeypatch.delenv("BROWSER_PATH")
    return monkeypatch


def _fake_kaleido(monkeypatch, write):
    calls = []

    def write_fig_from_object_sync(items, kopts=None):
        calls.append((items, kopts))
        write(items)

    monkeypatch.setitem(
        sys.modules, "kaleido", types.SimpleNamespace(write_fig_from_object_sync=write_fig_from_object_sync)
    )
    return calls


def test_export_pngs_without_a_browser_says_chromium(browser_env, tmp_path):
    browser_env.setattr(figure_files, "_find_browser", lambda: None)
    calls = _fake_kaleido(browser_env, lambda items: pytest.fail("kaleido must not run without a browser"))
    files, err = figure_files.export_pngs(_figs(), tmp_path / "fig")
    assert files == [] and calls == []
    assert err.startswith("no Chromium/Chrome found")
    assert not (tmp_path / "fig").exists()


def test_export_pngs_with_a_browser_but_no_kaleido_says_kaleido(browser_env, tmp_path):
    browser_env.setattr(figure_files, "_find_browser", lambda: "/usr/bin/chromium")
    browser_env.setitem(sys.modules, "kaleido", None)  # import kaleido -> ImportError
    files, err = figure_files.export_pngs(_figs(), tmp_path / "fig")
    assert files == [] and err == "kaleido is not installed; PNGs skipped"
    assert not (tmp_path / "fig").exists()


def test_export_pngs_with_a_browser_and_kaleido_writes_every_figure(browser_env, tmp_path):
    browser_env.setattr(figure_files, "_find_browser", lambda: "/opt/my-chrome")

    def write(items):
        for it in items:
            Path(it["path"]).write_bytes(PNG_MAGIC + b"fake")

    calls = _fake_kaleido(browser_env, write)
    files, err = figure_files.export_pngs(_figs(), tmp_path / "fig")
    assert err is None and files == [str(tmp_path / "fig" / "a.png"), str(tmp_path / "fig" / "b.png")]
    ((items, kopts),) = calls  # one browser session for all figures
    assert [(it["opts"]["width"], it["opts"]["height"]) for it in items] == [(1000, 400), (1000, 300)]
    assert kopts["timeout"] == 120 and os.environ["BROWSER_PATH"] == "/opt/my-chrome"


def test_export_pngs_reports_a_kaleido_failure_and_a_missing_file(browser_env, tmp_path):
    browser_env.setattr(figure_files, "_find_browser", lambda: "/usr/bin/chromium")

    def crash(items):
        Path(items[0]["path"]).write_bytes(PNG_MAGIC)
        raise RuntimeError("browser closed")

    _fake_kaleido(browser_env, crash)
    files, err = figure_files.export_pngs(_figs(), tmp_path / "fig")
    assert files == [str(tmp_path / "fig" / "a.png")] and err == "PNG export failed: browser closed"
    _fake_kaleido(browser_env, lambda items: Path(items[1]["path"]).write_bytes(PNG_MAGIC))
    (tmp_path / "fig" / "a.png").unlink()
    files, err = figure_files.export_pngs(_figs(), tmp_path / "fig")
    assert files == [str(tmp_path / "fig" / "b.png")] and err == "PNG export wrote no file for: a"


@pytest.mark.skipif(
    figure_files._find_browser() is None or importlib.util.find_spec("kaleido") is None,
    reason="needs a local Chromium and kaleido (both in the README's setup); the decision is unit-tested above",
)
def test_export_pngs_for_real(tmp_path):
    files, err = figure_files.export_pngs(_figs(), tmp_path / "fig")
    assert err is None and len(files) == 2
    for f in files:
        data = Path(f).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 5000


@pytest.mark.slow  # shares the module's end-to-end quick replication
def test_rerun_recomputes_nothing(replication):
    out = replication["out"]
    before = _mtimes(out)
    n_rows = len(_steps_log(out))
    rc = cli(_argv(replication["model"], out))
    assert rc == 0
    new_rows = _steps_log(out)[n_rows:]
    assert {r["step"] for r in new_rows} == {s.name for s in steps.build_plan(rep.read_settings(out))}
    # the report names the steps from plan.STEP_NAMES, without importing the steps: the two lists are one
    assert [s.name for s in steps.build_plan(rep.read_settings(out))] == plan.STEP_NAMES
    assert {r["event"] for r in new_rows} == {"skipped"}
    assert _mtimes(out) == before


@pytest.mark.slow  # shares the module's end-to-end quick replication
def test_failed_step_is_reported_then_retried(replication, monkeypatch, capsys):
    out = replication["out"]
    (out / "steps" / "cka.json").unlink()

    def boom(ctx):
        raise RuntimeError("CKA exploded on purpose")

    monkeypatch.setattr(steps, "step_cka", boom)
    rc = cli(_argv(replication["model"], out))
    assert rc == 1
    err = capsys.readouterr().err
    assert "step cka failed: RuntimeError: CKA exploded on purpose" in err and "rerun" in err
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "failed" and "CKA exploded" in status["error"]
    failed = json.loads((out / "steps" / "cka.failed.json").read_text())
    assert failed["error"] == "RuntimeError: CKA exploded on purpose" and "boom" in failed["traceback"]
    report = json.loads((out / "report.json").read_text())  # the report is rewritten and says what is missing
    assert report["status"].startswith("incomplete") and report["failures"][0]["step"] == "cka"
    assert "CKA exploded on purpose" in (out / "report.md").read_text()
    ran = [r["step"] for r in _steps_log(out) if r["event"] in ("start",)][-2:]
    assert ran == ["cka", "report"]  # only the failed step (and the report) ran; training was not redone

    monkeypatch.undo()
    assert cli(_argv(replication["model"], out)) == 0
    assert not (out / "steps" / "cka.failed.json").exists()
    assert json.loads((out / "report.json").read_text())["status"] == "complete"


@pytest.mark.slow  # shares the module's end-to-end quick replication
def test_changed_training_settings_are_refused(replication):
    argv = _argv(replication["model"], replication["out"])
    argv[argv.index("train.main_tokens=2560")] = "train.main_tokens=4096"
    assert cli(argv) == 2  # a DetourError: one clean line, nothing overwritten
    assert json.loads((replication["out"] / "report.json").read_text())["status"] == "complete"


def test_stop_signal_at_the_end_of_a_training_run_stops_the_plan(tmp_path, tiny_modernbert_dir, monkeypatch):
    """SIGTERM caught by a run's own handler after its last step check still stops the replication."""
    import signal

    from backend.runs import train

    def fake_train_run(run_dir, resume=False):
        flag = train._StopFlag()
        flag.install()
        os.kill(os.getpid(), signal.SIGTERM)  # lands in the run's handler: the run itself still ends "done"
        return {"state": "done", "tokens_seen": 1, "step": 1}

    monkeypatch.setattr(train, "train_run", fake_train_run)
    settings = plan.resolve_settings(
        "quick", model=str(tiny_modernbert_dir), corpus="demo", ner_data="demo", overrides=TINY_SETS
    )
    before = signal.getsignal(signal.SIGTERM)
    res = rep.replicate(settings, tmp_path / "out", log=lambda m: None)
    assert res["state"] == "cancelled" and res["ran"] == ["data", "prepare", "train-mlm"]
    assert "SIGTERM" in res["error"] and signal.getsignal(signal.SIGTERM) == before
    assert json.loads((tmp_path / "out" / "status.json").read_text())["state"] == "cancelled"


def test_layer_thirds_follow_the_paper_split():
    assert plan.layer_thirds(6) == ([0, 1], [2, 3])
    assert plan.layer_thirds(22) == (list(range(8)), list(range(8, 15)))  # the paper: 0-7 and 8-14
    assert plan.layer_thirds(4) == ([0, 1], [2])
    with pytest.raises(plan.ReplicationError):
        plan.layer_thirds(2)


def test_corpus_split_holds_out_whole_documents(tmp_path):
    src = tmp_path / "corpus"
    src.mkdir()
    for i in range(10):
        words = " ".join(f"w{i}x{j}" for j in range(30))
        (src / f"doc{i}.txt").write_text(f"Title {i}\n\n{words} first\n\n{words} second\n")
    (src / "LICENSE.txt").write_text("All rights reserved " * 20)
    a = split_corpus(src, tmp_path / "a", 0.2, 20, 0)
    b = split_corpus(src, tmp_path / "b", 0.2, 20, 0)
    assert (tmp_path / "a" / "heldout.txt").read_text() == (tmp_path / "b" / "heldout.txt").read_text()
    assert a["units"] == 10 and a["heldout_units"] == 2 and a == {**b}
    train = (tmp_path / "a" / "train.txt").read_text()
    held_docs = {ln.split()[0].split("x")[0] for ln in (tmp_path / "a" / "cka_texts.txt").read_text().splitlines()}
    assert len(held_docs) == 2 and not any(f" {d}x" in f" {train}" for d in held_docs)
    assert "All rights reserved" not in train + (tmp_path / "a" / "heldout.txt").read_text()


def test_presets_are_sized_for_the_machine(tmp_path, tiny_modernbert_dir):
    quick = plan.resolve_settings("quick", model=str(tiny_modernbert_dir), corpus="demo", ner_data="demo")
    mini = plan.resolve_settings("mini", model=str(tiny_modernbert_dir), corpus="demo", ner_data="demo")
    assert plan.estimate(quick)["total_s"] < 600
    assert 40 * 60 < plan.estimate(mini)["total_s"] < 80 * 60
    assert quick["eval"]["seeds"] >= 5 and mini["eval"]["seeds"] >= 5
    with pytest.raises(DetourError, match="seeds"):
        plan.resolve_settings("quick", model=str(tiny_modernbert_dir), corpus="demo", ner_data="demo", seeds=1)
    with pytest.raises(DetourError, match="eval.models"):
        plan.resolve_settings(
            "quick", model=str(tiny_modernbert_dir), corpus="demo", ner_data="demo", overrides=["eval.models=[mlm]"]
        )
    every = plan.resolve_settings(
        "quick",
        model=str(tiny_modernbert_dir),
        corpus="demo",
        ner_data="demo",
        overrides=["eval.models=[detour, base, mlm_s2, mlm]"],
    )
    assert every["eval"]["models"] == ["base", "mlm", "detour", "mlm_s2"]
    with pytest.raises(DetourError, match="unknown preset key"):
        plan.resolve_settings(
            "quick", model=str(tiny_modernbert_dir), corpus="demo", ner_data="demo", overrides=["train.nope=1"]
        )


# --- Reports tab --------------------------------------------------------------------------------


@pytest.mark.slow  # shares the module's end-to-end quick replication
def test_reports_tab_lists_and_shows_a_report(replication, monkeypatch):
    from app import reports_tab

    monkeypatch.setenv(paths.REPORTS_ENV, str(replication["out"].parent))
    assert reports_tab.list_reports() == ["quick-test"]
    view = reports_tab.load_view("quick-test")
    assert "## Findings" in view["summary"]
    assert view["figures"]["divergence"] is not None and view["figures"]["f1"] is not None
    assert [Path(f).name for f in view["files"]] == ["report.html", "report.json"]
    assert "done" in view["status"] and "11/11" in view["status"]
    with pytest.raises(DetourError):
        reports_tab.report_dir("../etc")
    assert "no such folder" in reports_tab.load_view("nope")["summary"]


def test_reports_tab_launches_the_quick_study_detached(tmp_path, monkeypatch):
    from app import reports_tab
    from backend.core.process import FileLock
    from backend.replication import budget_study

    monkeypatch.setenv(paths.REPORTS_ENV, str(tmp_path / "reports"))
    monkeypatch.setattr(budget_study, "resolve_budget_study", lambda *a, **k: {})  # nothing checked or trained here
    monkeypatch.setattr(reports_tab, "time_note", lambda: "")
    calls = []

    class FakePopen:
        pid = 4242

        def __init__(self, argv, **kw):
            calls.append((argv, kw))

        def poll(self):
            return None

        def wait(self, timeout=None):  # spawn_detached's reaper thread waits on every child it starts
            return None

    monkeypatch.setattr(process.subprocess, "Popen", FakePopen)
    msg, name = reports_tab.launch_quick()
    out = tmp_path / "reports" / "detour-quick"
    assert name == "detour-quick" and "4242" in msg
    argv, kw = calls[0]
    assert argv[1:] == ["-m", "backend", "replicate", "--preset", "quick", "--out", str(out)]
    assert kw["start_new_session"] is True and kw["stdin"] is process.subprocess.DEVNULL
    assert Path(kw["stdout"].name) == out / "replicate.log"  # a file, never a pipe
    # while a study holds its folder's lock, a second launch is refused and the status says it runs
    with FileLock(out / budget_study.LOCK, "study"):
        with pytest.raises(DetourError, match="already running"):
            reports_tab.launch_quick()
        assert f"running (pid {os.getpid()})" in reports_tab.status_text("detour-quick")[0]
    assert budget_study.running_pid(out) is None


def test_reports_tab_builds_inside_blocks(tmp_path, monkeypatch):
    import gradio as gr

    from app import reports_tab

    monkeypatch.setenv(paths.REPORTS_ENV, str(tmp_path / "none"))
    with gr.Blocks() as demo:
        with gr.Tab("Reports"):
            parts = reports_tab.build(None)
    assert parts["pick"] in demo.blocks.values() and len(parts["plots"]) == len(reports_tab.FIGURES)

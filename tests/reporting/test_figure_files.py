"""PNG export of a report's figures (kaleido and a local Chromium): what happens without a browser, without kaleido,
with both (every figure, one browser session), when kaleido fails or writes nothing, and for real where both exist."""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest

from backend.reporting import figure_files

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

    def crash(items):  # a whole PNG for the first figure, a cut one for the second, then the browser dies
        Path(items[0]["path"]).write_bytes(PNG_MAGIC + b"\x00\x00\x00\x00IEND\xaeB`\x82")
        Path(items[1]["path"]).write_bytes(PNG_MAGIC)
        raise RuntimeError("browser closed")

    _fake_kaleido(browser_env, crash)
    files, err = figure_files.export_pngs(_figs(), tmp_path / "fig")
    assert files == [str(tmp_path / "fig" / "a.png")] and err == "PNG export failed: browser closed"
    assert not (tmp_path / "fig" / "b.png").exists()  # a PNG cut short is never moved in
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

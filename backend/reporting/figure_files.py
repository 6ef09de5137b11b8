"""Figures written to files a user can paste into a paper: standalone HTML, and PNGs through kaleido and a local
Chromium (one browser for all the figures of a report). Shared by the suite, sweep and replication reports. Both
go through the atomic writer: plotly and kaleido wrote in place, and a full disk left a truncated figure (3 MB of
HTML cut short) that read as written. A report without PNGs is still a report, so a PNG failure is returned as a
message, never raised."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import plotly.graph_objects as go

from backend.core import atomic


def write_html(fig: go.Figure, path: Path) -> Path:
    """``fig`` as a standalone HTML page (plotly.js inlined: it opens offline), written whole or not at all."""
    atomic.write_text(path, fig.to_html(include_plotlyjs=True))
    return path


def _find_browser() -> str | None:
    if os.environ.get("BROWSER_PATH"):
        return os.environ["BROWSER_PATH"]
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def export_pngs(figs: dict[str, go.Figure], out_dir: Path, timeout: float = 120) -> tuple[list[str], str | None]:
    """Write ``<name>.png`` for each figure with kaleido (one Chromium for all). Returns (files, error)."""
    if not figs:
        return [], None
    browser = _find_browser()
    if browser is None:
        return [], "no Chromium/Chrome found for kaleido (install chromium or set BROWSER_PATH); PNGs skipped"
    os.environ.setdefault("BROWSER_PATH", browser)  # choreographer (kaleido's browser driver) reads it
    try:
        import kaleido
    except ImportError:
        return [], "kaleido is not installed; PNGs skipped"
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out_dir, prefix=".png-"))  # kaleido writes in place: here, then renamed
    try:
        items = []
        for name, fig in figs.items():
            h = int(fig.layout.height or 400)
            items.append({"fig": fig, "path": str(staging / f"{name}.png"), "opts": {"width": 1000, "height": h}})
        try:
            kaleido.write_fig_from_object_sync(items, kopts={"timeout": timeout, "mathjax": False})
            error = None
        except Exception as exc:  # noqa: BLE001 - a report without PNGs is still a report
            error = f"PNG export failed: {exc}"
        for name in figs:  # each whole PNG replaces the old one in one rename; a cut one is never moved in
            if (staging / f"{name}.png").is_file() and (error is None or _whole_png(staging / f"{name}.png")):
                os.replace(staging / f"{name}.png", out_dir / f"{name}.png")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    written = [str(out_dir / f"{n}.png") for n in figs if (out_dir / f"{n}.png").exists()]
    missing = [n for n in figs if not (out_dir / f"{n}.png").exists()]
    return written, error or (f"PNG export wrote no file for: {', '.join(missing)}" if missing else None)


def _whole_png(p: Path) -> bool:
    """A PNG that ends with its IEND chunk (a write cut short by a full disk does not)."""
    try:
        with open(p, "rb") as f:
            f.seek(-12, os.SEEK_END)
            return f.read().endswith(b"IEND\xaeB`\x82")
    except OSError:
        return False

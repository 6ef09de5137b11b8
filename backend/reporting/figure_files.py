"""Figures written to files a user can paste into a paper: PNGs through kaleido and a local Chromium (one browser
for all the figures of a report). Shared by the replication and sweep reports; a report without PNGs is still a
report, so every failure is returned as a message, never raised."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import plotly.graph_objects as go


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
    items = []
    for name, fig in figs.items():
        h = int(fig.layout.height or 400)
        items.append({"fig": fig, "path": str(out_dir / f"{name}.png"), "opts": {"width": 1000, "height": h}})
    try:
        kaleido.write_fig_from_object_sync(items, kopts={"timeout": timeout, "mathjax": False})
    except Exception as exc:  # noqa: BLE001 - a report without PNGs is still a report
        return [str(p) for p in (out_dir / f"{n}.png" for n in figs) if p.exists()], f"PNG export failed: {exc}"
    written = [str(out_dir / f"{n}.png") for n in figs if (out_dir / f"{n}.png").exists()]
    missing = [n for n in figs if not (out_dir / f"{n}.png").exists()]
    return written, (f"PNG export wrote no file for: {', '.join(missing)}" if missing else None)

"""The replication report, composed: ``report.json`` (every number), ``report.md`` (summary and tables, what the
app shows), ``report.html`` (self-contained), ``figures/*.json`` (plotly figures for the app) and
``figures/*.png``.

Everything is read from a replication folder, so a report can be rebuilt at any time
(``python -m backend replicate --report-only --out DIR``) and a partial run gives a partial report that says
what is missing. The parts, each with one job: ``results`` reads the folder, ``verdicts`` judges the numbers,
``figures`` plots them, ``render`` writes the text; this module puts them together and loads them back.
"""

from __future__ import annotations

import time
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio

from backend.core import atomic
from backend.core.errors import DetourError
from backend.core.paths import read_text_confined
from backend.replication.figures import build_figures
from backend.replication.render import render_html, summary_markdown
from backend.replication.results import cka_results, ner_results, runs_info, step_rows, weight_results
from backend.replication.verdicts import assess
from backend.reporting.figure_files import export_pngs

REPORT_VERSION = 1


def _status(steps: list[dict], failures: list[dict]) -> str:
    pending = [st["step"] for st in steps if st["state"] != "done" and st["step"] != "report"]
    if not pending:
        return "complete"
    if failures:
        return "incomplete (failed: " + ", ".join(f["step"] for f in failures) + ")"
    return "incomplete (not run yet: " + ", ".join(pending) + ")"


def _collect(out: Path, settings: dict) -> dict:
    """Every number the report holds, read from ``out``, with the verdicts."""
    steps = step_rows(out)
    failures = [{"step": st["step"], "error": st["error"]} for st in steps if st["state"] == "failed"]
    runs = runs_info(out, settings)
    ner = ner_results(out)
    cka = cka_results(out, settings)
    rep = {
        "kind": "replication_report",
        "version": REPORT_VERSION,
        "generated_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "out": str(out.resolve()),
        "status": _status(steps, failures),
        "settings": settings,
        "data": atomic.read_json(out / "data" / "info.json"),
        "runs": runs,
        "ner": ner,
        "cka": cka,
        "weights": weight_results(out),
        "steps": steps,
        "failures": failures,
        "timings": {st["step"]: st.get("elapsed_s") for st in steps if st.get("elapsed_s") is not None},
    }
    rep["findings"] = assess(ner, cka, settings, runs)
    return rep


def _write_figures(rep: dict, fig_dir: Path, png: bool, log) -> tuple[dict[str, go.Figure], list[str]]:
    """figures/*.json always, figures/*.png when asked and possible; notes both in ``rep``."""
    figs = build_figures(rep)
    fig_dir.mkdir(parents=True, exist_ok=True)
    for name, fig in figs.items():
        atomic.write_text(fig_dir / f"{name}.json", fig.to_json())
    pngs, png_error = export_pngs(figs, fig_dir) if png else ([], "PNG export not requested")
    if png_error:
        log(f"report: {png_error}")
    rep["png_error"] = png_error
    rep["figures"] = {
        n: {"json": f"figures/{n}.json", "png": f"figures/{n}.png" if str(fig_dir / f"{n}.png") in pngs else None}
        for n in figs
    }
    return figs, pngs


def _slim(rep: dict) -> dict:
    """report.json: the runs without their metric rows, the held-out loss curves instead."""
    runs = rep["runs"]
    slim = {**rep, "runs": {k: {kk: vv for kk, vv in v.items() if kk != "metrics"} for k, v in runs.items()}}
    slim["loss_curves"] = {
        k: [
            {kk: r.get(kk) for kk in ("step", "tokens_seen", "phase", "eval_mlm_loss", "eval_clm_loss")}
            for r in v.get("metrics", [])
            if r.get("type") == "eval"
        ]
        for k, v in runs.items()
    }
    return slim


def build_report(out: str | Path, *, png: bool = True, log=print) -> dict:
    """Read a replication folder and write report.json / report.md / report.html / figures. Returns the report."""
    out = Path(out)
    settings = atomic.read_json(out / "settings.json")
    if not settings:
        raise DetourError(f"{out}: no settings.json: not a replication folder")
    t0 = time.time()
    rep = _collect(out, settings)
    figs, pngs = _write_figures(rep, out / "figures", png, log)
    md = summary_markdown(rep)
    rep["summary_markdown"] = md
    rep["files"] = {"json": "report.json", "html": "report.html", "md": "report.md"}
    atomic.write_text(out / "report.md", md)
    atomic.write_text(out / "report.html", render_html(rep, figs, md))
    slim = _slim(rep)
    atomic.write_json(out / "report.json", slim)
    log(f"report: {out / 'report.html'} ({len(figs)} figures, {len(pngs)} PNGs) in {time.time() - t0:.0f}s")
    return slim


def load_report(out: str | Path) -> dict | None:
    return atomic.read_json(Path(out) / "report.json")


def load_figure(out: str | Path, name: str) -> go.Figure | None:
    p = Path(out) / "figures" / f"{name}.json"
    if not p.exists():
        return None
    try:
        return pio.from_json(read_text_confined(p, root=Path(out)))  # a link out of the report folder: refused
    except (ValueError, OSError):
        return None

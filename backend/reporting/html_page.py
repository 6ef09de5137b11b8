"""A self-contained HTML page from the reports' markdown (headings, paragraphs, pipe tables, **bold**) with plotly
figures below it: one writer for the sweep, suite and replication reports."""

from __future__ import annotations

import html
import re


def md_to_html(md: str, figs: list, title: str) -> str:
    """A page from the reports' markdown (headings, paragraphs, pipe tables) with plotly figures below it."""
    import plotly.io as pio

    body = []
    for block in md.split("\n\n"):
        rows = [ln for ln in block.splitlines() if ln.startswith("|")]
        if rows and len(rows) == len(block.splitlines()):
            cells = [[_bold(html.escape(c.strip())) for c in ln.strip("|").split("|")] for ln in rows]
            head = "".join(f"<th>{c}</th>" for c in cells[0])
            trs = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in cells[2:])
            body.append(f"<table><tr>{head}</tr>{trs}</table>")
        elif block.startswith("# "):
            body.append(f"<h1>{html.escape(block[2:])}</h1>")
        elif block.startswith("## "):
            body.append(f"<h2>{html.escape(block[3:])}</h2>")
        elif block.strip():
            body.append(f"<p>{_bold(html.escape(block))}</p>")
    for i, fig in enumerate(figs):  # plotly.js inlined once: the page opens offline, from disk, anywhere
        body.append(pio.to_html(fig, full_html=False, include_plotlyjs=i == 0))
    style = "body{font-family:sans-serif;max-width:1000px;margin:auto}td,th{border:1px solid #ccc;padding:3px 6px}"
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head>"
        f"<body>{''.join(body)}</body></html>"
    )


def _bold(text: str) -> str:
    """Markdown's **x** as <b>x</b> (the best of a column, a verdict)."""
    return re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)

"""The report as text: ``report.md`` (summary, tables: what the app shows) and ``report.html``, self-contained
(plotly.js inlined once, CSS inline, no network) so the file opens offline from anywhere. The HTML reuses the
Markdown's tables, so the two never disagree.
"""

from __future__ import annotations

import html
import json

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from backend.analysis.plots import similarity_caption
from backend.replication.figures import FIGURE_TITLES
from backend.replication.verdicts import DEVIATIONS, VERDICT_RULES, fmt_ci, fmt_num, fmt_pp, fmt_ratio

BADGE = {
    "replicated": "#1a7f37",
    "partly replicated": "#9a6700",
    "not replicated": "#cf222e",
    "not run": "#6e7781",
}


def _similarity_line(cka: dict) -> str:
    """Which measure, on how many samples and hidden sizes, and what shuffled paragraphs score (the CKA section)."""
    samples = cka.get("samples") or {"unit": "texts", "n": cka.get("n_texts")}
    return "Measured with " + similarity_caption(cka.get("measure", "linear"), samples, cka.get("hidden_sizes"),
                                                 cka.get("baseline")) + "."  # fmt: skip


def _badge_color(verdict: str) -> str:
    for k, v in BADGE.items():
        if verdict.startswith(k):
            return v
    return "#6e7781"  # inconclusive


def summary_markdown(rep: dict) -> str:
    s = rep["settings"]
    lines = [
        f"# Mini replication ({s.get('preset')}): a CLM detour improves encoder continued pretraining",
        "",
        f"Base `{s['model']}` ({s['layers']['n']} layers; lower third {s['layers']['low_range']}, middle third "
        f"{s['layers']['mid_range']}), corpus `{s['corpus']}`, NER `{s['ner_data']}`. "
        f"{s['train']['main_tokens']:,} main-phase tokens per run + {s['train']['decay_fraction']:.0%} decay; "
        f"{s['eval']['seeds']} fine-tuning seeds. Status: **{rep['status']}**.",
        "",
        "## Findings",
        "",
    ]
    for i, f in enumerate(rep["findings"], 1):
        lines += [
            f"**{i}. {f['title']}: {f['verdict'].upper()}.** {f.get('text', '')}",
            "",
            f"- measured: {f.get('measured', 'n/a')}",
            f"- paper: {f['paper']}",
            "",
        ]
    lines += ["Verdict rules and the differences from the paper's setup are listed at the end.", ""]
    ner = rep.get("ner")
    if ner:
        lines += ["## NER test F1 (%)", "", "| model | mean ± std | n | per seed |", "|---|---|---|---|"]
        for m in ner["models"]:
            vals = ", ".join(f"{100 * v:.2f}" for v in m["values"])
            lines.append(
                f"| {m['label']} | {fmt_pp(m['mean'], False)} ± {fmt_pp(m['std'], False)} | {m['n']} | {vals} |"
            )
        lines += [
            "",
            "| comparison | Δ F1 (pp) | 95% CI (t) | 95% CI (bootstrap, descriptive) | wins | n |",
            "|---|---|---|---|---|---|",
        ]
        for c in ner["comparisons"]:
            ties = f" ({c['ties']} ties)" if c["ties"] else ""
            lines.append(
                f"| {c['label']} | {fmt_pp(c['mean_diff'])} | {fmt_ci(c['ci95_t'])} | {fmt_ci(c['ci95_bootstrap'])} | "
                f"{c['wins_b']}-{c['wins_a']}{ties} | {c['n']} |"
            )
        lines.append("")
    cka = rep.get("cka")
    if cka:
        w = rep.get("weights") or {}
        wl = dict(zip(w.get("layers", []), (w.get("from_base") or {}).get("detour", [])))
        lines += [
            "## Divergence per layer (1 − CKA of matching layers, vs MLM)",
            "",
            _similarity_line(cka),
            "",
            "| layer | detour | control | ratio | low-frozen | mid-frozen | ΔW detour |",
            "|---|---|---|---|---|---|---|",
        ]
        fl = (cka.get("freeze_low_vs_mlm") or {}).get("divergence") or []
        fm = (cka.get("freeze_mid_vs_mlm") or {}).get("divergence") or []
        for i, name in enumerate(cka["layers"]):
            third = " (low)" if i in cka["low_indices"] else " (mid)" if i in cka["mid_indices"] else ""
            lines.append(
                f"| {name}{third} | {fmt_num((cka['divergence'] or [None] * (i + 1))[i], 5)} | "
                f"{fmt_num(cka['control_divergence'][i], 5)} | {fmt_ratio((cka['ratio'] or [None] * (i + 1))[i])} | "
                f"{fmt_num(fl[i] if i < len(fl) else None, 5)} | {fmt_num(fm[i] if i < len(fm) else None, 5)} | "
                f"{fmt_num(wl.get(name), 4)} |"
            )
        lines.append("")
    lines += _runs_markdown(rep)
    if rep.get("failures"):
        lines += ["## Failures", ""] + [f"- `{f['step']}`: {f['error']}" for f in rep["failures"]] + [""]
    lines += ["## How to read this", ""] + [f"- {r}" for r in VERDICT_RULES] + [""]
    lines += ["## Differences from the paper's setup", ""] + [f"- {d}" for d in DEVIATIONS] + [""]
    return "\n".join(lines)


def _runs_markdown(rep: dict) -> list[str]:
    lines = [
        "## Runs",
        "",
        "| run | recipe | seed | frozen in main | tokens | time | held-out MLM loss start → end |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rep["runs"].values():
        t = r.get("train_time_s")
        lines.append(
            f"| {r['label']} (`{r['name']}`) | {r['recipe']} | {r.get('seed', '')} | {r.get('freeze_main') or '-'} | "
            f"{r.get('tokens_seen') or 0:,} | {'' if t is None else f'{t:.0f}s'} | "
            f"{fmt_num(r.get('start_eval_mlm_loss'), 3)} → {fmt_num(r.get('final_eval_mlm_loss'), 3)} |"
        )
    lines.append("")
    steps = rep.get("steps", [])
    if steps:
        lines += ["| step | state | time |", "|---|---|---|"]
        for st in steps:
            el = st.get("elapsed_s")
            lines.append(f"| {st['step']} | {st['state']} | {'' if el is None else f'{el:.0f}s'} |")
        lines.append("")
    return lines


CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;max-width:1100px;margin:24px auto;padding:0 16px;
color:#1f2328;line-height:1.45}
h1{font-size:1.6em}h2{border-bottom:1px solid #d0d7de;padding-bottom:4px;margin-top:32px}
table{border-collapse:collapse;margin:8px 0;font-size:0.92em}td,th{border:1px solid #d0d7de;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#f6f8fa}
.badge{display:inline-block;color:#fff;border-radius:10px;padding:1px 10px;font-size:0.85em;font-weight:600}
.finding{border:1px solid #d0d7de;border-radius:6px;padding:10px 14px;margin:12px 0}.muted{color:#57606a}
pre{background:#f6f8fa;padding:8px;overflow:auto;font-size:0.85em}code{font-size:0.92em}
"""


def _md_table_to_html(lines: list[str]) -> str:
    """The few Markdown tables this module writes -> HTML (header row, separator, rows)."""
    rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines if not set(ln) <= set("|-: ")]
    if not rows:
        return ""
    out = ["<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in rows[0]) + "</tr>"]
    for r in rows[1:]:
        out.append("<tr>" + "".join(f"<td>{html.escape(c).replace('`', '')}</td>" for c in r) + "</tr>")
    return "\n".join(out) + "</table>"


def _md_section_tables(md: str, heading: str) -> str:
    """HTML of the tables under ``## heading`` in our own Markdown."""
    blocks, cur, inside = [], [], False
    for ln in md.splitlines():
        if ln.startswith("## "):
            inside = ln[3:].strip().startswith(heading)
            continue
        if not inside:
            continue
        if ln.startswith("|"):
            cur.append(ln)
        elif cur:
            blocks.append(_md_table_to_html(cur))
            cur = []
    if cur:
        blocks.append(_md_table_to_html(cur))
    return "\n".join(blocks)


def render_html(rep: dict, figs: dict[str, go.Figure], md: str) -> str:
    s = rep["settings"]
    e = html.escape
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>Detour Lab mini replication ({e(str(s.get('preset')))})</title>",
        f"<style>{CSS}</style>",
        # plotly.js, inlined once: the file opens offline, from disk, anywhere.
        f"<script type='text/javascript'>{get_plotlyjs()}</script>",
        "</head><body>",
        "<h1>Mini replication: a causal-LM detour improves encoder continued pretraining</h1>",
        f"<p class='muted'>Preset <b>{e(str(s.get('preset')))}</b> · generated {e(rep['generated_at'])} · status "
        f"<b>{e(rep['status'])}</b> · base <code>{e(s['model'])}</code> ({s['layers']['n']} layers: lower third "
        f"{e(s['layers']['low_range'])}, middle third {e(s['layers']['mid_range'])}) · corpus <code>{e(s['corpus'])}"
        f"</code> · NER <code>{e(s['ner_data'])}</code> · {s['train']['main_tokens']:,} main-phase tokens per run · "
        f"{s['eval']['seeds']} fine-tuning seeds.</p>",
        "<p>Paper: Touchent &amp; de la Clergerie 2026, <i>A Causal Language Modeling Detour Improves Encoder "
        "Continued Pretraining</i>. This is a small-scale replication run on a CPU; read every verdict with the "
        "scale in mind (see <a href='#deviations'>differences</a>).</p>",
        "<h2>Findings</h2>",
    ]
    for i, f in enumerate(rep["findings"], 1):
        parts.append(
            f"<div class='finding'><b>{i}. {e(f['title'])}</b> <span class='badge' style='background:"
            f"{_badge_color(f['verdict'])}'>{e(f['verdict'])}</span><p>{e(f.get('text', ''))}</p>"
            "<div class='muted'><b>Measured:</b><ul>"
            + "".join(f"<li>{e(part)}</li>" for part in str(f.get("measured", "n/a")).split("; "))
            + f"</ul><b>Paper:</b> {e(f['paper'])}</div></div>"
        )
    if rep.get("failures"):
        parts.append("<h2>Failures</h2><ul>")
        parts += [f"<li><code>{e(f['step'])}</code>: {e(f['error'])}</li>" for f in rep["failures"]]
        parts.append("</ul>")
    config = {"displaylogo": False, "responsive": True}
    order = ["f1", "divergence", "cka_heatmaps", "weight_change", "loss_curves", "train_loss"]
    for name in [n for n in order if n in figs]:
        parts.append(f"<h2>{e(FIGURE_TITLES.get(name, name))}</h2>")
        if name == "f1":
            parts.append(_md_section_tables(md, "NER test F1"))
        if name == "divergence":
            parts.append(_md_section_tables(md, "Divergence per layer"))
        parts.append(
            pio.to_html(figs[name], full_html=False, include_plotlyjs=False, config=config, div_id=f"fig-{name}")
        )
    parts.append("<h2>Runs and steps</h2>")
    parts.append(_md_section_tables(md, "Runs"))
    if rep.get("png_error"):
        parts.append(f"<p class='muted'>{e(rep['png_error'])}</p>")
    parts.append("<h2>How to read this</h2><ul>" + "".join(f"<li>{e(r)}</li>" for r in VERDICT_RULES) + "</ul>")
    parts.append("<h2 id='deviations'>Differences from the paper's setup</h2><ul>")
    parts += [f"<li>{e(d)}</li>" for d in DEVIATIONS]
    parts.append("</ul><h2>Settings</h2>")
    parts.append(f"<pre>{e(json.dumps(s, indent=2))}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)

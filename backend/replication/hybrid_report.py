"""The second paper's study report: each split against pure MLM over the suite at each budget, where the sign
changes, the continuation (CLM-started minus MLM-started), the paper beside and REPLICATED / NOT REPLICATED /
INCONCLUSIVE per finding, from the study's two sweeps' reports (``hybrid.py`` runs the study)."""

from __future__ import annotations

import json
from pathlib import Path

from backend.core import atomic
from backend.replication.inputs import ReplicationError

PAPER = {
    "splits": (
        "From scratch, at every budget (12k, 22k and 42k steps; 210M-1B parameters), the CLM-then-MLM hybrids "
        "(25/75, 50/50, 75/25) beat pure MLM downstream; pure CLM is behind on the tasks that need bidirectional "
        "context."
    ),
    "cpt": (
        "Continuing an equally sized CLM-pretrained and MLM-pretrained model (610M, same data) with MLM at 40% "
        "masking for 22k steps: the CLM-started model ends better."
    ),
}


def _hybrids_outcome(hybrids: list[dict]) -> tuple[dict, str]:
    """Finding 1 of the second paper from its comparisons: replicated when every hybrid beats pure MLM, not
    replicated when some are worse and none better, else inconclusive (one rule for both forms of the study)."""
    counts = {v: sum(c["verdict"] == v for c in hybrids) for v in ("better", "worse", "inconclusive")}
    if hybrids and counts["better"] == len(hybrids):
        return counts, "replicated"
    if counts["worse"] and not counts["better"]:
        return counts, "not replicated"
    return counts, "inconclusive"


def split_name(share: float) -> str:
    return "100% CLM" if share >= 1 else f"{100 * share:.0f}% CLM / {100 * (1 - share):.0f}% MLM"


def _word(c: dict) -> str:
    """'better' / 'worse' / 'inconclusive' from a suite comparison's verdict (``aggregate.compare``)."""
    v = str(c.get("verdict") or "")
    return "better" if v == f"{c.get('a')} better" else "worse" if v == f"{c.get('b')} better" else "inconclusive"


def suite_findings(budget: dict, cpt_rep: dict | None) -> dict:
    """The two findings from the suite aggregates: each hybrid split vs pure MLM at each budget, and the
    CLM-started minus MLM-started continuation."""
    comps = []
    for arm, pts in budget["panels"].items():
        for p in pts:
            v = p["verdict"] if p["verdict"] in ("better", "worse") else "inconclusive"
            comps.append({"split": arm, "tokens": p["tokens"], "mean": p["mean_delta"]["value"],
                          "ci95": p["mean_delta"]["ci95"], "verdict": v})  # fmt: skip
    hybrids = [c for c in comps if c["split"] not in ("100% CLM",)]
    counts, outcome = _hybrids_outcome(hybrids)
    f1 = {"title": "Hybrids beat pure MLM at every budget", "paper": PAPER["splits"], "comparisons": comps,
          "counts": counts, "verdict": outcome}  # fmt: skip
    f2 = {"title": "CLM-started beats MLM-started after MLM 40% continuation", "paper": PAPER["cpt"], "delta": None,
          "verdict": "not measured"}  # fmt: skip
    comps2 = ((cpt_rep or {}).get("suite") or {}).get("comparisons") or []
    if comps2:
        c = comps2[0]
        agg = (c.get("aggregate") or {}).get("mean_delta") or {}
        f2["delta"] = {"mean": agg.get("value"), "ci95": agg.get("ci95"), "verdict": _word(c), "points": True}
        f2["verdict"] = {"better": "replicated", "worse": "not replicated"}.get(_word(c), "inconclusive")
    return {"splits": f1, "cpt": f2}


def write_hybrid_report(out: Path, times: dict | None = None, rebuild_sweeps: bool = False) -> dict:
    """report.md / .html / .json of the study from its two sweeps' reports (``--report-only`` rebuilds it, the
    sweeps' own reports first with ``rebuild_sweeps``: from their small files, as this version writes them)."""
    from backend.replication import budget_report
    from backend.reporting.html_page import md_to_html
    from backend.sweeps.report import figure, write_report

    s = json.loads((out / "settings.json").read_text())
    if not s.get("suite"):  # fine-tuned on one NER set by the retired one-task form: its files stay as they are
        raise ReplicationError(f"{out}: a study fine-tuned on one NER set by an older version; its report files stay "
                               "readable as they are and are not rebuilt (rerun it into a new --out to measure "
                               "it on a suite, or on a suite of one task)")  # fmt: skip
    if rebuild_sweeps:
        for part in ("splits", "cpt"):
            if (out / part / "report.json").exists():
                write_report(out / part)
    splits_rep = json.loads((out / "splits" / "report.json").read_text())
    cpt_path = out / "cpt" / "report.json"
    cpt_rep = json.loads(cpt_path.read_text()) if cpt_path.exists() else None
    if times is None and (out / "report.json").exists():
        times = json.loads((out / "report.json").read_text()).get("times")
    title = f"Hybrid splits vs pure MLM over token budgets ({s['preset']}, {Path(s['suite']).stem})"
    budget = budget_report.build(out, out / "splits", split_name, "100% MLM", lambda arm: f"the {arm} split", title)
    budget["title"] = title
    rep = {
        "study": "hybrid-splits",
        "preset": s["preset"],
        "description": s["description"],
        "metric": f"suite {Path(s['suite']).stem} (test scores in points)",
        "splits_summary": splits_rep["summary"],
        "budget": budget,
        "findings": suite_findings(budget, cpt_rep),
        "times": times or {},
        "timing": atomic.read_json(out / "timing.json") or {},
        "settings": s,
    }
    md = render_hybrid_budgets(rep)
    atomic.write_json(out / "report.json", rep)
    atomic.write_text(out / "report.md", md)
    figs = [figure(splits_rep, k) for k in splits_rep["tables"]]
    atomic.write_text(out / "report.html", md_to_html(md, figs, f"hybrid-splits {s['preset']}"))
    return rep


def render_hybrid_budgets(rep: dict) -> str:
    """The study's report when every run was fine-tuned on a suite: per split and budget the suite aggregate against
    pure MLM, where its sign changes, the losses and the continuation."""
    from backend.replication.budget_report import render as budget_sections
    from backend.replication.budget_report import timing_lines
    from backend.replication.crossover import tokens_text

    s, b, tm = rep["settings"], rep["budget"], rep.get("timing") or {}
    f1, f2 = rep["findings"]["splits"], rep["findings"]["cpt"]
    e = s["eval"]
    lines = [f"# {b.get('title') or 'Hybrid splits over token budgets'}", "",
             f"Preset `{s['preset']}` with these settings (budgets, splits and fine-tuning as run):", "",
             f"- from-scratch encoders: {s['arch']['num_hidden_layers']} layers, d={s['arch']['hidden_size']}; "
             f"splits (CLM share, CLM first): {', '.join(split_name(x) for x in s['shares'])}",
             f"- budgets (tokens per run): {', '.join(tokens_text(x) for x in s['budgets'])}; pretraining seeds "
             f"{b['seeds']}; corpus `{s['corpus']}`",
             f"- suite `{s['suite']}`; fine-tuning: " + ", ".join(f"{k} {v}" for k, v in e.items()), "",
             rep["splits_summary"], "",
             f"## 1. {f1['title']}: **{f1['verdict'].upper()}**", "", f"Paper: {f1['paper']}", "",
             f"This run: of {sum(f1['counts'].values())} hybrid-vs-MLM comparisons (split x budget, suite mean delta), "
             f"{f1['counts']['better']} better, {f1['counts']['worse']} worse, {f1['counts']['inconclusive']} "
             "inconclusive.", "", "## Where the sign changes", ""]  # fmt: skip
    lines += budget_sections(b)
    lines += [f"## 2. {f2['title']}: **{f2['verdict'].upper()}**", "", f"Paper: {f2['paper']}", ""]
    d = f2.get("delta")
    if d and d.get("mean") is not None:
        ci = d.get("ci95")
        ci_t = "-" if not ci else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"
        lines.append(f"This run (budget {tokens_text(s['budgets'][0])}): CLM-started minus MLM-started "
                     f"{d['mean']:+.2f} points over the suite, 95% CI {ci_t}: {d['verdict']}.")  # fmt: skip
    else:
        lines.append("This run: not measured (the continuation was not run or did not finish).")
    lines += ["", "Chart: `figures/crossover.html` (and `.png`): against tokens (log scale) each split's suite mean "
              "and IQM delta against pure MLM (points, 95% intervals), P(improvement), and the held-out MLM and CLM "
              "losses of every split. Full sweep reports: `splits/report.md`" + (", `cpt/report.md`" if
              s.get("cpt", True) else "") + ".", ""]  # fmt: skip
    lines += timing_lines(tm)
    return "\n".join(lines)

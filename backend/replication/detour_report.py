"""The detour study's report: report.md|html|json and the chart from its folder (settings, timing, the sweep's own
report and manifest), with the answer first (from how many tokens the detour pays), the paper's three findings per
budget, each arm against MLM over the budgets, and the paper beside."""

from __future__ import annotations

from pathlib import Path

from backend.core import atomic
from backend.replication.detour_presets import ARMS, PAPER, PAPER_DELTAS
from backend.replication.inputs import ReplicationError


def write_report(out: Path, rebuild_sweep: bool = False) -> dict:
    """report.md|html|json and the chart from ``out`` (settings.json, timing.json, sweep/report.json, sweep.json);
    ``rebuild_sweep`` first writes the sweep's own report again from its small files (``--report-only``: a report
    made by an older version then reads as this one would)."""
    from backend.replication import budget_report

    out = Path(out)
    s = atomic.read_json(out / "settings.json")
    if not s or s.get("study") != "detour-budgets":
        raise ReplicationError(f"{out}: no detour budget study here (no settings.json of one)")
    if not (out / "sweep" / "report.json").exists():
        raise ReplicationError(f"{out}: the sweep has no report yet; rerun the study's command to finish it")
    if rebuild_sweep:
        from backend.sweeps.report import write_report as write_sweep_report

        write_sweep_report(out / "sweep")
    over = "over token budgets" if len(s["budgets"]) > 1 else f"at {s['budgets'][0]:,} tokens"
    title = f"CLM detour vs MLM {over} ({s['preset']}, {Path(s['suite']).stem})"
    rep = budget_report.build(out, out / "sweep", lambda v: ARMS.get(v, str(v)), "MLM", lambda arm: f"the {arm}",
                              title)  # fmt: skip
    rep.update({"title": title, "settings": s, "timing": atomic.read_json(out / "timing.json") or {},
                "paper": PAPER_DELTAS})  # fmt: skip
    if s.get("arms"):  # a study planned on the arm axis (a budget study of the MLM / detour pair alone has none)
        from backend.replication.study_findings import findings

        rep["findings"] = findings(rep, out / "sweep", s, ARMS)
    budget_report.write(out, rep, render(rep))
    return rep


def render(rep: dict) -> str:
    from backend.replication.budget_report import render as budget_sections
    from backend.replication.budget_report import timing_lines
    from backend.replication.crossover import tokens_text

    s, tm = rep["settings"], rep["timing"]
    ft = ", ".join(f"{k} {v}" for k, v in s["finetune"].items()) or "the suite's own settings"
    lines = [f"# {rep['title']}", "", f"Preset `{s['preset']}` ({s['description']}) run with these settings:", "",
             f"- base `{s['model']}`, corpus `{s['corpus']}`",
             f"- budgets (main-phase tokens per run, +{s['train']['decay_fraction']:.0%} decay): "
             + ", ".join(tokens_text(b) for b in s["budgets"]),
             f"- pretraining seeds {rep['seeds']}; {s['train']['batch_size']}x{s['train']['seq_len']} tokens/step, "
             f"lr {s['train']['lr']}, {s['train']['precision']}",
             f"- suite `{s['suite']}`; fine-tuning: {ft}", ""]  # fmt: skip
    if rep["not_done"]:
        lines += [f"Not finished (left out): {', '.join(f'{r} ({st})' for r, st in rep['not_done'].items())}.", ""]
    detour = (rep.get("statements") or {}).get(ARMS["clm_detour"])
    if detour and len(s["budgets"]) > 1:
        from backend.replication.study_findings import pays_from

        lines += ["## From how many tokens does the detour pay on this base?", "", pays_from(detour["mean_delta"]), ""]
    if rep.get("findings"):
        from backend.replication.study_findings import render as findings_table

        lines += ["## The paper's three findings, per budget", ""]
        lines += findings_table(rep["findings"])
    lines += ["## Where the sign changes" if len(s["budgets"]) > 1 else "## Each arm against MLM", ""]
    lines += budget_sections(rep)
    lines += [
        "## The paper, beside",
        "",
        "| language | tasks | detour - MLM per task (pp) | tasks won | scale |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {p['language']} | {p['tasks']} | {p['delta_pp']} | {p['wins']} | {p['scale']} |"
              for p in rep["paper"]]  # fmt: skip
    lines += ["", f"Low layers: {PAPER['cka']}.", "", f"Freezes: {PAPER['freeze']}.", "",
              "The paper's per-task scores are not in the excerpt this project carries (`../shared/papers`): its "
              "ranges per language stand here, beside this study's per-task deltas above."]  # fmt: skip
    lines += ["", "Chart: `figures/crossover.html` (and `.png`): against tokens (log scale) the suite's mean and IQM "
              "delta (detour - MLM, points) with 95% intervals, P(improvement) and the held-out MLM and CLM losses "
              "of both arms. Intervals and verdicts are `backend.evaluation.aggregate.compare`'s; the per-cell "
              "tables are in `sweep/report.md`.", ""]  # fmt: skip
    lines += timing_lines(tm)
    return "\n".join(lines)

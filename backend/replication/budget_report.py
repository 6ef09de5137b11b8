"""The report of a budget study from its sweep's folder: per budget the suite aggregate of each arm against the
reference arm (``evaluation.aggregate.compare``, through the sweep report's suite section), the held-out losses of
every arm, where the sign changes (``crossover``), and the chart. Built from small files only (the sweep's
``report.json`` and ``sweep.json``), so a folder brought back without its weights still gives the whole report.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

from backend.core import atomic
from backend.replication.crossover import crossover, figure, tokens_text, write_figure

AGG_KEYS = ("mean_delta", "iqm_delta", "poi")


def _agg(c: dict, key: str) -> dict:
    v = (c.get("aggregate") or {}).get(key) or {}
    return {"value": v.get("value"), "ci95": v.get("ci95")}


def verdict_word(c: dict) -> str:
    """'better' / 'worse' (the arm against the reference) from ``compare``'s verdict, else its own words."""
    v = str(c.get("verdict") or "")
    return {f"{c.get('a')} better": "better", f"{c.get('b')} better": "worse"}.get(v, v or "-")


def collect(sweep_rep: dict, manifest: dict, arm_name) -> dict:
    """``{panels, losses, per_task}`` by arm and budget from a two-axis sweep (arm x budget) with a suite.
    ``arm_name``: first-axis value -> the arm's name in the report."""
    arm_key, budget_key = manifest["axes"][0]["key"], manifest["axes"][1]["key"]
    by_label = {c["label"]: c["values"] for c in manifest["cells"]}
    panels: dict[str, list[dict]] = {}
    for c in (sweep_rep.get("suite") or {}).get("comparisons", []):
        vals = by_label.get(c["a"])
        if vals is None:
            continue
        panels.setdefault(arm_name(vals[arm_key]), []).append(
            {
                "tokens": vals[budget_key],
                **{k: _agg(c, k) for k in AGG_KEYS},
                "verdict": verdict_word(c),
                "task_wins": c.get("task_wins"),
                "per_task": {
                    t: {k: d.get(k) for k in ("delta", "ci95", "verdict", "n")}
                    for t, d in (c.get("per_task") or {}).items()
                },  # fmt: skip
                "seed_levels": c.get("seed_levels"),
            }
        )
    losses: dict[str, dict] = {}
    for key in ("heldout_mlm_loss", "heldout_clm_loss"):
        for r in (sweep_rep.get("tables") or {}).get(key, []):
            if r.get("mean") is not None:
                losses.setdefault(key, {}).setdefault(arm_name(r["values"][arm_key]), []).append(
                    {"tokens": r["values"][budget_key], "mean": r["mean"], "ci95": r["ci95"]}
                )
    cka: dict[str, list] = {}
    for r in (sweep_rep.get("tables") or {}).get("cka_divergence", []):
        if r.get("mean") is not None and not r.get("reference"):
            cka.setdefault(arm_name(r["values"][arm_key]), []).append(
                {"tokens": r["values"][budget_key], "mean": r["mean"], "ci95": r["ci95"]}
            )
    for pts in [*panels.values(), *cka.values()]:
        pts.sort(key=lambda p: p["tokens"])
    measure = (manifest.get("evaluation") or {}).get("cka_measure")
    return {"panels": panels, "losses": losses, "cka": cka, "cka_measure": measure if cka else None}


def statements(panels: dict, what=lambda arm: arm) -> dict:
    """Per arm the sign-change statement of the mean delta (the verdict's) and of the IQM delta (kept in report.json
    as a description; the report reads no verdict from its bootstrap interval)."""
    out = {}
    for arm, pts in panels.items():
        out[arm] = {
            k: crossover([{"tokens": p["tokens"], **p[k]} for p in pts], what(arm)) for k in ("mean_delta", "iqm_delta")
        }
    return out


def machine() -> str:
    """CPU model and cores (and the GPU where there is one): the machine a measurement names."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    text = f"{cpu}, {os.cpu_count()} logical cores"
    try:
        import torch

        if torch.cuda.is_available():
            text += f", GPU {torch.cuda.get_device_name(0)}"
    except Exception:  # the machine line never stops a report
        pass
    return text


def _ci(ci, d: int = 2) -> str:
    return "-" if not ci else f"[{ci[0]:+.{d}f}, {ci[1]:+.{d}f}]"


def _v(x, d: int = 2, sign: bool = True) -> str:
    return "-" if x is None else (f"{x:+.{d}f}" if sign else f"{x:.{d}f}")


def render(rep: dict) -> list[str]:
    """The budget sections of a study's markdown: statements, the per-budget table, per-task deltas, losses."""
    lines = []
    for arm, st in rep["statements"].items():
        pts = rep["panels"][arm]
        lines += [f"### {arm} vs {rep['reference']}", ""]
        if len(pts) > 1:  # where the sign changes needs two budgets at least
            lines += [f"**Mean delta over the suite.** {st['mean_delta']['text']}", ""]
        lines += ["| tokens | mean delta | 95% CI | IQM delta | 95% CI | P(improvement) | 95% CI | tasks won "
                  "| verdict |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for p in pts:
            w = p.get("task_wins") or {}
            lines.append(
                f"| {tokens_text(p['tokens'])} | {_v(p['mean_delta']['value'])} | {_ci(p['mean_delta']['ci95'])} | "
                f"{_v(p['iqm_delta']['value'])} | {_ci(p['iqm_delta']['ci95'])} | {_v(p['poi']['value'], 2, False)} | "
                f"{_ci(p['poi']['ci95']).replace('+', '')} | {w.get('a', '-')} of {sum(w.values()) if w else '-'} | "
                f"{p.get('verdict') or '-'} |"
            )
        lv = next((p["seed_levels"] for p in pts if p.get("seed_levels")), None)
        if lv:
            lines += ["", f"Seed levels: {lv['pretraining_seeds']} pretraining x {lv['finetuning_seeds']:g} "
                      f"fine-tuning seed(s) per task; {lv['advice']}."]  # fmt: skip
        lines += ["", "The verdict and the sign change read the mean delta's interval (the few-seed rule). IQM and "
                  "P(improvement) are descriptive: their bootstrap intervals over so few seeds claim more than the "
                  "data holds, so no verdict is read from them."]  # fmt: skip
        tasks = list(dict.fromkeys(t for p in pts for t in p["per_task"]))
        if tasks:
            lines += ["", "Per task (delta in points, 95% interval):", "",
                      "| tokens | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]  # fmt: skip
            for p in pts:
                cells = []
                for t in tasks:
                    d = p["per_task"].get(t) or {}
                    cells.append(f"{_v(d.get('delta'))} {_ci(d.get('ci95'), 1)}")
                lines.append(f"| {tokens_text(p['tokens'])} | " + " | ".join(cells) + " |")
        lines.append("")
    for arm, pts in (rep.get("cka") or {}).items():
        lines += [f"CKA divergence of {arm} from {rep['reference']} (same seed and budget; mean over layers of "
                  f"1 - {rep.get('cka_measure')} CKA, mean and 95% t interval over pretraining seeds):", "",
                  "| tokens | divergence | 95% CI |", "|---|---|---|"]  # fmt: skip
        lines += [f"| {tokens_text(p['tokens'])} | {p['mean']:.4f} | {_ci(p['ci95'], 4).replace('+', '')} |"
                  for p in pts]  # fmt: skip
        lines.append("")
    for key, label in (("heldout_mlm_loss", "Held-out MLM loss"), ("heldout_clm_loss", "Held-out CLM loss")):
        by = rep["losses"].get(key) or {}
        if not by:
            continue
        arms = list(by)
        budgets = sorted({p["tokens"] for pts in by.values() for p in pts})
        lines += [f"{label} (lower is better; mean and 95% t interval over pretraining seeds):", "",
                  "| tokens | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]  # fmt: skip
        for b in budgets:
            row = []
            for a in arms:
                p = next((q for q in by[a] if q["tokens"] == b), None)
                row.append("-" if p is None else f"{p['mean']:.3f} {_ci(p['ci95'], 3).replace('+', '')}")
            lines.append(f"| {tokens_text(b)} | " + " | ".join(row) + " |")
        lines.append("")
    return lines


def build(out: Path, sweep_dir: Path, arm_name, reference: str, what=lambda arm: arm, title: str = "") -> dict:
    """The budget part of a study report from ``sweep_dir`` (its report.json and sweep.json), with the chart
    written to ``out/figures/crossover.html|png``."""
    sweep_rep = json.loads((sweep_dir / "report.json").read_text())
    manifest = json.loads((sweep_dir / "sweep.json").read_text())
    got = collect(sweep_rep, manifest, arm_name)
    rep = {"reference": reference, **got, "statements": statements(got["panels"], what)}
    fig = figure({f"{arm} - {reference}": pts for arm, pts in got["panels"].items()}, got["losses"], title)
    rep["figure"] = write_figure(fig, out / "figures", "crossover")
    rep["not_done"] = sweep_rep.get("not_done") or {}
    rep["seeds"] = manifest["seeds"]
    return rep


def write(out: Path, rep: dict, md: str) -> None:
    from backend.reporting.html_page import md_to_html

    atomic.write_json(out / "report.json", rep)
    atomic.write_text(out / "report.md", md)
    atomic.write_text(out / "report.html", md_to_html(md, [], rep.get("title", "budget study")))


def load_now() -> dict:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        one = five = fifteen = None
    return {"load_1m": one, "load_5m": five, "load_15m": fifteen, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
            time.gmtime())}  # fmt: skip


def timing_lines(tm: dict) -> list[str]:
    """A study report's last lines: its wall time (and training's, where recorded) with the machine and its load,
    the note on how it ran, and the command that made it."""
    from backend.engine.progress import hms

    lines: list[str] = []
    if tm.get("wall_s"):
        l0, l1 = tm.get("load_start") or {}, tm.get("load_end") or {}
        train = f" ({hms(tm['train_wall_s'])} training)," if tm.get("train_wall_s") else ""
        start, end = f"{_load(l0)} at the start ({l0.get('at')})", f"{_load(l1)} at the end ({l1.get('at')})"
        lines += [f"Time: {hms(tm['wall_s'])} wall{train} on {tm.get('machine')}; load average (1/5/15 min) "
                  f"{start}, {end}.", ""]  # fmt: skip
    if tm.get("note"):
        lines += [tm["note"], ""]
    if tm.get("command"):
        lines += ["Command:", "", "```", " ".join(tm["command"]), "```", ""]
    return lines


def _load(ld: dict) -> str:
    vals = [ld.get(k) for k in ("load_1m", "load_5m", "load_15m")]
    return "/".join("-" if v is None else f"{v:.2f}" for v in vals)

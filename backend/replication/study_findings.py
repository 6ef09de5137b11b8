"""The detour study's three findings at each budget, from its sweep's small files (``sweep.json``, ``results/``) and
the suite comparisons the budget report collected (``budget_report.collect``'s panels).

1. **Downstream**: the detour's suite verdict against MLM (``evaluation.aggregate.compare``, the few-seed rule).
2. **Low layers beyond seed noise**: per pretraining seed s, r_l = div(detour_s, MLM_s) / div(control_s, MLM_s)
   for each block l of the lower third (div = 1 - CKA, per measure), their geometric mean; over seeds the geometric
   mean with a 95% t interval on the log ratios (two seeds or more). Above seed noise when the interval lies above
   1 (*replicated* when the ratio also reaches the paper's smallest, 5x; *partly* below it); *not replicated* when
   the interval lies below 2x; else *inconclusive*. One seed: the point alone, with the old rule (>= 5x, >= 2x), and
   the report says the seed-to-seed spread is not measured.
3. **Freezes**: needs finding 1 at that budget (a gain to remove). Gain removed: the low-frozen detour is not better
   than MLM and below the detour on average; gain kept: the mid-frozen detour is better than MLM. Both:
   *replicated*; one: *partly*; neither: *not replicated*.

The control arm's own suite verdict against MLM is shown too: two MLM runs that differ only in their seed; a
"better" or "worse" there is seed noise read as an effect.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from backend.evaluation.stats import t_interval
from backend.replication.crossover import tokens_text

PAPER_RATIO, PARTLY_RATIO = 5.0, 2.0


def _read_results(sweep_dir: Path) -> dict[str, dict]:
    from backend.sweeps.measure import read_results

    return read_results(sweep_dir)  # each file checked: a torn one is one line naming it


def _runs_by(manifest: dict) -> dict[tuple[str, int], dict[str, str]]:
    """(arm, budget) -> seed -> run name, for a sweep planned on the ``arm`` axis."""
    out: dict[tuple[str, int], dict[str, str]] = {}
    keys = [a["key"] for a in manifest["axes"]]
    if keys[0] != "arm" or len(keys) < 2:
        return out
    for c in manifest["cells"]:
        out[(c["values"]["arm"], c["values"][keys[1]])] = dict(c["runs"])
    return out


def low_blocks(layers: dict) -> list[int]:
    """Indices into a divergence list (0 = embeddings, then one per block) of the lower third's blocks."""
    a, _, b = str(layers["low_range"]).partition("-")
    return [i + 1 for i in range(int(a), int(b or a) + 1)]


def seed_ratio(arm: list[float] | None, control: list[float] | None, idx: list[int]) -> float | None:
    """The geometric mean over ``idx`` of div(arm) / div(control); None when a divergence is missing or zero."""
    if not arm or not control or max(idx) >= min(len(arm), len(control)):
        return None
    logs = []
    for i in idx:
        if arm[i] is None or control[i] is None or arm[i] <= 0 or control[i] <= 0:
            return None
        logs.append(math.log(arm[i] / control[i]))
    return math.exp(statistics.fmean(logs))


def ratio_summary(per_seed: dict[str, float]) -> dict:
    """Geometric mean of the seeds' ratios with a 95% t interval on their logs (None below two seeds)."""
    vals = [v for v in per_seed.values() if v is not None]
    if not vals:
        return {"ratio": None, "ci95": None, "n": 0, "per_seed": per_seed}
    logs = [math.log(v) for v in vals]
    ci = t_interval(logs) if len(logs) >= 2 else None
    return {"ratio": math.exp(statistics.fmean(logs)), "ci95": [math.exp(ci[0]), math.exp(ci[1])] if ci else None,
            "n": len(vals), "per_seed": per_seed}  # fmt: skip


def ratio_verdict(r: dict) -> str:
    if r["ratio"] is None:
        return "not measured"
    if r["ci95"] is None:  # one seed: the point alone
        return "replicated" if r["ratio"] >= PAPER_RATIO else "partly replicated" if r["ratio"] >= PARTLY_RATIO \
            else "not replicated"  # fmt: skip
    lo, hi = r["ci95"]
    if lo > 1:
        return "replicated" if r["ratio"] >= PAPER_RATIO else "partly replicated"
    if hi < PARTLY_RATIO:
        return "not replicated"
    return "inconclusive"


def low_layer_ratios(sweep_dir: Path, settings: dict) -> dict:
    """``{measure: {arm: {budget: ratio_summary}}}`` for every arm that is not MLM or the control, against the
    control's divergence on the same seed and budget."""
    manifest = json.loads((sweep_dir / "sweep.json").read_text())
    runs, results = _runs_by(manifest), _read_results(sweep_dir)
    if not settings.get("layers") or not runs:
        return {}
    idx = low_blocks(settings["layers"])
    measures = (settings.get("cka") or {}).get("measures") or []
    out: dict[str, dict] = {}
    for measure in measures:
        for (arm, budget), seeds in runs.items():
            if arm in ("mlm", "mlm-control") or ("mlm-control", budget) not in runs:
                continue
            control = runs[("mlm-control", budget)]
            per_seed = {}
            for s, run in seeds.items():
                a = ((results.get(run) or {}).get("cka_by_measure") or {}).get(measure) or {}
                c = ((results.get(control.get(s)) or {}).get("cka_by_measure") or {}).get(measure) or {}
                per_seed[s] = seed_ratio(a.get("layers"), c.get("layers"), idx)
            summary = ratio_summary(per_seed)
            summary["verdict"] = ratio_verdict(summary)
            out.setdefault(measure, {}).setdefault(arm, {})[budget] = summary
    return out


def pays_from(st: dict) -> str:
    """The study's question answered from the detour's sign-change statement (``crossover``): from how many tokens
    does the detour pay on this base? Only budgets whose interval lies above 0 count; the rest is said as it is."""
    dirs, budgets = st.get("directions") or [], st.get("budgets") or []
    if not budgets:
        return "Not measured: no budget finished."
    span = f"{tokens_text(budgets[0])}-{tokens_text(budgets[-1])} tokens"
    if st.get("change") and st.get("to") == "better":
        lo, hi = st["between"]
        return (f"From somewhere between {tokens_text(lo)} and {tokens_text(hi)} tokens: worse at {tokens_text(lo)}, "
                f"better at {tokens_text(hi)} (where in between is not measured).")  # fmt: skip
    if st.get("change") and st.get("to") == "worse":
        lo, hi = st["between"]
        return (f"It pays at {tokens_text(lo)} and stops: better at {tokens_text(lo)}, worse at {tokens_text(hi)} "
                "(where in between is not measured).")  # fmt: skip
    said = "; ".join(f"{w} at {', '.join(tokens_text(b) for b, d in zip(budgets, dirs, strict=True) if d == w)}"
                     for w in ("better", "worse", "inconclusive") if w in dirs)  # fmt: skip
    if "better" in dirs:
        first = budgets[dirs.index("better")]
        below = " (below it the interval holds 0: a smaller budget may pay too)" if dirs[0] != "better" else ""
        return f"From {tokens_text(first)} tokens or fewer{below}: the detour is {said}."
    held = " (inconclusive: the 95% interval holds 0)" if "inconclusive" in dirs else ""
    return f"Not within the budgets tried ({span}): the detour is {said}{held}."


def _panel(panels: dict, arm: str, budget: int) -> dict | None:
    return next((p for p in panels.get(arm) or [] if p["tokens"] == budget), None)


def freeze_verdict(detour: dict | None, low: dict | None, mid: dict | None) -> tuple[str, str]:
    """Finding 3 at one budget from the three suite comparisons against MLM: (verdict, why)."""
    if not (detour and low and mid):
        return "not measured", "a freeze arm or the detour has no suite comparison at this budget"
    if detour.get("verdict") != "better":
        return "inconclusive", f"no detour gain to remove; detour vs MLM: {short(detour.get('verdict'))}"
    d, lo = detour["mean_delta"]["value"], low["mean_delta"]["value"]
    removed = low.get("verdict") != "better" and lo is not None and d is not None and lo < d
    kept = mid.get("verdict") == "better"
    why = (f"low frozen {'removes' if removed else 'does not remove'} the gain, mid frozen "
           f"{'keeps' if kept else 'does not keep'} it")  # fmt: skip
    return ("replicated" if removed and kept else "partly replicated" if removed or kept else "not replicated"), why


def findings(rep: dict, sweep_dir: Path, settings: dict, names: dict[str, str]) -> dict:
    """Per budget the three findings and the control's verdict; ``names``: arm -> its name in the report."""
    panels = rep.get("panels") or {}
    ratios = low_layer_ratios(sweep_dir, settings)
    budgets = sorted({p["tokens"] for pts in panels.values() for p in pts} | set(settings.get("budgets") or []))
    rows = []
    for b in budgets:
        det = _panel(panels, names["clm_detour"], b)
        low, mid = _panel(panels, names.get("freeze-low", ""), b), _panel(panels, names.get("freeze-mid", ""), b)
        ctrl = _panel(panels, names.get("mlm-control", ""), b)
        f3 = freeze_verdict(det, low, mid) if settings.get("layers") else ("not run", "--no-interventions")
        rows.append({
            "tokens": b,
            "downstream": {"verdict": (det or {}).get("verdict") or "not measured",
                           "mean_delta": (det or {}).get("mean_delta")},
            "low_layers": {m: (by.get("clm_detour") or {}).get(b) for m, by in ratios.items()},
            "freeze_low_ratio": {m: (by.get("freeze-low") or {}).get(b) for m, by in ratios.items()},
            "freeze_mid_ratio": {m: (by.get("freeze-mid") or {}).get(b) for m, by in ratios.items()},
            "freeze": {"verdict": f3[0], "why": f3[1], "low": _brief(low), "mid": _brief(mid)},
            "control": _brief(ctrl),
        })  # fmt: skip
    return {"budgets": rows, "measures": list(ratios), "low_range": (settings.get("layers") or {}).get("low_range")}


def _brief(p: dict | None) -> dict | None:
    return None if p is None else {"verdict": p.get("verdict"), "mean_delta": p.get("mean_delta")}


def short(verdict: str | None) -> str:
    """A verdict as a table cell: 'no task measures anything: <why per task>' -> its head (the why is below)."""
    return (verdict or "not measured").split(":", 1)[0]


def _ratio_text(r: dict | None) -> str:
    if not r or r.get("ratio") is None:
        return "-"
    ci = r.get("ci95")
    return f"{r['ratio']:.1f}x" + (f" [{ci[0]:.1f}, {ci[1]:.1f}]" if ci else " (1 seed)")


def _delta_text(d: dict | None) -> str:
    md = (d or {}).get("mean_delta") or {}
    if md.get("value") is None:
        return "-"
    ci = md.get("ci95")
    return f"{md['value']:+.2f}" + (f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "")


def _rules(f: dict) -> list[str]:
    """The rules the findings table follows, for the parts the study ran: a study without its seed-noise control
    and freezes (``--no-interventions``) read "the lower third's blocks (None)" and rules for rows it did not have."""
    ran_control = any(r["control"] for r in f["budgets"])
    ran_freezes = any(r["freeze"]["low"] or r["freeze"]["mid"] for r in f["budgets"])
    if f["measures"] and f["low_range"]:
        rules = [f"Low-layer ratio: per pretraining seed, the geometric mean over the lower third's blocks "
                 f"({f['low_range']}) of div(detour, MLM) / div(control, MLM), div = 1 - CKA on held-out paragraphs; "
                 "then the geometric mean over seeds with a 95% t interval on the logs. Verdict: above seed noise when "
                 f"the interval lies above 1 (replicated at the paper's {PAPER_RATIO:.0f}x or more, partly below), "
                 f"not replicated when it lies below {PARTLY_RATIO:.0f}x, else inconclusive; with one seed the point "
                 "alone decides and the seed-to-seed spread is not measured."]  # fmt: skip
    else:
        rules = ["Low-layer ratio: not measured (it needs the seed-noise control run and CKA on each run; this study "
                 "ran without them, e.g. with --no-interventions)."]  # fmt: skip
    if ran_freezes:
        rules.append("Freezes: need the detour's gain at that budget; removed = low frozen not better than MLM and "
                     "below the detour, kept = mid frozen better than MLM.")  # fmt: skip
    if ran_control:
        rules.append("The control row is two MLM runs that differ only in their seed: a verdict other than "
                     "inconclusive there is seed noise read as an effect.")  # fmt: skip
    return rules


def render(f: dict) -> list[str]:
    """The findings table of the report and the rules it follows."""
    ms = f["measures"]
    head = ["tokens", "1. detour - MLM, suite mean (points)", "verdict"]
    head += [f"2. low-layer ratio, {m} CKA" for m in ms] + ([f"verdict ({ms[0]})"] if ms else [])
    head += ["3. low frozen - MLM", "mid frozen - MLM", "verdict", "control (MLM, another seed) - MLM"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in f["budgets"]:
        row = [tokens_text(r["tokens"]), _delta_text(r["downstream"]), short(r["downstream"]["verdict"])]
        row += [_ratio_text(r["low_layers"].get(m)) for m in ms]
        if ms:
            row.append((r["low_layers"].get(ms[0]) or {}).get("verdict") or "not measured")
        fr = r["freeze"]
        row += [f"{_delta_text(fr['low'])}, {short((fr['low'] or {}).get('verdict'))}",
                f"{_delta_text(fr['mid'])}, {short((fr['mid'] or {}).get('verdict'))}",
                f"{fr['verdict']} ({fr['why']})",
                f"{_delta_text(r['control'])}, {short((r['control'] or {}).get('verdict'))}"]  # fmt: skip
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", " ".join(_rules(f)), ""]
    lowr = [(r["tokens"], m, r["freeze_low_ratio"].get(m), r["freeze_mid_ratio"].get(m)) for r in f["budgets"]
            for m in ms]  # fmt: skip
    if any(lo or mi for _, _, lo, mi in lowr):
        lines += ["Lower-third divergence of the freeze arms against seed noise (the same ratio; the low-frozen "
                  "arm's lower blocks only train in the MLM decay):", "",
                  "| tokens | measure | low frozen | mid frozen |", "|---|---|---|---|"]  # fmt: skip
        lines += [f"| {tokens_text(b)} | {m} | {_ratio_text(lo)} | {_ratio_text(mi)} |" for b, m, lo, mi in lowr]
        lines.append("")
    return lines

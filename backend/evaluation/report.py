"""Evaluation results: per-model summaries and pairwise comparisons, written as ``results.json`` and a Markdown
table ``results.md`` (both atomic, rewritten after every (model, seed) so the app can poll them)."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

from backend.core import atomic
from backend.evaluation import sanity
from backend.evaluation.identity import recorded_identity, short
from backend.evaluation.stats import mean_std, paired_comparison

SUMMARY_METRICS = {
    "ner": ["f1", "precision", "recall", "macro_f1", "token_accuracy"],
    "classification": ["macro_f1", "micro_f1", "accuracy"],
}
METRIC_NAMES = {
    "f1": "F1",
    "precision": "Precision",
    "recall": "Recall",
    "macro_f1": "Macro-F1",
    "micro_f1": "Micro-F1",
    "accuracy": "Accuracy",
    "token_accuracy": "Token acc.",
}


def summarize_model(entry: dict, task: str, primary: str) -> None:
    """Fill ``entry["summary"]``, ``n_ok``, ``n_failed`` from ``entry["runs"]`` (test metrics; dev primary too)."""
    ok = [r for r in entry["runs"] if r.get("status") == "ok"]
    summary = {}
    names = list(dict.fromkeys([primary, *SUMMARY_METRICS[task]]))
    for m in names:
        pairs = [(r["seed"], r["test"][m]) for r in ok if (r.get("test") or {}).get(m) is not None]  # None: undefined
        s = mean_std([v for _, v in pairs])
        s["seeds"] = [k for k, _ in pairs]
        s["values"] = [v for _, v in pairs]
        summary[m] = s
    dev = [(r["seed"], r["dev"][primary]) for r in ok if (r.get("dev") or {}).get(primary) is not None]
    summary[f"dev_{primary}"] = {
        **mean_std([v for _, v in dev]),
        "seeds": [k for k, _ in dev],
        "values": [v for _, v in dev],
    }
    entry["summary"] = summary
    entry["flags"] = [f for r in ok for f in sanity.run_flags(entry["label"], r)]  # undefined F1, constant answers
    entry["n_ok"] = len(ok)
    entry["n_failed"] = sum(r.get("status") == "failed" for r in entry["runs"])


def comparisons(results: dict) -> list[dict]:
    """Every pair of models (in the order given): ``delta = b - a`` on the primary test metric, paired by seed."""
    primary = results["primary_metric"]
    out = []
    for ea, eb in combinations(results["models"], 2):
        va, vb = ({r["seed"]: r["test"][primary] for r in e["runs"] if r.get("status") == "ok"
                   and (r.get("test") or {}).get(primary) is not None} for e in (ea, eb))  # fmt: skip
        out.append({"a": ea["label"], "b": eb["label"], "metric": primary, **paired_comparison(va, vb)})
    return out


def refresh(results: dict) -> dict:
    for entry in results["models"]:
        summarize_model(entry, results["task"], results["primary_metric"])
    results["comparisons"] = comparisons(results)
    results["failures"] = [
        {"model": e["label"], "seed": r["seed"], "error": r.get("error", "")}
        for e in results["models"]
        for r in e["runs"]
        if r.get("status") == "failed"
    ]
    return results


def _pct(v) -> str:
    return "–" if v is None else f"{100 * v:.2f}"


def _ms(s: dict) -> str:
    if not s or s.get("mean") is None:
        return "–"
    return _pct(s["mean"]) if s.get("std") is None else f"{_pct(s['mean'])} ± {_pct(s['std'])}"


def _ci(ci) -> str:
    return "–" if not ci else f"[{100 * ci[0]:+.2f}, {100 * ci[1]:+.2f}]"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def results_markdown(results: dict) -> str:
    task, primary = results["task"], results["primary_metric"]
    hp = results.get("hparams", {})
    metric_desc = {
        "ner": "entity-level, strict IOB2 (seqeval); Macro-F1 averages entity types",
        "classification": "Macro-F1 over labels" + (" (multi-label)" if results.get("multi_label") else ""),
    }[task]
    lines = [
        f"# Evaluation: {task} on `{results.get('data', '')}`",
        "",
        f"Test scores in %, mean ± sample std over seeds; best epoch chosen by dev {METRIC_NAMES.get(primary, primary)}"
        f" ({metric_desc}). Status: **{results.get('status', '')}**.",
        "",
        "Fine-tuning: " + ", ".join(f"{k} {v}" for k, v in hp.items() if v is not None) + ".",
        "",
    ]
    if prec := results.get("precision"):
        lines += [f"Precision: {prec['resolved']} (asked: {prec['requested']}; {prec['why']}).", ""]
    for note in results.get("data_notes", []):
        lines.append(f"Note: {note}")
    if results.get("data_notes"):
        lines.append("")
    cols = list(dict.fromkeys([primary, *SUMMARY_METRICS[task]]))
    head = (
        ["Model", "Seeds ok"]
        + [METRIC_NAMES.get(c, c) for c in cols]
        + [f"Dev {METRIC_NAMES.get(primary)}", f"Per seed ({METRIC_NAMES.get(primary)})"]
    )
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    n_seeds = len(results.get("seeds", []))
    for e in results["models"]:
        s = e.get("summary", {})
        per_seed = ", ".join(
            f"{seed}: {_pct(v)}"
            for seed, v in zip(s.get(primary, {}).get("seeds", []), s.get(primary, {}).get("values", []), strict=True)
        )
        failed = e.get("n_failed", 0)
        ok_txt = f"{e.get('n_ok', 0)}/{n_seeds}" + (f" ({failed} failed)" if failed else "")
        row = (
            [_cell(e["label"]), ok_txt]
            + [_ms(s.get(c, {})) for c in cols]
            + [_ms(s.get(f"dev_{primary}", {})), per_seed or "–"]
        )
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Models measured (resolved path, sha256 of the weights):", ""]
    lines += [f"- {_cell(e['label'])}: {_cell(short(recorded_identity(e)))}" for e in results["models"]]
    flags = [f for e in results["models"] for f in e.get("flags", [])]
    if flags:
        lines += ["", "## Warnings", "", *(f"- ⚠ {_cell(f)}" for f in flags)]
    comps = results.get("comparisons", [])
    if comps:
        lines += [
            "",
            f"## Paired comparisons (test {METRIC_NAMES.get(primary, primary)}, Δ = b − a in points, paired by seed)",
            "",
            "| a | b | n | Δ mean | 95% CI (paired t) | 95% CI (bootstrap) | wins b / a / ties |",
            "|---|---|---|---|---|---|---|",
        ]
        for c in comps:
            d = "–" if c["mean_diff"] is None else f"{100 * c['mean_diff']:+.2f}"
            lines.append(
                f"| {_cell(c['a'])} | {_cell(c['b'])} | {c['n']} | {d} | {_ci(c['ci95_t'])} | "
                f"{_ci(c['ci95_bootstrap'])} | {c['wins_b']} / {c['wins_a']} / {c['ties']} |"
            )
    skipped = [(e["label"], r) for e in results["models"] for r in e["runs"] if r.get("skipped_steps")]
    if skipped:
        lines += ["", "## Skipped steps (non-finite loss or gradients; see each run's metrics.json)", ""]
        for label, r in skipped:
            lines.append(f"- {_cell(label)}, seed {r['seed']}: {r['skipped_steps']} steps skipped")
    if results.get("failures"):
        lines += ["", "## Failed runs", ""]
        for f in results["failures"]:
            lines.append(f"- {_cell(f['model'])}, seed {f['seed']}: {_cell(f['error'])}")
    return "\n".join(lines) + "\n"


def write_results(results: dict, out_dir: str | Path) -> None:
    out_dir = Path(out_dir)
    atomic.write_json(out_dir / "results.json", results)
    atomic.write_text(out_dir / "results.md", results_markdown(results))

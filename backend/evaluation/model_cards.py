"""When an evaluation or a suite finishes, the cards of the models it measured get its results (``backend.cards``):
each kept fine-tuned model's card the mean over its seeds with the interval, and each run's ``final/README.md``
(a model this lab trained: a run's, a sweep's run's) its ``model-index`` results with their intervals. A hub,
bundled or local model's own card is never touched. A card that cannot be written is one warning line each; the
evaluation's results stand."""

from __future__ import annotations

import json
from pathlib import Path

from backend.cards.results import eval_id, suite_result, task_result
from backend.core.catalogue import run_owning
from backend.evaluation.aggregate import t_summary

CARD_ERRORS = (Exception,)  # a card not written is a warning line with its reason: the results stand


def run_of(model_path: str | None) -> Path | None:
    """The run whose ``final/`` model ``model_path`` is, or None (any other model has a card of its own, or none)."""
    if not model_path:
        return None
    p = Path(model_path)
    return p.parent if p.name == "final" and run_owning(p.parent) == p.parent.absolute() else None


def _summary(entry: dict, metric: str) -> dict:
    ok = [r for r in entry["runs"] if r.get("status") == "ok" and (r.get("test") or {}).get(metric) is not None]
    s = t_summary([100 * r["test"][metric] for r in ok])
    return {"mean": s["mean"], "ci95": s["ci95"], "n": s["n"], "seeds": [r["seed"] for r in ok]}


def record_evaluation(results: dict, out_dir: str | Path, runs: bool = True) -> list[str]:
    """Rewrite the cards of ``results``' kept fine-tuned models with the mean over their seeds and, when ``runs``,
    add this evaluation's result to the card of each run it measured. Returns one warning line per card not
    written."""
    from backend.cards.finetuned_card import write_finetuned_card

    source, metric, warnings = eval_id(out_dir), results["primary_metric"], []
    for entry in results["models"]:
        summary = _summary(entry, metric)
        for r in entry["runs"]:
            seed_dir = Path(r.get("model_dir") or "")
            if r.get("status") != "ok" or not r.get("saved_model") or not (seed_dir / "config.json").is_file():
                continue
            try:
                metrics = json.loads((seed_dir / "metrics.json").read_text(encoding="utf-8"))
                label_map = json.loads((seed_dir / "label_map.json").read_text(encoding="utf-8"))
                write_finetuned_card(seed_dir, metrics, label_map, source, summary)
            except CARD_ERRORS as exc:
                warnings.append(f"the card of {seed_dir} was not written ({type(exc).__name__}: {exc})")
        run = run_of(entry.get("path"))
        if runs and run is not None and summary["n"]:
            new = task_result(source, results["task"], results.get("data"), results.get("data_fingerprint"), metric,
                              summary["mean"], summary["ci95"], summary["n"])  # fmt: skip
            warnings += _write_run(run, source, [new])
    return warnings


def record_suite(rep: dict) -> list[str]:
    """Add a suite's results to the card of each run it measured: per task the mean test score with its interval,
    and the suite score with its interval, rank interval and tie group (the leaderboard's; for two models, the same
    rule over their one pair)."""
    from backend.evaluation.ranking import leaderboard
    from backend.evaluation.suite_report import on_scale

    labels = [m["label"] for m in rep["models"]]
    scores = {t["name"]: {lab: rep["cells"][f"{lab}|{t['name']}"]["per_seed"] for lab in labels
                          if f"{lab}|{t['name']}" in rep["cells"]} for t in rep["tasks"]}  # fmt: skip
    board = rep.get("leaderboard") or on_scale(leaderboard(scores, labels))
    entries = {e["label"]: e for e in board["models"]}
    source, warnings = f"suite:{rep['suite']}/{Path(rep['out']).name}", []
    for m in rep["models"]:
        run = run_of((m.get("identity") or {}).get("path"))
        if run is None:
            continue
        new = []
        for t in rep["tasks"]:
            c = rep["cells"].get(f"{m['label']}|{t['name']}")
            if c and c.get("mean") is not None:
                new.append(task_result(source, t["task"], t.get("data"), t.get("data_fingerprint"), t["metric"],
                                       c["mean"], c.get("ci95"), c["n"], name=t["name"]))  # fmt: skip
        if m["label"] in entries:
            new.append(suite_result(source, rep["suite"], rep["tasks"], entries[m["label"]], len(board["models"])))
        warnings += _write_run(run, source, new)
    return warnings


def _write_run(run: Path, source: str, new: list) -> list[str]:
    from backend.cards.run_card import write_run_card

    try:
        write_run_card(run, source, new)
        return []
    except CARD_ERRORS as exc:
        return [f"the card of run {run.name} was not written ({type(exc).__name__}: {exc})"]

"""The power of a suite comparison before it runs (``evaluate --suite --plan``): fixed checkpoints, so the one rule
is each task's paired t over fine-tuning seeds combined by Stouffer's z, and its detectable difference comes from the
fine-tuning noise an earlier suite measured here on the same tasks and settings (``evals/*/tasks/<task>``), paired
model against model."""

from __future__ import annotations

import json
from pathlib import Path

from backend.core.paths import evals_dir
from backend.evaluation import power

SETTINGS = ("epochs", "lr", "batch_size", "max_len", "weight_decay", "warmup_ratio", "max_train_examples",
            "max_eval_examples")  # fmt: skip


def planned_tasks(suite: dict, overrides: dict) -> list[dict]:
    """Per task of a loaded suite ``{name, task, data, settings, seeds}`` with ``overrides`` (evaluate's flags)."""
    from backend.evaluation.suite import with_overrides

    out = []
    for t in with_overrides(suite, overrides)["tasks"]:  # checked as the run checks them (--seeds -2 was planned)
        out.append({"name": t["name"], "task": t["task"], "data": t["data"], "seeds": len(t["seeds"]),
                    "settings": {k: t["hparams"].get(k) for k in SETTINGS}})  # fmt: skip
    return out


def suite_sources(tasks: list[dict], root: Path | None = None) -> list[dict]:
    """Earlier suites under ``root`` (the evaluations root) whose every task ran with the planned settings and at
    least two models over two seeds: ``{dir, diffs: [task -> A - B per seed], level}``, newest first."""
    root = root or evals_dir()
    want = {t["name"]: t["settings"] for t in tasks}
    found = []
    for suite_json in sorted(root.glob("*/suite.json")) if root.is_dir() else []:
        d = suite_json.parent
        per_task, level = {}, {}
        for name, settings in want.items():
            try:
                res = json.loads((d / "tasks" / name / "results.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                break
            hp = res.get("hparams") or {}
            if any(hp.get(k) != v for k, v in settings.items()):
                break
            metric = res.get("primary_metric")
            scores = [{r["seed"]: 100 * r["test"][metric] for r in m.get("runs", [])
                       if r.get("status") == "ok" and (r.get("test") or {}).get(metric) is not None}
                      for m in res.get("models", [])]  # fmt: skip
            per_task[name] = scores
            vals = [v for sc in scores for v in sc.values()]
            level[name] = sum(vals) / len(vals) if vals else None
        else:
            diffs = []
            n_models = min(len(v) for v in per_task.values()) if per_task else 0
            for j in range(1, n_models):
                d_j = {}
                for name, scores in per_task.items():
                    common = sorted(set(scores[0]) & set(scores[j]))
                    d_j[name] = [scores[0][s] - scores[j][s] for s in common]
                if all(len(v) >= 2 for v in d_j.values()):
                    diffs.append(d_j)
            if diffs:
                found.append({"dir": str(d), "diffs": diffs, "level": level, "when": suite_json.stat().st_mtime})
    return sorted(found, key=lambda f: f["when"], reverse=True)


def plan_power(tasks: list[dict], target: float = 1.0) -> dict:
    """``{mde, sources, components, n_eval, seeds, take}``: the detectable difference between two models of this
    suite at its seeds, or ``mde`` None when no suite with these settings ran here."""
    from backend.evaluation.eval_sample import task_samples

    seeds = min(t["seeds"] for t in tasks)
    out = {"mde": None, "sources": [], "seeds": seeds, "tasks": len(tasks), "target": target}
    found = suite_sources(tasks)
    if not found:
        return out
    samples = task_samples([{**t, "max_eval_examples": t["settings"].get("max_eval_examples")} for t in tasks])
    n_eval = {k: v[0] for k, v in samples.items()}
    c = power.finetune_components([d for f in found for d in f["diffs"]], n_eval, {k: v[1] for k, v in samples.items()},
                                  found[0]["level"])  # fmt: skip
    whole = {k: v[0] for k, v in task_samples([{**t, "max_eval_examples": None} for t in tasks]).items()}
    out.update(components=c, n_eval=n_eval, sources=[f["dir"] for f in found])
    out["mde"] = power.detectable(c, 1, len(tasks), seeds, n_eval)
    at = lambda sentences: lambda n: power.detectable(c, 1, len(tasks), n, sentences)  # noqa: E731
    out["take"] = {"seeds": power.smallest(at(n_eval), target, 2, 200),
                   "seeds_whole": power.smallest(at(whole), target, 2, 200), "whole": whole}  # fmt: skip
    return out


def text(p: dict, command: str) -> str:
    at = f"{p['seeds']} fine-tuning seeds x {p['tasks']} tasks"
    if p["mde"] is None:
        return (f"Detectable difference: not known yet: no suite with these tasks and settings was run here with two "
                f"models over two seeds. A pilot measures it: `{command} --seeds 2` on two of the models.")  # fmt: skip
    c, tk = p["components"], p["take"]
    sent = ", ".join(f"{k} {v:,}" for k, v in p["n_eval"].items())
    ways = [f"{tk['seeds']} fine-tuning seeds" if tk["seeds"] else "over 200 fine-tuning seeds at these sentences"]
    if tk["seeds_whole"]:
        ways.append(f"{tk['seeds_whole']} on whole test splits")
    return (f"Smallest detectable difference between two of these models (80% power, 95% level, the suite's rule: "
            f"per-task paired t over fine-tuning seeds, combined over tasks): ±{p['mde']:.1f} points at {at}, {sent} "
            f"test sentences; fine-tuning noise measured in {', '.join(f'`{s}`' for s in p['sources'][:3])} "
            f"({c.finetune:.1f} points^2 per fine-tune + the evaluation sample's share). These checkpoints only: "
            f"pretraining variance is not part of it. To detect {p['target']:g} point: "
            f"{'; or '.join(ways)}.")  # fmt: skip

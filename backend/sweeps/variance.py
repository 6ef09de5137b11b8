"""What a finished sweep measured about seed noise, for the power of the next study (``evaluation.power``): every
cell's fine-tuned scores against the reference cell of its line, as differences per (pretraining seed, task,
fine-tuning seed) in points, with the fine-tuning settings that make it comparable to a planned study.

Only the small files are read (``sweep.json``, ``results/*.json``): a study copied back without its weights, or one
published under ``bench/results``, still counts.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from backend.core import atomic
from backend.core.paths import REPO_ROOT

SETTINGS = (
    "epochs",
    "lr",
    "batch_size",
    "max_len",
    "weight_decay",
    "warmup_ratio",
    "max_train_examples",
    "max_eval_examples",
)  # fmt: skip  (what changes a fine-tune's spread; the seeds are what a plan varies)


def suite_path(recorded: str | None) -> Path | None:
    """The suite a sweep recorded, or the one of the same name here (a study published from another checkout)."""
    if not recorded:
        return None
    p, here = Path(recorded), REPO_ROOT / "configs" / "suites" / Path(recorded).name
    if p.is_relative_to(REPO_ROOT) and p.exists():
        return p
    return here if here.exists() else (p if p.exists() else None)


def finetune_tasks(suite: str | Path | None, overrides: dict, task: str | None = None, data: str | None = None) -> list:
    """Per task ``{name, task, data, settings}`` as a study fine-tunes it: the suite's settings with ``overrides`` in
    their place (the seeds left out), or the one task of a sweep's ``--eval``."""
    from backend.evaluation.finetune import resolve_hparams
    from backend.evaluation.suite import load_suite

    if suite:
        out = []
        for t in load_suite(suite)["tasks"]:
            hp = {**t["hparams"], **{k: v for k, v in overrides.items() if k != "seeds"}}
            out.append({"name": t["name"], "task": t["task"], "data": t["data"],
                        "settings": {k: hp.get(k) for k in SETTINGS}})  # fmt: skip
        return out
    if task:
        hp = resolve_hparams(task, **{k: v for k, v in overrides.items() if k != "seeds"})
        return [
            {"name": Path(str(data)).name, "task": task, "data": data, "settings": {k: hp.get(k) for k in SETTINGS}}
        ]
    return []


def model_label(model: dict) -> str:
    """A sweep's base as the power's sources name it: the model's name, or a from-scratch encoder's shape."""
    if model.get("name") == "from_scratch":
        a = model.get("from_scratch") or {}
        return f"from_scratch:{a.get('num_hidden_layers')}x{a.get('hidden_size')}"
    return Path(str(model.get("name"))).name


def signature(tasks: list[dict], model: str | None) -> dict:
    """What two studies must share for one's seed noise to stand for the other's: the tasks and their fine-tuning
    settings, and the base model."""
    return {"model": Path(str(model)).name if model else None,
            "tasks": sorted((t["name"], sorted(t["settings"].items())) for t in tasks)}  # fmt: skip


def read(sweep_dir: Path) -> dict | None:
    """``_read`` once per state of the folder (its manifest and results written): a plan looks at every source once."""
    d = Path(sweep_dir)
    try:
        results = [p.stat().st_mtime_ns for p in (d / "results").glob("*.json")]
        stamp = (d / "sweep.json").stat().st_mtime_ns, max(results, default=0), len(results)
    except OSError:
        return None
    key = (str(d.resolve()), stamp)
    if key not in _READ:
        _READ[key] = _read(d)
    return _READ[key]


_READ: dict = {}


def _read(sweep_dir: Path) -> dict | None:
    """``{groups, tasks, level, signature, pretraining_seeds, finetune_seeds, comparisons, dir, when}`` of a finished
    (or partly finished) sweep that fine-tuned its runs, or None (no fine-tuning, no two pretraining seeds)."""
    from backend.sweeps.measure import _line_key, read_results, reference_runs

    m = atomic.read_json(Path(sweep_dir) / "sweep.json")
    if not isinstance(m, dict) or "cells" not in m:
        return None
    ev = m.get("evaluation") or {}
    suite = suite_path(ev.get("suite"))
    if ev.get("suite") and suite is None:
        return None
    try:
        tasks = finetune_tasks(suite, ev.get("hparams") or {}, ev.get("task"), ev.get("data"))
    except Exception:  # noqa: BLE001 - a sweep whose settings this version cannot read is no source
        return None
    if not tasks:
        return None
    names = [t["name"] for t in tasks]
    results = read_results(Path(sweep_dir))
    refs = reference_runs(m)
    key = m["axes"][0]["key"]
    groups, scores = [], {n: [] for n in names}
    for c in m["cells"]:
        if repr(c["values"][key]) == repr(m["reference"]):
            continue
        rows = []
        for seed, run in c["runs"].items():
            ref = refs.get((_line_key(m, c), seed))
            a, b = _scores(results.get(run), names), _scores(results.get(ref), names)
            if a is None or b is None:
                continue
            common = sorted(set.intersection(*(set(a[n]) & set(b[n]) for n in names)), key=str)
            if common:
                rows.append([[100 * (a[n][f] - b[n][f]) for f in common] for n in names])
                for n in names:
                    scores[n] += [100 * a[n][f] for f in common] + [100 * b[n][f] for f in common]
        width = min((len(r[0]) for r in rows), default=0)
        if len(rows) >= 2 and width:
            groups.append(np.array([[row[:width] for row in r] for r in rows]))
    if not groups:
        return None
    return {"groups": groups, "tasks": tasks, "level": {n: float(np.mean(v)) for n, v in scores.items() if v},
            "signature": signature(tasks, model_label((m.get("base") or {}).get("model") or {})),
            "pretraining_seeds": max(g.shape[0] for g in groups), "finetune_seeds": max(g.shape[2] for g in groups),
            "comparisons": len(groups), "dir": str(sweep_dir), "when": m.get("created_at")}  # fmt: skip


def _scores(res: dict | None, names: list[str]) -> dict[str, dict] | None:
    """task -> fine-tuning seed -> score of one run's cached results, or None when a task is missing."""
    if not res:
        return None
    if res.get("suite_scores"):
        got = res["suite_scores"]
        if not all(got.get(n) for n in names):
            return None
        return {n: {str(k): float(v) for k, v in got[n].items() if v is not None} for n in names}
    if res.get("finetune_by_seed") and len(names) == 1:
        return {names[0]: {str(k): float(v) for k, v in res["finetune_by_seed"].items() if v is not None}}
    return None


def fingerprint(group: np.ndarray) -> str:
    """The same comparison in two sweeps (a study rerun over budgets reuses its cells) counts once."""
    return hashlib.sha1(np.round(group, 6).tobytes()).hexdigest()

"""Verdicts over a suite of tasks, the way the field now reports them (Agarwal et al. 2021, "Deep RL at the Edge of
the Statistical Precipice"): per model and task the mean with a 95% t interval over seeds and the fine-tuning
stability; per comparison A vs B the paired delta per task with its interval and wins, and over tasks x seeds the
mean delta with the interval and verdict of ``delta_verdict`` (the one rule, valid at 2-5 seeds per level), and,
described beside it, the interquartile mean (IQM) and the probability of improvement P(A > B) with percentile
**stratified bootstrap** intervals (seeds resampled within each task, tasks kept): at a few seeds those intervals are
too narrow, so no verdict rests on them.

Scores are in points (F1 in percent). A seed is a key: a fine-tuning seed, or a ``(pretraining seed, fine-tuning
seed)`` pair when a study has both levels; A and B are paired by key. With one pretraining seed the interval is
over fine-tuning seeds alone (pretraining variance is then not measured, and said so); with several, it is a t
interval over the pretraining-seed means. A task where every run of both models gives one constant answer (or the
same score) measures nothing: it is left out of the aggregate, and the report says so.

The point estimates follow ``rliable.metrics`` (IQM: ``scipy.stats.trim_mean(., 0.25)`` over all runs x tasks;
P(X > Y): the Mann-Whitney U statistic per task, ties count half, averaged over tasks); tests/evaluation checks
them and the intervals against rliable on the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Hashable

import numpy as np
from scipy import stats as sps

from backend.evaluation.delta_verdict import delta_verdict
from backend.evaluation.stats import seeds_needed

CONFIDENCE = 0.95
REPS = 5000  # bootstrap resamples: the percentile endpoints move by well under 0.1 point between seeds of the rng
ALPHA, POWER = 0.05, 0.8

Key = Hashable  # a fine-tuning seed, or (pretraining seed, fine-tuning seed)


def t_summary(values: list[float]) -> dict:
    """``{n, mean, sd, ci95}``: sample sd and a Student t interval (scipy) over seeds; None where undefined."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "ci95": None}
    mean = float(x.mean())
    if n < 2:
        return {"n": 1, "mean": mean, "sd": None, "ci95": None}
    sd = float(x.std(ddof=1))
    half = float(sps.t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "ci95": [mean - half, mean + half]}


def iqm(x) -> float:
    """Interquartile mean: the mean of the middle 50% (rliable's ``aggregate_iqm``)."""
    return float(sps.trim_mean(np.ravel(x), proportiontocut=0.25))


def probability_of_improvement(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    """P(A > B) averaged over tasks: per task the share of (run of A, run of B) pairs A wins, ties counting half
    (rliable's ``probability_of_improvement``, the normalized Mann-Whitney U)."""
    per_task = []
    for x, y in zip(a, b, strict=True):
        x, y = np.asarray(x, float)[:, None], np.asarray(y, float)[None, :]
        per_task.append(float(np.mean((x > y) + 0.5 * (x == y))))
    return float(np.mean(per_task))


# ---- stratified bootstrap -------------------------------------------------------------------------------------


def _groups(keys: list[Key]) -> list[list[int]] | None:
    """Indices of ``keys`` grouped by pretraining seed when keys are (pretraining, fine-tuning) pairs and there are
    at least two pretraining seeds; None otherwise (one level: a flat resample)."""
    if not keys or not all(isinstance(k, tuple) and len(k) == 2 for k in keys):
        return None
    by: dict = {}
    for i, (p, _) in enumerate(keys):
        by.setdefault(p, []).append(i)
    return list(by.values()) if len(by) > 1 else None


def _resample(rng: np.random.Generator, keys: list[Key], reps: int) -> np.ndarray:
    """(reps, m) indices into one task's paired runs: seeds with replacement, or nested (pretraining seeds with
    replacement, then each one's fine-tuning seeds with replacement, as many as the largest group has)."""
    n = len(keys)
    groups = _groups(keys)
    if groups is None:
        return rng.integers(0, n, size=(reps, n))
    sizes = np.array([len(g) for g in groups])
    width = int(sizes.max())
    members = np.array([g + [g[0]] * (width - len(g)) for g in groups])  # padded; draws stay inside sizes
    pick = rng.integers(0, len(groups), size=(reps, len(groups)))  # pretraining seeds
    inner = (rng.random((reps, len(groups), width)) * sizes[pick][..., None]).astype(int)
    return members[pick[..., None], inner].reshape(reps, -1)


def bootstrap(
    a: list[np.ndarray],
    b: list[np.ndarray],
    keys: list[list[Key]],
    reps: int = REPS,
    seed: int = 0,
    paired: bool = True,
) -> dict[str, np.ndarray]:
    """Bootstrap distributions of the suite statistics, stratified by task: per task the runs are resampled with
    replacement (the same draw for A and B when ``paired``: a seed's pair stays a pair; independent draws as
    rliable's ``StratifiedIndependentBootstrap`` when not). Returns arrays of length ``reps``."""
    rng = np.random.default_rng(seed)
    mean_delta = np.zeros(reps)
    poi = np.zeros(reps)
    pooled_a, pooled_b = [], []
    for x, y, k in zip(a, b, keys, strict=True):
        ia = _resample(rng, k, reps)
        ib = ia if paired else _resample(rng, k, reps)
        xa, yb = x[ia], y[ib]
        mean_delta += (xa - yb).mean(axis=1)
        poi += np.mean((xa[:, :, None] > yb[:, None, :]) + 0.5 * (xa[:, :, None] == yb[:, None, :]), axis=(1, 2))
        pooled_a.append(xa)
        pooled_b.append(yb)
    pa, pb = np.concatenate(pooled_a, axis=1), np.concatenate(pooled_b, axis=1)
    iqm_a = sps.trim_mean(pa, 0.25, axis=1)
    iqm_b = sps.trim_mean(pb, 0.25, axis=1)
    return {
        "mean_delta": mean_delta / len(a),
        "iqm_a": iqm_a,
        "iqm_b": iqm_b,
        "iqm_delta": iqm_a - iqm_b,
        "poi": poi / len(a),
    }


def percentile_ci(dist: np.ndarray, confidence: float = CONFIDENCE) -> list[float]:
    lo, hi = np.percentile(dist, [50 * (1 - confidence), 50 * (1 + confidence)])
    return [float(lo), float(hi)]


# ---- per task and per comparison ------------------------------------------------------------------------------


def stability(runs: list[dict], metric: str) -> dict:
    """Fine-tuning stability of one model on one task from its run records: the sd of the test metric over seeds
    (in points), and the seeds that failed, diverged (too many non-finite steps) or gave one constant answer."""
    ok = [r for r in runs if r.get("status") == "ok" and (r.get("test") or {}).get(metric) is not None]
    failed = [r for r in runs if r.get("status") == "failed"]
    diverged = [r["seed"] for r in failed if "non-finite" in str(r.get("error", ""))]
    vals = [100 * r["test"][metric] for r in ok]
    return {
        "sd": float(np.std(vals, ddof=1)) if len(vals) > 1 else None,
        "range": [min(vals), max(vals)] if vals else None,
        "failed": [r["seed"] for r in failed if r["seed"] not in diverged],
        "diverged": diverged,
        "constant": [r["seed"] for r in ok if (r.get("test") or {}).get("constant") is not None],
    }


def verdict_of(ci: list[float] | None, a: str, b: str) -> str:
    """'A better' / 'B better' only when the interval of A - B excludes 0; else inconclusive."""
    if ci is None or ci[0] <= 0 <= ci[1]:
        return "inconclusive"
    return f"{a} better" if ci[0] > 0 else f"{b} better"


def task_delta(
    xa: dict[Key, float], xb: dict[Key, float], a: str, b: str, reps: int = REPS, seed_level: str = "fine-tuning"
) -> dict:
    """A - B on one task, paired by key: mean, the interval and verdict of the one rule (``delta_verdict``: paired t
    over fine-tuning seeds; t over pretraining-seed means when there are two or more), wins and, when inconclusive,
    the paired seeds a two-sided paired t test (alpha 0.05, power 0.8) needs at the observed spread. ``reps`` is
    kept for callers; the rule draws nothing at random."""
    keys = sorted(set(xa) & set(xb), key=repr)
    d = [xa[k] - xb[k] for k in keys]
    s = t_summary(d)
    rule = delta_verdict({"task": dict(zip(keys, d, strict=True))}, seed_level=seed_level)
    how = rule["method"] + "".join(f"; {u}" for u in rule["unmeasured"] + rule["notes"])
    v = _verdict_of_rule(rule, a, b)
    return {
        "keys": [list(k) if isinstance(k, tuple) else k for k in keys],
        "n": s["n"],
        "delta": s["mean"],
        "sd": s["sd"],
        "ci95": rule["ci95"],
        "p_value": rule["p_value"],
        "interval": how,
        "unmeasured": rule["unmeasured"],
        "wins_a": sum(x > 0 for x in d),
        "wins_b": sum(x < 0 for x in d),
        "ties": sum(x == 0 for x in d),
        "verdict": v,
        "seeds_needed": seeds_needed(s["mean"], s["sd"], ALPHA, POWER) if v == "inconclusive" else None,
    }


def _verdict_of_rule(rule: dict, a: str, b: str) -> str:
    return {"up": f"{a} better", "down": f"{b} better"}.get(rule["direction"], "inconclusive")


def uninformative(xa: dict[Key, float], xb: dict[Key, float], constant: bool = False) -> str | None:
    """Why a task measures nothing about A vs B, or None: every run of both models gave one constant answer
    (``constant``, from the run records), or every paired run of both scored the same."""
    keys = set(xa) & set(xb)
    if constant:
        return "every run of both models gave one constant answer"
    vals = {round(float(v), 9) for k in keys for v in (xa[k], xb[k])}
    if len(keys) > 1 and len(vals) == 1:
        return f"every run of both models scored {next(iter(vals)):.2f}"
    return None


def seed_levels(diffs: dict[Key, float]) -> dict:
    """Where the spread of A - B comes from when keys are (pretraining, fine-tuning) seeds: the fine-tuning
    variance (within a pretraining seed) and, with two or more pretraining seeds, the pretraining variance (of the
    pretraining-seed means, less the fine-tuning share), and which level more seeds would help."""
    by: dict = {}
    for k, v in diffs.items():
        p, _ = k if isinstance(k, tuple) else (None, k)
        by.setdefault(p, []).append(v)
    within = [np.var(v, ddof=1) for v in by.values() if len(v) > 1]
    var_f = float(np.mean(within)) if within else None
    f = float(np.mean([len(v) for v in by.values()]))
    out = {"pretraining_seeds": len(by), "finetuning_seeds": f, "var_finetuning": var_f, "var_pretraining": None}
    if len(by) < 2:
        out["advice"] = (
            "one pretraining seed: pretraining variance not measured; more fine-tuning seeds narrow the "
            "fine-tuning part only, and a second pretraining seed is what would measure the rest"
        )
        return out
    if var_f is None:  # one fine-tuning seed under each pretraining seed: the two levels cannot be told apart
        out["advice"] = (
            "one fine-tuning seed per pretraining seed: fine-tuning variance not measured (it is inside the spread "
            "of the pretraining-seed means the interval uses); a second fine-tuning seed would tell the levels apart"
        )
        return out
    means = [float(np.mean(v)) for v in by.values()]
    var_p = max(0.0, float(np.var(means, ddof=1)) - var_f / f)
    out["var_pretraining"] = var_p
    more_p = var_p >= (var_f or 0.0) / f  # the pretraining share of a cell mean's variance dominates
    out["advice"] = (
        "more pretraining seeds would narrow the interval most (their variance dominates)"
        if more_p
        else "more fine-tuning seeds would narrow the interval most (their variance dominates)"
    )
    return out


def compare(
    tasks: dict[str, dict[str, dict[Key, float]]],
    a: str,
    b: str,
    reps: int = REPS,
    seed: int = 0,
    constant: dict[str, set[str]] | None = None,
) -> dict:
    """A vs B over a suite: ``tasks`` is task -> model -> key -> score (points); ``constant`` task -> the models
    every run of which gave one constant answer there. Per task the paired delta, its interval, wins and verdict;
    tasks that measure nothing (both models constant everywhere, or one score everywhere) are left out of the
    aggregate (``excluded_tasks`` says why); over the others the mean delta with the interval and verdict of the
    one rule (``delta_verdict``), and IQM (of each model and their difference) and P(A > B) with stratified
    bootstrap 95% intervals (descriptive); a plain verdict and, when it is inconclusive, what would settle it."""
    names = [t for t in tasks if tasks[t].get(a) and tasks[t].get(b) and set(tasks[t][a]) & set(tasks[t][b])]
    per_task = {t: task_delta(tasks[t][a], tasks[t][b], a, b, reps) for t in names}
    const = constant or {}
    excluded = {
        t: why for t in names if (why := uninformative(tasks[t][a], tasks[t][b], {a, b} <= set(const.get(t, ()))))
    }
    for t, why in excluded.items():
        per_task[t] |= {"verdict": f"left out: {why}", "seeds_needed": None, "left_out": why}
    used = [t for t in names if t not in excluded]
    out = {"a": a, "b": b, "tasks": used, "excluded_tasks": excluded, "per_task": per_task,
           "confidence": CONFIDENCE, "reps": reps}  # fmt: skip
    if not used:
        out["settle"] = None
        out["verdict"] = (
            "no task measures anything: " + "; ".join(f"{t}: {w}" for t, w in excluded.items())
            if excluded
            else "no task has paired seeds of both models"
        )
        return out
    keys = [sorted(set(tasks[t][a]) & set(tasks[t][b]), key=repr) for t in used]
    xa = [np.array([tasks[t][a][k] for k in ks]) for t, ks in zip(used, keys, strict=True)]
    xb = [np.array([tasks[t][b][k] for k in ks]) for t, ks in zip(used, keys, strict=True)]
    dist = bootstrap(xa, xb, keys, reps, seed, paired=True)
    diffs = {t: {k: float(tasks[t][a][k] - tasks[t][b][k]) for k in ks} for t, ks in zip(used, keys, strict=True)}
    rule = delta_verdict(diffs)
    point = {
        "iqm_a": iqm(np.concatenate(xa)),
        "iqm_b": iqm(np.concatenate(xb)),
        "poi": probability_of_improvement(xa, xb),
    }
    point["iqm_delta"] = point["iqm_a"] - point["iqm_b"]
    out["aggregate"] = {
        "mean_delta": {
            "value": rule["mean"],
            "ci95": rule["ci95"],
            "estimate": rule["estimate"],
            "p_value": rule["p_value"],
            "method": rule["method"],
        },  # fmt: skip
        **{k: {"value": v, "ci95": percentile_ci(dist[k]), "descriptive": True} for k, v in point.items()},
    }
    out["rule"] = rule
    deltas = [per_task[t]["delta"] for t in used]
    out["task_wins"] = {
        "a": sum(d > 0 for d in deltas),
        "b": sum(d < 0 for d in deltas),
        "ties": sum(d == 0 for d in deltas),
    }
    out["verdict"] = _verdict_of_rule(rule, a, b)
    out["settle"] = _settle(out, xa, xb) if out["verdict"] == "inconclusive" else None
    out["seed_levels"] = _levels_over_tasks({(t, k): v for t, d in diffs.items() for k, v in d.items()})
    return out


def _levels_over_tasks(diffs: dict) -> dict:
    """seed_levels with each task's pretraining seeds kept apart (a task's own seeds are its strata)."""
    per_task: dict = {}
    for (t, k), v in diffs.items():
        per_task.setdefault(t, {})[k] = v
    levels = [seed_levels(d) for d in per_task.values()]
    first = levels[0]
    if first["pretraining_seeds"] < 2 or first["var_finetuning"] is None:
        return first  # a level not measured stays None (and its advice says so), never averaged in as 0
    var_f = float(np.mean([lv["var_finetuning"] or 0.0 for lv in levels]))
    var_p = float(np.mean([lv["var_pretraining"] or 0.0 for lv in levels]))
    return {**first, "var_finetuning": var_f, "var_pretraining": var_p, "advice": first["advice"]}


def _settle(out: dict, xa: list[np.ndarray], xb: list[np.ndarray]) -> dict:
    """What would turn an inconclusive suite verdict into a direction at the observed effect and spreads (two-sided
    paired t, alpha 0.05, power 0.8; scipy's noncentral t): fine-tuning seeds per task at the pooled within-task
    spread of A - B, or tasks at the observed between-task spread of the per-task deltas."""
    delta = out["aggregate"]["mean_delta"]["value"]
    diffs = [x - y for x, y in zip(xa, xb, strict=True)]
    within = [np.var(d, ddof=1) for d in diffs if len(d) > 1]
    sd_w = math.sqrt(float(np.mean(within))) if within else None
    n_tasks = len(diffs)
    total = seeds_needed(delta, sd_w, ALPHA, POWER)
    per_task = math.ceil(total / n_tasks) if total else None
    task_means = [float(d.mean()) for d in diffs]
    sd_b = float(np.std(task_means, ddof=1)) if n_tasks > 1 else None
    tasks_needed = seeds_needed(delta, sd_b, ALPHA, POWER)
    parts = []
    if per_task:
        parts.append(f"about {max(per_task, 2)} seeds per task over these {n_tasks} tasks (within-task sd {sd_w:.2f})")
    if tasks_needed:
        parts.append(f"about {tasks_needed} tasks like these (between-task sd of the deltas {sd_b:.2f})")
    text = (
        f"to detect the observed {delta:+.2f} points with 80% power: " + " or ".join(parts)
        if parts
        else "no difference was observed: no number of seeds or tasks would give this delta a direction"
    )
    return {"seeds_per_task": per_task, "tasks": tasks_needed, "sd_within": sd_w, "sd_between": sd_b, "text": text}

"""N models ranked on a suite, with the groups the data cannot tell apart, by the one pairwise rule made
simultaneous.

Every pair of the M models is compared by the rule of ``delta_verdict.py`` (paired by seed; per task a paired t
combined over tasks by Stouffer's z with one pretraining seed, Student's t over the pretraining-seed means with two
or more), each at level ``ALPHA / K`` for the K = M (M - 1) / 2 pairs (Bonferroni). A pair is **separated** when its
test rejects "no difference" at that level, that is when its interval at confidence 1 - ALPHA / K excludes 0. By
the union bound every separation of the table is right at once with probability >= 1 - ALPHA, at any seed count
and with either seed level, as exact as the pairwise rule itself. From the separations:

* each model's **rank interval**: from 1 + the models separated above it to M - the models separated below it (the
  simultaneous confidence set for ranks of Klein, Wright & Wieczorek 2020, built on simultaneous pairwise tests);
* the **tie groups**: the maximal sets of models no two of which are separated (the maximal cliques of the "not
  separated" graph), lettered a, b, ... from the best; two models share a letter exactly when the data cannot
  tell them apart. Holm's step-down would reject more, but tests only, with no simultaneous intervals, and leaves
  a truly equal pair at the full ALPHA once the other pairs are settled.

Each model's **suite score** is the mean over tasks of its mean over seeds (the Average column of the suite
table), with a Student t interval over the independent units the pairwise rule uses: pretraining seeds (each one's
mean over tasks x fine-tuning seeds) when there are two or more, else fine-tuning seeds (each one's mean over
tasks). A unit not measured on every task is left out of it (the tasks' levels differ). One fine-tuning seed under
each pretraining seed is one unit per pretraining seed, never zero fine-tuning variance: it is inside their spread.

``pairwise`` is vectorized over leading axes, so the simulation test (``tests/evaluation/test_ranking.py``) runs
the very functions a report runs on thousands of simulated suites.
"""

from __future__ import annotations

import contextlib
import math
import string
import warnings
from collections.abc import Hashable

import numpy as np
from scipy import stats as sps

from backend.evaluation.delta_verdict import ONE_PRETRAINING_SEED, delta_verdict, stouffer_z, task_moments

ALPHA = 0.05
Key = Hashable  # a fine-tuning seed, or (pretraining seed, fine-tuning seed)


def layout(scores: dict, labels: list[str]) -> tuple[list[str], list, list, np.ndarray, bool]:
    """(tasks, pretraining seeds, fine-tuning seeds, array models x tasks x pretraining x fine-tuning with NaN where
    not measured, two levels?) from ``scores``: task -> label -> key -> points."""
    tasks = [t for t in scores if any(scores[t].get(lab) for lab in labels)]
    keys = [k for t in tasks for lab in labels for k in (scores[t].get(lab) or {})]
    two = bool(keys) and all(isinstance(k, tuple | list) and len(k) == 2 for k in keys)
    split = (lambda k: tuple(k)) if two else (lambda k: (None, k))  # noqa: E731
    pre = sorted({split(k)[0] for k in keys}, key=repr)
    ft = sorted({split(k)[1] for k in keys}, key=repr)
    ip, jf = {p: i for i, p in enumerate(pre)}, {f: j for j, f in enumerate(ft)}
    arr = np.full((len(labels), len(tasks), len(pre), len(ft)), np.nan)
    for m, lab in enumerate(labels):
        for i, t in enumerate(tasks):
            for k, v in (scores[t].get(lab) or {}).items():
                p, f = split(k)
                arr[m, i, ip[p], jf[f]] = float(v)
    return tasks, pre, ft, arr, two


# ---- the pairwise rule, vectorized ------------------------------------------------------------------------------


@contextlib.contextmanager
def _quiet():
    """The mean of an all-NaN slice is NaN here on purpose (a unit not measured): no RuntimeWarning for it."""
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _nan_t(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(two-sided p of mean 0, mean) of a Student t over the last axis, NaN entries left out; p is NaN with fewer
    than two values, and 0 or 1 when they do not spread (a difference every unit agrees on, or none)."""
    n = np.sum(~np.isnan(m), axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.nanmean(m, axis=-1)
        sd = np.sqrt(np.nansum((m - mean[..., None]) ** 2, axis=-1) / (n - 1))
        p = 2 * sps.t.sf(np.abs(mean) / (sd / np.sqrt(n)), n - 1)
    p = np.where(sd > 0, p, (mean == 0).astype(float))
    return np.where(n >= 2, p, np.nan), mean


def _pair(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(p, direction) of A - B for ``d`` shaped (..., tasks, pretraining, fine-tuning): the rule's branch by the
    number of pretraining seeds, as ``delta_verdict`` takes it."""
    if d.shape[-2] >= 2:  # t over the pretraining seeds measured on every task (each one's mean over tasks x seeds)
        with _quiet():
            per = np.nanmean(d, axis=-1)  # (..., tasks, pretraining)
            complete = ~np.isnan(per).any(axis=-2)
            units = np.where(complete, np.nanmean(per, axis=-2), np.nan)
        p, mean = _nan_t(units)
        return p, np.sign(mean)
    one = d[..., 0, :]  # (..., tasks, fine-tuning): per-task paired t, combined by Stouffer's z
    with _quiet():
        mean, se, df = task_moments(one)
        z = stouffer_z(mean, se, df)
    p = 2 * sps.norm.sf(np.abs(z))
    n = np.sum(~np.isnan(one), axis=-1)
    if one.shape[-2] == 1:  # one task, every seed the same difference: the interval is that point (as the rule says)
        flat = np.isnan(se[..., 0]) & (n[..., 0] >= 2)
        p = np.where(flat, (mean[..., 0] == 0).astype(float), p)
        z = np.where(flat, mean[..., 0], z)
    return p, np.sign(z)


def pairwise(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(p, direction), each shaped (..., M, M), for ``arr`` shaped (..., M models, tasks, pretraining, fine-tuning):
    p[i, j] the rule's two-sided p of no difference between models i and j (NaN: nothing to test), direction[i, j]
    +1 when i is estimated above j, -1 below."""
    m = arr.shape[-4]
    p = np.full((*arr.shape[:-4], m, m), np.nan)
    sign = np.zeros_like(p)
    for i in range(m):
        for j in range(i + 1, m):
            pij, sij = _pair(arr[..., i, :, :, :] - arr[..., j, :, :, :])
            p[..., i, j] = p[..., j, i] = pij
            sign[..., i, j], sign[..., j, i] = sij, -sij
    return p, sign


def separated(p: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """Which pairs the data tells apart: p below alpha / K, K the number of pairs (Bonferroni); NaN never is."""
    m = p.shape[-1]
    k = m * (m - 1) // 2
    with np.errstate(invalid="ignore"):
        return np.nan_to_num(p, nan=1.0) < alpha / max(k, 1)


# ---- ranks and groups from the separations ----------------------------------------------------------------------


def rank_intervals(sep: np.ndarray, sign: np.ndarray) -> list[tuple[int, int]]:
    """(best, worst) rank of each model: 1 + models separated above it, M - models separated below it."""
    m = sep.shape[-1]
    above = (sep & (sign < 0)).sum(axis=-1)
    below = (sep & (sign > 0)).sum(axis=-1)
    return [(int(1 + above[i]), int(m - below[i])) for i in range(m)]


def tie_groups(sep: np.ndarray, order: list[int]) -> list[list[int]]:
    """The maximal sets of models no two of which are separated (Bron-Kerbosch with a pivot on the "not separated"
    graph; M is small), each listed in ``order`` (best first), the groups ordered by their best member."""
    m = sep.shape[-1]
    near = [{j for j in range(m) if j != i and not sep[i, j]} for i in range(m)]
    found: list[set[int]] = []

    def grow(r: set[int], cand: set[int], done: set[int]) -> None:
        if not cand and not done:
            found.append(r)
            return
        pivot = max(cand | done, key=lambda u: len(near[u] & cand))
        for v in list(cand - near[pivot]):
            grow(r | {v}, cand & near[v], done & near[v])
            cand = cand - {v}
            done = done | {v}

    grow(set(), set(range(m)), set())
    pos = {model: i for i, model in enumerate(order)}
    groups = [sorted(g, key=pos.__getitem__) for g in found]
    return sorted(groups, key=lambda g: (pos[g[0]], -len(g), [pos[x] for x in g]))


def letters(n: int) -> list[str]:
    """a, b, ... z, then aa, ab, ...: one name per tie group."""
    abc = string.ascii_lowercase
    return [abc[i] if i < 26 else abc[i // 26 - 1] + abc[i % 26] for i in range(n)]


# ---- each model's suite score ----------------------------------------------------------------------------------


def suite_score(a: np.ndarray, confidence: float = 1 - ALPHA) -> dict:
    """``{score, ci95, units, level}`` of one model from ``a`` shaped (tasks, pretraining, fine-tuning): the mean
    over tasks of each task's mean, and a t interval over the units measured on every task."""
    with _quiet():
        score = float(np.nanmean(np.nanmean(a.reshape(a.shape[0], -1), axis=-1)))
        if a.shape[1] >= 2:
            per = np.nanmean(a, axis=-1)  # (tasks, pretraining)
            level, units = "pretraining", np.nanmean(per, axis=0)[~np.isnan(per).any(axis=0)]
        else:
            one = a[:, 0, :]  # (tasks, fine-tuning)
            level, units = "fine-tuning", np.nanmean(one, axis=0)[~np.isnan(one).any(axis=0)]
    out = {"score": score, "ci95": None, "units": len(units), "level": level}
    if len(units) >= 2:
        half = sps.t.isf((1 - confidence) / 2, len(units) - 1) * float(np.std(units, ddof=1)) / math.sqrt(len(units))
        out["ci95"] = [float(np.mean(units) - half), float(np.mean(units) + half)]
    return out


def levels_note(pre: list, ft_per_pre: float, two: bool) -> str:
    """Which seed levels the ranking's units measure, in words."""
    if not two or len(pre) < 2:
        return ONE_PRETRAINING_SEED
    if ft_per_pre <= 1:
        return (
            f"{len(pre)} pretraining seeds with one fine-tuning seed each: the units are the pretraining seeds, and "
            "fine-tuning variance is inside their spread (not measured apart, never taken as zero)"
        )
    return f"{len(pre)} pretraining seeds: the units are the pretraining seeds (fine-tuning variance inside them)"


def leaderboard(scores: dict, labels: list[str], alpha: float = ALPHA) -> dict:
    """The ranking of ``labels`` from ``scores`` (task -> label -> key -> points): models best first with their
    suite score and interval, rank interval and tie-group letters; the groups; every pair's simultaneous interval
    (the pairwise rule at 1 - alpha / K) and whether it is separated. A model without a score on every task is
    listed under ``unranked`` with why."""
    tasks, pre, ft, arr, two = layout(scores, labels)
    missing = {lab: [t for i, t in enumerate(tasks) if np.isnan(arr[m, i]).all()] for m, lab in enumerate(labels)}
    ranked = [m for m, lab in enumerate(labels) if not missing[lab]]
    names = [labels[m] for m in ranked]
    arr = arr[ranked]
    n = len(names)
    k = n * (n - 1) // 2
    unranked = [{"label": lab, "why": f"no score on {', '.join(t)}"} for lab, t in missing.items() if t]
    out = {"alpha": alpha, "pairs_count": k, "confidence_each": 1 - alpha / max(k, 1), "tasks": tasks,
           "models": [], "groups": [], "pairs": [], "unranked": unranked}  # fmt: skip
    if n == 0:
        return out
    summaries = [suite_score(arr[i]) for i in range(n)]
    order = sorted(range(n), key=lambda i: (-summaries[i]["score"], i))
    p, sign = pairwise(arr)
    sep = separated(p, alpha)
    ranks = rank_intervals(sep, sign)
    groups = tie_groups(sep, order)
    names_of = letters(len(groups))
    out["groups"] = [{"letter": g, "models": [names[i] for i in grp]} for g, grp in zip(names_of, groups, strict=True)]
    for pos, i in enumerate(order, 1):
        mine = [g for g, grp in zip(names_of, groups, strict=True) if i in grp]
        out["models"].append({"label": names[i], "position": pos, **summaries[i], "rank_interval": list(ranks[i]),
                              "groups": mine})  # fmt: skip
    ft_per_pre = np.mean(np.sum(~np.isnan(arr), axis=-1)[~np.isnan(arr).all(axis=-1)]) if arr.size else 0
    out["levels"] = levels_note(pre, float(ft_per_pre), two)
    out["pairs"] = [_pair_record(scores, names, order[a], order[b], p, sep, alpha, k)
                    for a in range(n) for b in range(a + 1, n)]  # fmt: skip
    return out


def _pair_record(scores: dict, names: list[str], i: int, j: int, p, sep, alpha: float, k: int) -> dict:
    """One pair, better-placed first: its p, whether separated, and the rule's interval at 1 - alpha / K."""
    a, b = names[i], names[j]
    diffs = {}
    for t, by in scores.items():
        xa, xb = by.get(a) or {}, by.get(b) or {}
        common = [key for key in xa if key in xb]
        if common:
            diffs[t] = {tuple(key) if isinstance(key, list) else key: xa[key] - xb[key] for key in common}
    rule = delta_verdict(diffs, confidence=1 - alpha / max(k, 1))
    pij = p[i, j]
    return {"a": a, "b": b, "p_value": None if np.isnan(pij) else float(pij), "separated": bool(sep[i, j]),
            "estimate": rule["estimate"], "ci": rule["ci95"], "method": rule["method"]}  # fmt: skip

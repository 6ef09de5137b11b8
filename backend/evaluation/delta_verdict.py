"""The one rule that turns paired differences A − B into a verdict: an interval and a direction that stay honest
at the few seeds these studies run (2, 3 or 5 per level), called by the suite aggregate, the sweep report's cells
and the replication verdicts alike.

Why not a bootstrap: with n seeds that all favour one side, every percentile-bootstrap resample does too, so its
interval excludes 0 whatever the spread (3 seeds, no true difference: one time in four); with two pretraining seeds
a nested bootstrap resamples two units. The rule instead tests at the level whose units are independent:

* **two or more pretraining seeds** (keys ``(pretraining seed, fine-tuning seed)``): a pretraining seed's model is
  shared by every task and every fine-tuning seed, so the independent units are the pretraining seeds. Each one's
  mean over tasks x fine-tuning seeds is one value, and the interval is Student's t over those values (P − 1
  degrees of freedom): exact with normal noise, fine-tuning variance included, however few they are.
* **one pretraining seed** (or plain fine-tuning seeds): per task the paired t statistic over its fine-tuning
  seeds, exact with normal noise at any spread, turned into a z by its own t distribution; the tasks' z are
  combined by Stouffer's sum (exact: independent N(0, 1) under no difference, whatever each task's spread, where a
  pooled or Welch t over tasks is not). One task is the plain paired t. The interval is the set of shifts ``δ``
  of A − B, common to all tasks, that this test does not reject; its centre ``estimate`` is the shift with z = 0.
  Pretraining-seed variance is then not measured, and the verdict is about these two checkpoints.

A direction is given only when the interval excludes 0. ``tests/evaluation/test_delta_verdict.py`` checks, by
simulation with no true difference, the false-verdict rate and the coverage at 2, 3 and 5 seeds per level and 1-12
tasks.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping

import numpy as np
from scipy import special
from scipy import stats as sps

CONFIDENCE = 0.95
Key = Hashable  # a seed, or (pretraining seed, fine-tuning seed)
ONE_PRETRAINING_SEED = (
    "one pretraining seed: pretraining variance not measured (the verdict is about these checkpoints, not the "
    "recipes that made them)"
)


def _z_crit(confidence: float) -> float:
    return float(sps.norm.isf((1 - confidence) / 2))


# ---- one pretraining seed: per-task paired t, combined by Stouffer's z ------------------------------------------


def task_z(mean: np.ndarray, se: np.ndarray, df: np.ndarray, delta: float | np.ndarray = 0.0) -> np.ndarray:
    """Per task the paired t statistic of ``mean - delta`` turned into a standard normal z through its own t
    distribution (the same tail probability). Vectorized; tasks whose ``se`` is NaN give NaN."""
    x = (mean - delta) / se
    tail = special.stdtr(df, -np.abs(x))  # the t distribution's upper tail (scipy.special: a ufunc, fast in roots)
    return -np.sign(x) * special.ndtri(np.clip(tail, 1e-300, 0.5))


def stouffer_z(mean: np.ndarray, se: np.ndarray, df: np.ndarray, delta: float | np.ndarray = 0.0) -> np.ndarray:
    """Z = sum of the tasks' z over sqrt(number of tasks), over the last axis, NaN tasks left out (N(0, 1) exactly
    when every task's true shift is ``delta`` and the seed noise is normal)."""
    z = task_z(mean, se, df, delta)
    k = np.sum(~np.isnan(z), axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.nansum(z, axis=-1) / np.sqrt(k)


def task_moments(d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per task (axis -2) over seeds (axis -1, NaN = missing) the mean, the standard error and the degrees of
    freedom; a task with fewer than two seeds or no spread gets NaN (no t statistic)."""
    n = np.sum(~np.isnan(d), axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.nanmean(d, axis=-1)
        sd = np.sqrt(np.nansum((d - mean[..., None]) ** 2, axis=-1) / (n - 1))
        se = np.where((n >= 2) & (sd > 0), sd / np.sqrt(n), np.nan)
    return mean, se, (n - 1).astype(float)


def stouffer_p(d: np.ndarray) -> np.ndarray:
    """Two-sided p of no difference for ``d`` shaped (..., tasks, seeds) (vectorized: the simulation uses it)."""
    mean, se, df = task_moments(d)
    return 2 * sps.norm.sf(np.abs(stouffer_z(mean, se, df)))


def _stouffer_interval(mean: np.ndarray, se: np.ndarray, df: np.ndarray, confidence: float) -> tuple[float, list]:
    """(estimate, [lo, hi]): the shifts the combined test does not reject. Z falls with δ, so each end (and the
    centre, Z = 0) is found by bisection, all three at once."""
    c = _z_crit(confidence)
    targets = np.array([0.0, c, -c])
    spread = float(np.max(se * special.stdtrit(df, 1 - (1 - confidence) / 2)))
    lo = np.full(3, float(np.min(mean)) - spread)
    hi = np.full(3, float(np.max(mean)) + spread)
    k = math.sqrt(len(mean))
    z = lambda delta: task_z(mean, se, df, delta[:, None]).sum(axis=-1) / k  # noqa: E731  (no NaN task here)
    while np.any(z(lo) < targets):  # widen until every root is bracketed (rarely needed)
        lo -= hi - lo
    while np.any(z(hi) > targets):
        hi += hi - lo
    for _ in range(48):  # 2^-48 of the bracket: far below any printed digit
        mid = (lo + hi) / 2
        above = z(mid) > targets
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
    est, left, right = (lo + hi) / 2
    return float(est), [float(left), float(right)]


# ---- two or more pretraining seeds: t over the pretraining-seed means ------------------------------------------


def pretraining_means(d: np.ndarray) -> np.ndarray:
    """(..., tasks, pretraining seeds, fine-tuning seeds) -> (..., pretraining seeds): each pretraining seed's mean
    over its fine-tuning seeds, then over tasks (every task weighs the same)."""
    return np.nanmean(np.nanmean(d, axis=-1), axis=-2)


def t_interval(m: np.ndarray, confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Student t over the last axis (vectorized): (mean, lo, hi)."""
    n = m.shape[-1]
    mean = m.mean(axis=-1)
    half = sps.t.isf((1 - confidence) / 2, n - 1) * m.std(axis=-1, ddof=1) / math.sqrt(n)
    return mean, mean - half, mean + half


# ---- the rule ---------------------------------------------------------------------------------------------------


def _layout(diffs: Mapping[str, Mapping[Key, float]]) -> tuple[list, list, list, np.ndarray, bool]:
    """(tasks, pretraining seeds, fine-tuning seeds, array tasks x pretraining x fine-tuning with NaN, two levels?)."""
    tasks = [t for t in diffs if diffs[t]]
    keys = [k for t in tasks for k in diffs[t]]
    two = bool(keys) and all(isinstance(k, tuple) and len(k) == 2 for k in keys)
    split = (lambda k: k) if two else (lambda k: (None, k))  # noqa: E731
    pre = sorted({split(k)[0] for k in keys}, key=repr)
    ft = sorted({split(k)[1] for k in keys}, key=repr)
    ip, jf = {p: i for i, p in enumerate(pre)}, {f: j for j, f in enumerate(ft)}
    arr = np.full((len(tasks), len(pre), len(ft)), np.nan)
    for i, t in enumerate(tasks):
        for k, v in diffs[t].items():
            p, f = split(k)
            arr[i, ip[p], jf[f]] = float(v)
    return tasks, pre, ft, arr, two


def delta_verdict(
    diffs: Mapping[str, Mapping[Key, float]], seed_level: str = "fine-tuning", confidence: float = CONFIDENCE
) -> dict:
    """A − B over tasks: ``diffs`` is task -> key -> difference; a key is a seed of ``seed_level`` ("fine-tuning",
    or "pretraining" for a metric with no fine-tuning such as a held-out loss) or a (pretraining seed, fine-tuning
    seed) pair. Returns ``{mean, estimate, ci95, p_value, direction ('up' | 'down' | None), method, df, units,
    unmeasured, notes}``: ``mean`` the plain mean over tasks of each task's mean, ``estimate`` the interval's
    centre, ``unmeasured`` the variance levels these counts do not measure, said in words."""
    tasks, pre, _, arr, two = _layout(diffs)
    out = {"mean": None, "estimate": None, "ci95": None, "p_value": None, "direction": None, "method": None,
           "df": None, "units": 0, "unmeasured": [], "notes": []}  # fmt: skip
    if not tasks:
        out["method"] = "no paired values"
        return out
    out["mean"] = float(np.mean([np.nanmean(arr[i]) for i in range(len(tasks))]))
    if two and len(pre) >= 2:
        common = [j for j in range(len(pre)) if not np.isnan(arr[:, j, :]).all(axis=-1).any()]
        if len(common) < len(pre):
            out["notes"].append(
                "pretraining seeds not measured on every task left out of the interval: "
                + ", ".join(str(pre[j]) for j in range(len(pre)) if j not in common)
            )
        if len(common) >= 2:
            m = pretraining_means(arr[:, common, :])
            est, lo, hi = t_interval(m, confidence)
            sd = float(np.std(m, ddof=1))
            p = float(2 * sps.t.sf(abs(est) / (sd / math.sqrt(len(m))), len(m) - 1)) if sd > 0 else float(est == 0)
            out.update(estimate=float(est), ci95=[float(lo), float(hi)], p_value=p, df=len(m) - 1, units=len(m))
            out["method"] = (
                f"t over {len(m)} pretraining-seed means ({len(m) - 1} df), each over "
                f"{len(tasks)} task(s) x its fine-tuning seeds"
            )
            if np.all(np.sum(~np.isnan(arr[:, common, :]), axis=-1) <= 1):
                out["notes"].append(
                    "one fine-tuning seed per pretraining seed: fine-tuning variance not measured apart (it is "
                    "inside the pretraining-seed spread)"
                )
            return _direct(out)
        arr = arr[:, common[:1] if common else [0], :]
    if two or seed_level == "fine-tuning":
        out["unmeasured"].append(ONE_PRETRAINING_SEED)
    level = "fine-tuning" if two else seed_level
    d = arr[:, 0, :]
    mean, se, df = task_moments(d)
    n = np.sum(~np.isnan(d), axis=-1)
    for i, t in enumerate(tasks):
        if n[i] < 2:
            out["unmeasured"].append(f"{t}: one {level} seed: {level} variance not measured (left out of the test)")
        elif np.isnan(se[i]):
            out["notes"].append(f"{t}: the same difference on every seed (no spread): left out of the test")
    use = ~np.isnan(se)
    out["units"] = int(n[use].sum())
    if not use.any():
        out["method"] = f"no interval: no task has two {level} seeds with a spread"
        if len(tasks) == 1 and n[0] >= 2:  # every seed the same difference: the interval is that point
            out.update(estimate=float(mean[0]), ci95=[float(mean[0])] * 2, p_value=1.0 if mean[0] == 0 else 0.0)
            out["method"] = f"every {level} seed gave the same difference"
            return _direct(out)
        return out
    est, ci = _stouffer_interval(mean[use], se[use], df[use], confidence)
    z0 = float(stouffer_z(mean[use], se[use], df[use]))
    out.update(estimate=est, ci95=ci, p_value=float(2 * sps.norm.sf(abs(z0))), df=[int(x) for x in df[use]])
    k = int(use.sum())
    out["method"] = (
        f"paired t over {level} seeds ({int(df[use][0])} df)"
        if k == 1
        else f"per-task paired t over {level} seeds, {k} tasks combined by Stouffer's z"
    )
    return _direct(out)


def _direct(out: dict) -> dict:
    lo, hi = out["ci95"]
    out["direction"] = "up" if lo > 0 else "down" if hi < 0 else None
    return out


def unmeasured_text(v: dict) -> str:
    """The variance levels a verdict's counts do not measure, as one sentence ('' when both are measured)."""
    return "; ".join(v.get("unmeasured") or [])

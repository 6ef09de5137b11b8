"""The smallest difference a study can detect, before it runs: 80% power at the 95% level of the one rule that
gives its verdict (``delta_verdict``), from variance measured here, and what it would take to detect a given one.

The rule's unit is a pretraining seed: its mean difference over T tasks x F fine-tuning seeds. With the differences
of A - B modelled as ``d[t, p, f] = delta_t + a[p] + r[t, p] + e[t, p, f]``, that mean has the variance

    V = s2_pre + s2_task / T + mean over tasks of s2_ft(t) / (T F)

(pretraining seeds shared by every task; the task x pretraining-seed part a fine-tuning seed does not average out;
the fine-tuning part, which holds the evaluation sample's noise). With P pretraining seeds the rule is Student's t
over the P means (P - 1 df), so the detectable difference is the shift its noncentral t finds 80% of the time.
With one pretraining seed (fixed checkpoints: ``evaluate --suite``) the rule is each task's paired t over its
fine-tuning seeds combined by Stouffer's z, and its power is simulated with that same code.

``components`` estimates the three variances by the nested analysis of variance over the (P x T x F) differences of
one or more comparisons (pooled by their degrees of freedom). With one fine-tuning seed the fine-tuning part is not
measured apart; it is split by the evaluation sample's share (below) and the rest kept at the task level, where
more fine-tuning seeds do not reduce it (the cautious reading).

Evaluation sentences: a fine-tune scored on n sentences with e entities each has an entity-level F1 whose sampling
variance is about F (1 - F) / (n e); a difference of two models with independent errors twice that (an upper bound:
two models' errors on one sentence are correlated). That share of the fine-tuning variance is what more evaluation
sentences remove (``kappa`` = 2 F (1 - F) / e x 10^4 points^2 per sentence), never more than was measured.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from backend.evaluation.stats import paired_t_power

ALPHA, POWER = 0.05, 0.8
SIMS = 4000  # simulated studies per power evaluation with one pretraining seed (common random numbers)


@dataclass
class Components:
    """Variance components of a difference A - B, in points^2 (see the module). ``finetune`` is the fine-tuning
    part beyond the evaluation sample; ``kappa`` per task the evaluation sample's, per sentence (``/ n``)."""

    pretraining: float
    task: float
    finetune: float
    kappa: dict[str, float] = field(default_factory=dict)
    n_eval: dict[str, int] = field(default_factory=dict)  # the evaluation sentences they were measured at
    finetune_measured: bool = True
    df: dict[str, int] = field(default_factory=dict)
    level: dict[str, float] = field(default_factory=dict)  # per task, the mean score both models reached (points)

    def finetune_at(self, n_eval: dict[str, int | None] | None = None) -> dict[str, float]:
        """Per task the fine-tuning variance with ``n_eval`` evaluation sentences (None: as measured)."""
        n_eval = n_eval or {}
        out = {}
        for t, k in self.kappa.items():
            n = n_eval.get(t) or self.n_eval.get(t)
            out[t] = self.finetune + (k / n if n else 0.0)
        return out or {"": self.finetune}

    def unit_variance(self, tasks: int, finetune_seeds: int, n_eval: dict[str, int | None] | None = None) -> float:
        """V, the variance of one pretraining seed's mean over ``tasks`` x ``finetune_seeds``."""
        ft = float(np.mean(list(self.finetune_at(n_eval).values())))
        return self.pretraining + self.task / tasks + ft / (tasks * finetune_seeds)


def components(
    groups: list[np.ndarray],
    tasks: list[str],
    n_eval: dict[str, int] | None = None,
    entities: dict[str, float] | None = None,
    level: dict[str, float] | None = None,
) -> Components:
    """The components from comparisons, each an array (P pretraining seeds x T tasks x F fine-tuning seeds) of
    A - B in points (NaN: missing); ``n_eval``, ``entities`` (gold entities per evaluation sentence) and ``level``
    (mean F1 in points) per task give the evaluation sample's share. Needs two pretraining seeds in some group."""
    ss = {"pre": 0.0, "res": 0.0, "ft": 0.0}
    df = {"pre": 0, "res": 0, "ft": 0}
    t_seen, f_max = 0, 1
    for g in groups:
        g = np.asarray(g, float)
        if g.ndim != 3 or g.shape[0] < 2 or np.isnan(g).any():
            continue
        p, t, f = g.shape
        t_seen, f_max = max(t_seen, t), max(f_max, f)
        cell = g.mean(axis=2)  # P x T
        pm = cell.mean(axis=1)
        ss["pre"] += t * f * float(((pm - pm.mean()) ** 2).sum())
        df["pre"] += p - 1
        if t > 1:
            r = cell - cell.mean(0, keepdims=True) - cell.mean(1, keepdims=True) + cell.mean()
            ss["res"] += f * float((r**2).sum())
            df["res"] += (p - 1) * (t - 1)
        if f > 1:
            ss["ft"] += float(((g - cell[..., None]) ** 2).sum())
            df["ft"] += p * t * (f - 1)
    if not df["pre"]:
        raise ValueError("no comparison with two pretraining seeds and every value present")
    ms = {k: ss[k] / df[k] if df[k] else None for k in ss}
    t, f = max(t_seen, 1), f_max
    # expected mean squares (balanced): E[MS_ft] = s2_ft, E[MS_res] = s2_ft + F s2_task,
    # E[MS_pre] = E[MS_res] + T F s2_pre
    if ms["res"] is not None:
        s2_pre, cell = max(0.0, (ms["pre"] - ms["res"]) / (t * f)), ms["res"] / f  # cell: s2_task + s2_ft / F
    else:  # one task: the shared and the task part cannot be told apart; kept shared (more tasks then buy nothing)
        s2_pre, cell = 0.0, ms["pre"] / (t * f)
    kappa, n_eval, eval_now = _evaluation_share(tasks, n_eval, entities, level)
    measured = ms["ft"] is not None
    s2_ft = ms["ft"] if measured else min(eval_now, cell * f)  # one fine-tuning seed: at most the evaluation share
    s2_task = max(0.0, cell - s2_ft / f)
    if ms["res"] is None:
        s2_pre, s2_task = s2_pre + s2_task, 0.0
    scale = min(1.0, s2_ft / eval_now) if eval_now else 1.0  # the evaluation share never above what was measured
    kappa = {k: v * scale for k, v in kappa.items()}
    other = max(0.0, s2_ft - eval_now * scale)
    df_out = {"pretraining": df["pre"], "task": df["res"], "finetune": df["ft"]}
    return Components(s2_pre, s2_task, other, kappa, n_eval, measured, df_out, dict(level or {}))


# ------------------------------------------------------------------------------------------------ detectable effects


@functools.lru_cache(maxsize=4096)
def _effect_needed(n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The standardized effect (mean / sd of the units) a two-sided t test over ``n`` units detects with ``power``."""
    lo, hi = 0.0, 1.0
    while paired_t_power(n, hi, alpha) < power:
        hi *= 2
        if hi > 1e6:
            return math.inf
    for _ in range(40):  # 2^-40 of the bracket: far below any printed digit
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if paired_t_power(n, mid, alpha) >= power else (mid, hi)
    return hi


def detectable(c: Components, pretraining_seeds: int, tasks: int, finetune_seeds: int,
               n_eval: dict[str, int | None] | None = None) -> float:  # fmt: skip
    """The smallest true difference (points) the rule detects with 80% power at the 95% level (inf: never)."""
    if pretraining_seeds >= 2:
        v = c.unit_variance(tasks, finetune_seeds, n_eval)
        return _effect_needed(pretraining_seeds) * math.sqrt(v) if v > 0 else 0.0
    if finetune_seeds < 2:
        return math.inf  # one checkpoint and one fine-tuning seed: the rule gives no interval at all
    return _stouffer_detectable(list(c.finetune_at(n_eval).values()), tasks, finetune_seeds)


def _stouffer_detectable(variances: list[float], tasks: int, seeds: int) -> float:
    """One pretraining seed: the shift the per-task paired t + Stouffer rule finds 80% of the time, simulated with
    the rule's own code (``delta_verdict.stouffer_p``) over ``tasks`` tasks whose variances cycle ``variances``."""
    from backend.evaluation.delta_verdict import stouffer_p

    sd = np.sqrt([variances[i % len(variances)] for i in range(tasks)])
    noise = np.random.default_rng(0).standard_normal((SIMS, tasks, seeds)) * sd[None, :, None]

    def power(delta: float) -> float:
        return float(np.mean(stouffer_p(noise + delta) < ALPHA))

    lo, hi = 0.0, float(max(sd.max(), 1e-6))
    while power(hi) < POWER:
        hi *= 2
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if power(mid) >= POWER else (mid, hi)
    return hi


def smallest(fn, target: float, start: int, limit: int = 10_000) -> int | None:
    """The smallest whole n >= ``start`` with ``fn(n) <= target`` (fn falls with n), None when not even at ``limit``."""
    if fn(start) <= target:
        return start
    hi = start
    while fn(hi) > target:
        if hi >= limit:
            return None
        hi = min(hi * 2, limit)
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fn(mid) <= target else (mid, hi)
    return hi


def floor(c: Components, pretraining_seeds: int) -> float:
    """What no number of tasks, fine-tuning seeds or evaluation sentences gets below at ``pretraining_seeds``: the
    pretraining variance alone (with infinitely many tasks)."""
    return _effect_needed(pretraining_seeds) * math.sqrt(c.pretraining) if pretraining_seeds >= 2 else 0.0


def _evaluation_share(tasks: list[str], n_eval: dict | None, entities: dict | None,
                      level: dict | None) -> tuple[dict[str, float], dict[str, int], float]:  # fmt: skip
    """(kappa per task, the evaluation sentences per task, the mean evaluation variance per run now)."""
    kappa = {}
    for name in tasks:
        e, lv = (entities or {}).get(name), (level or {}).get(name)
        if e and lv is not None and 0 < lv < 100:
            kappa[name] = 2 * (lv / 100) * (1 - lv / 100) / e * 1e4
    n_eval = {k: int(v) for k, v in (n_eval or {}).items() if v}
    eval_now = float(np.mean([kappa[k] / n_eval[k] for k in kappa if k in n_eval])) if kappa and n_eval else 0.0
    return kappa, n_eval, eval_now


def finetune_components(
    diffs: list[dict[str, list[float]]],
    n_eval: dict[str, int] | None = None,
    entities: dict[str, float] | None = None,
    level: dict[str, float] | None = None,
) -> Components:
    """The fine-tuning part alone, from comparisons of fixed checkpoints (a suite: task -> A - B per fine-tuning
    seed): the pooled within-task variance over seeds, its evaluation share as in ``components``."""
    ss, df = 0.0, 0
    for d in diffs:
        for v in d.values():
            x = np.asarray(v, float)
            if len(x) > 1:
                ss += float(((x - x.mean()) ** 2).sum())
                df += len(x) - 1
    if not df:
        raise ValueError("no task with two fine-tuning seeds of both models")
    kappa, n_eval, eval_now = _evaluation_share(sorted({t for d in diffs for t in d}), n_eval, entities, level)
    s2_ft = ss / df
    scale = min(1.0, s2_ft / eval_now) if eval_now else 1.0
    return Components(0.0, 0.0, max(0.0, s2_ft - eval_now * scale), {k: v * scale for k, v in kappa.items()},
                      n_eval, True, {"pretraining": 0, "task": 0, "finetune": df}, dict(level or {}))  # fmt: skip

"""Seed statistics: mean ± sample std, and paired comparisons over seeds (mean difference with a paired t 95%
interval and a paired bootstrap 95% interval, win/tie/loss counts)."""

from __future__ import annotations

import math
import random
import statistics


def t_critical(df: int, confidence: float = 0.95) -> float:
    """Two-sided Student t critical value (scipy, pinned in requirements.txt)."""
    from scipy.stats import t

    if df < 1:
        raise ValueError("df must be >= 1")
    return float(t.ppf(0.5 + confidence / 2, df))


def mean_std(values: list[float]) -> dict:
    """``{"mean", "std", "n"}``; std is the sample standard deviation (None with fewer than 2 values)."""
    vals = [float(v) for v in values]
    if not vals:
        return {"mean": None, "std": None, "n": 0}
    return {
        "mean": statistics.fmean(vals),
        "std": statistics.stdev(vals) if len(vals) > 1 else None,
        "n": len(vals),
    }


def paired_t_ci(diffs: list[float], confidence: float = 0.95) -> list[float] | None:
    """Paired t interval for the mean difference; None with fewer than 2 pairs."""
    n = len(diffs)
    if n < 2:
        return None
    m = statistics.fmean(diffs)
    se = statistics.stdev(diffs) / math.sqrt(n)
    h = t_critical(n - 1, confidence) * se
    return [m - h, m + h]


def paired_bootstrap_ci(
    diffs: list[float], confidence: float = 0.95, n_boot: int = 10000, seed: int = 0
) -> list[float] | None:
    """Percentile bootstrap interval of the mean paired difference, resampling seeds with replacement."""
    n = len(diffs)
    if n < 2:
        return None
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(diffs, k=n)) for _ in range(n_boot))
    alpha = (1 - confidence) / 2
    lo = means[int(math.floor(alpha * (n_boot - 1)))]
    hi = means[int(math.ceil((1 - alpha) * (n_boot - 1)))]
    return [lo, hi]


def win_counts(a: list[float], b: list[float]) -> dict:
    """Over paired seeds: how often b beats a, a beats b, and ties."""
    wins_b = sum(y > x for x, y in zip(a, b, strict=True))
    wins_a = sum(x > y for x, y in zip(a, b, strict=True))
    return {"wins_b": wins_b, "wins_a": wins_a, "ties": len(a) - wins_a - wins_b}


def paired_comparison(a: dict[int, float], b: dict[int, float], confidence: float = 0.95) -> dict:
    """Compare two models' per-seed scores (seed -> value) on the seeds both have: ``delta = b - a``."""
    seeds = sorted(set(a) & set(b))
    xa = [float(a[s]) for s in seeds]
    xb = [float(b[s]) for s in seeds]
    diffs = [y - x for x, y in zip(xa, xb, strict=True)]
    return {
        "seeds": seeds,
        "n": len(seeds),
        "diffs": diffs,
        "mean_diff": statistics.fmean(diffs) if diffs else None,
        "std_diff": statistics.stdev(diffs) if len(diffs) > 1 else None,
        "ci95_t": paired_t_ci(diffs, confidence),
        "ci95_bootstrap": paired_bootstrap_ci(diffs, confidence),
        **win_counts(xa, xb),
    }


def t_interval(values: list[float], confidence: float = 0.95) -> list[float] | None:
    """Student t interval of a mean over seeds; None with fewer than 2 values."""
    n = len(values)
    if n < 2:
        return None
    m = statistics.fmean(values)
    h = t_critical(n - 1, confidence) * statistics.stdev(values) / math.sqrt(n)
    return [m - h, m + h]


def verdict(ci: list[float] | None, higher_is_better: bool = True) -> str:
    """better / worse / inconclusive for a delta (cell - reference) from its CI: only an interval that excludes 0
    gives a direction; a missing interval (one seed) is inconclusive."""
    if ci is None or ci[0] <= 0 <= ci[1]:
        return "inconclusive"
    up = ci[0] > 0
    return "better" if up == higher_is_better else "worse"


def paired_t_power(n: int, effect: float, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t test with ``n`` pairs at standardized effect ``mean_diff / sd_diff``
    (noncentral t; needs scipy)."""
    from scipy.stats import nct, t

    if n < 2:
        return 0.0
    df = n - 1
    crit = t.ppf(1 - alpha / 2, df)
    nc = abs(effect) * math.sqrt(n)
    p = float(nct.sf(crit, df, nc) + nct.cdf(-crit, df, nc))
    if math.isnan(p):  # scipy's nct fails far in the tail (large nc, few df): the normal shift is exact enough there
        from scipy.stats import norm

        p = float(norm.sf(crit - nc) + norm.cdf(-crit - nc))
    return p


def seeds_needed(
    mean_diff: float | None, sd_diff: float | None, alpha: float = 0.05, power: float = 0.8, max_n: int = 10_000
) -> int | None:
    """Smallest number of paired seeds whose two-sided paired t test (``alpha``) detects ``mean_diff`` with
    probability ``power`` if the seed-to-seed spread of the differences is ``sd_diff``; None when the difference is
    zero or the spread unknown, ``max_n + 1`` when even ``max_n`` seeds are not enough."""
    if not mean_diff or not sd_diff:
        return None
    effect = abs(mean_diff) / sd_diff

    def reached(n: int) -> bool:  # scipy's nct can give nan at extreme n or effect: not reached, look further
        return paired_t_power(n, effect, alpha) >= power

    hi = 2  # power grows with n: double until it is reached, then bisect
    while not reached(hi):
        if hi >= max_n:
            return max_n + 1
        hi = min(2 * hi, max_n)
    lo = hi // 2 if hi > 2 else 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if reached(mid) else (mid, hi)
    return hi

"""How big a sweep is and what it costs, said before anything is queued, and the bound a user raises on purpose.

A grid grows as the product of its axes: a 1,000-value axis was planned and queued one run at a time, gave no
answer in 150 s and left 681 queued runs and no worker. Now ``check_size`` refuses a grid of more than
``--max-runs`` runs (default ``MAX_RUNS``) from the axes alone, before a single run config is built, naming the
flag that raises it. An accepted grid's runs, tokens and the time they take here are printed before anything is
queued (``sweep``'s plan, ``commands/sweep.py``).
"""

from __future__ import annotations

import math

from backend.core.errors import ConfigError

MAX_RUNS = 100  # runs a sweep may queue unless raised on purpose (--max-runs; the Sweeps tab's field)


def check_max_runs(n: object) -> int | None:
    """``--max-runs``: a whole number >= 1, or None (a study that planned its own size)."""
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError("--max-runs", n, "a whole number of runs >= 1 (the most this sweep may queue)")
    return n


def check_size(values_per_axis: list[int], n_seeds: int, max_runs: int | None) -> int:
    """The runs the grid makes (cells x seeds); refused above ``max_runs`` before any run is planned."""
    cells = math.prod(values_per_axis)
    runs = cells * n_seeds
    if max_runs is not None and runs > max_runs:
        shape = " x ".join(map(str, values_per_axis))
        raise ConfigError(
            "--grid",
            f"{shape} values",
            f"the grid makes {runs:,} runs ({cells:,} cells x {n_seeds} seed{'s' if n_seeds > 1 else ''}), more than "
            f"--max-runs {max_runs:,}; nothing was planned or queued. Fewer values, or pass --max-runs {runs} to "
            "queue them on purpose",
        )
    return runs

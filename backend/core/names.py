"""The names a mistyped one is close to: one rule for every "did you mean" the lab says (runs, models, corpora)."""

from __future__ import annotations

import difflib


def close_names(spec: str, names: list[str], n: int = 4) -> list[str]:
    """The names ``spec`` is close to (difflib), the closest first; a name that contains it or that it contains
    counts too (``detour`` -> ``class-demo-detour``)."""
    near = difflib.get_close_matches(spec, names, n=n, cutoff=0.6)
    low = spec.lower()
    near += [c for c in names if c not in near and low and (low in c.lower() or c.lower() in low)]
    return near[:n]

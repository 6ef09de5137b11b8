"""What each similarity estimator needs of its samples, checked before any model loads, and the caution a biased
estimator's numbers carry when the samples are few for the hidden size.

Samples are the rows compared: one per text with pooling ``mean``, one per token with pooling ``token``. The
debiased CKA's unbiased HSIC estimator divides by ``n(n-3)`` and ``(n-1)(n-2)``: it needs ``n >= 4`` samples.
Biased linear CKA and Procrustes similarity are defined from ``n = 2``, but centring leaves ``n - 1`` directions,
so at small n they read high for *any* two models (2 texts: exactly 1.0 at every layer); the shuffled-inputs
baseline each heatmap carries shows how high, and ``few_samples_note`` says so in words.
"""

from __future__ import annotations

from backend.analysis.measures import MEASURES, MIN_SAMPLES
from backend.core.errors import DataError

MAX_D_PER_SAMPLE = 3.0  # the paper measured d = 768 on 500 texts (d/n = 1.5): beyond twice that, a biased note
WHY = {
    "debiased": "its unbiased HSIC estimator divides by n(n-3) and (n-1)(n-2)",
    "linear": "centring leaves no variance in a single sample",
    "procrustes": "centring leaves no variance in a single sample",
}


def check_measure(measure: str) -> str:
    if measure not in MEASURES:
        raise DataError(f"measure: got {measure!r}; use one of {', '.join(MEASURES)}")
    return measure


def check_n_texts(n: int | None, measure: str = "debiased", pooling: str = "mean", what: str = "n_texts") -> None:
    """Refuse a text count the estimator cannot use (None: every text of the file, counted later). With pooling
    ``mean`` a text is one sample; with ``token`` the samples are counted after encoding (``check_samples``)."""
    if n is None:
        return
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise DataError(f"{what}: got {n!r}; use a whole number >= {MIN_SAMPLES[measure]}")
    if pooling == "mean" and n < MIN_SAMPLES[measure]:
        raise DataError(
            f"{what}: got {n}; {measure} needs at least {MIN_SAMPLES[measure]} samples ({WHY[measure]}) and pooling "
            f"'mean' gives one sample per text: use {what} >= {MIN_SAMPLES[measure]} (the paper uses 500)"
        )


def check_samples(n: int, measure: str, unit: str, where: str = "") -> None:
    """Refuse fewer compared rows than ``measure`` needs (the text count was fine, the rows were not)."""
    if n < MIN_SAMPLES[measure]:
        raise DataError(
            f"{where}only {n} {unit} to compare: {measure} needs at least {MIN_SAMPLES[measure]} samples "
            f"({WHY[measure]}); use more texts" + (" or longer ones" if unit == "tokens" else "")
        )


def few_samples_note(n: int, hidden_sizes: list[int | None], measure: str, unit: str = "texts") -> list[str]:
    """A note when a biased measure (linear CKA, Procrustes) compares few samples for the widest hidden size."""
    d = max((h for h in hidden_sizes if h), default=0)
    if measure == "debiased" or not d or d / n <= MAX_D_PER_SAMPLE:
        return []
    return [
        f"only {n} {unit} for hidden size {d}: {measure} is biased towards 1 with fewer than "
        f"{d / MAX_D_PER_SAMPLE:.0f} {unit} here (the shuffled baseline shows how high unrelated inputs score); "
        "use measure 'debiased' or more texts before reading absolute values"
    ]


def check_distinct(texts: list[str], source: str) -> None:
    """Refuse texts with fewer distinct ones than any measure needs (whitespace normalised): identical texts give every
    model the same representation for each, the centred Gram matrices are zero and CKA is undefined at every layer
    (it came out as all null, exit 0)."""
    distinct = len({" ".join(t.split()) for t in texts})
    need = max(MIN_SAMPLES.values())  # the most any measure's estimator needs
    if distinct < need:
        raise DataError(
            f"texts '{source}': {len(texts)} text(s) but only {distinct} distinct; CKA compares how models tell texts "
            f"apart, so it needs at least {need} different texts (identical ones leave it undefined)"
        )

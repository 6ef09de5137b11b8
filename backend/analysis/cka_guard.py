"""How many texts linear CKA needs before its numbers mean anything.

CKA compares the centred Gram matrices of two models over ``n`` texts; centring leaves them rank ``n - 1`` at most.
With 2 texts both are rank 1 and CKA is exactly 1.0 at every layer whatever the models (``cka --n-texts 2`` printed a
perfect match); with 3 they are rank 2 and any two wide representations still score near 1. ``MIN_TEXTS = 4`` is the
smallest count at which two representations can disagree in more than two directions, so CKA can tell them apart;
it is a floor, not a recommendation. Above it, linear CKA is still biased towards 1 when the texts are few for the
hidden size (more dimensions than rows fit any two sample sets well): the paper measured d = 768 with 500 texts
(d/n = 1.5), so a result where d/n exceeds ``MAX_D_PER_TEXT`` (twice that) carries a note.
"""

from __future__ import annotations

from backend.core.errors import DataError

MIN_TEXTS = 4
MAX_D_PER_TEXT = 3.0


def check_n_texts(n: int | None, what: str = "n_texts") -> None:
    """Refuse fewer than ``MIN_TEXTS`` texts (None: every text of the file, counted later)."""
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < MIN_TEXTS):
        raise DataError(
            f"{what}: got {n!r}; use an integer >= {MIN_TEXTS}: with fewer texts linear CKA is 1.0 or close to it "
            "for any two models (the paper uses 500)"
        )


def few_texts_note(n: int, hidden_sizes: list[int | None]) -> list[str]:
    """A note when ``n`` texts are few for the widest hidden size (CKA then reads high for any two models)."""
    d = max((h for h in hidden_sizes if h), default=0)
    if not d or d / n <= MAX_D_PER_TEXT:
        return []
    return [
        f"only {n} texts for hidden size {d}: linear CKA is biased towards 1 with fewer than {d / MAX_D_PER_TEXT:.0f} "
        "texts here; compare layers within this result, and use more texts before reading absolute values"
    ]


def check_distinct(texts: list[str], source: str) -> None:
    """Refuse texts with fewer than ``MIN_TEXTS`` distinct ones (whitespace normalised): identical texts give every
    model the same representation for each, the centred Gram matrices are zero and CKA is undefined at every layer
    (it came out as all null, exit 0)."""
    distinct = len({" ".join(t.split()) for t in texts})
    if distinct < MIN_TEXTS:
        raise DataError(
            f"texts '{source}': {len(texts)} text(s) but only {distinct} distinct; CKA compares how models tell texts "
            f"apart, so it needs at least {MIN_TEXTS} different texts (identical ones leave it undefined)"
        )

"""The "unrelated" baseline of a similarity heatmap: the same measure on mismatched inputs, so a reader sees what two
representations of *different* texts score at this n (biased CKA and Procrustes read high there; debiased CKA ~0).

* pooling ``mean`` (one row per text): B's rows are permuted by a random cyclic derangement (seeded), so every text
  of A is paired with another text of B and all n rows are used.
* pooling ``token`` (rows are tokens, a different count per text): A's tokens of batch k are paired with B's tokens
  of batch k-1 (cyclically), each pair truncated to the shorter; texts are sorted by length, so little is cut.
  With a single batch there is nothing to mismatch: the baseline is skipped (a smaller batch size gives one).
Both keep memory bounded: the mean rows are n x d per layer (already cached), the token path holds one batch.
"""

from __future__ import annotations

import torch

from backend.analysis.cka import StreamingSimilarity


def cyclic_derangement(n: int, seed: int) -> torch.Tensor:
    """A random permutation without fixed points (n >= 2): each index goes to the next one in a random cycle."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    perm = torch.empty(n, dtype=torch.long)
    perm[order] = order.roll(-1)
    return perm


def _truncated(xs: list[torch.Tensor], ys: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    m = min(xs[0].shape[0], ys[0].shape[0])
    return [t[:m] for t in xs], [t[:m] for t in ys]


class ShuffledBaseline:
    """Fed the same batches as the real accumulator (``add``), it builds the mismatched pairing (``finish``)."""

    def __init__(self, pooling: str, pairs: str, seed: int):
        self.pooling, self.seed = pooling, seed
        self.acc = StreamingSimilarity(pairs=pairs)
        self._rows_a: list[list[torch.Tensor]] = []
        self._rows_b: list[list[torch.Tensor]] = []
        self._first_a: list[torch.Tensor] | None = None
        self._prev_b: list[torch.Tensor] | None = None
        self.batches = 0

    @property
    def how(self) -> str:
        if self.pooling == "mean":
            return (
                "texts shuffled between the models: text i of A against text pi(i) of B, pi a random derangement "
                f"(seed {self.seed})"
            )
        return (
            "tokens of batch k of A against those of batch k-1 of B (other texts, cyclically), truncated to the shorter"
        )

    def add(self, xs: list[torch.Tensor], ys: list[torch.Tensor]) -> None:
        self.batches += 1
        if self.pooling == "mean":
            self._rows_a.append(xs)
            self._rows_b.append(ys)
            return
        if self._prev_b is None:
            self._first_a = xs
        else:
            self.acc.update(*_truncated(xs, self._prev_b))
        self._prev_b = ys

    def finish(self) -> StreamingSimilarity | None:
        """The filled accumulator, or None when no mismatched pairing exists (one text; one token batch)."""
        if self.pooling == "mean":
            xs = [torch.cat(layer) for layer in zip(*self._rows_a)]
            ys = [torch.cat(layer) for layer in zip(*self._rows_b)]
            self._rows_a, self._rows_b = [], []
            if not xs or xs[0].shape[0] < 2:
                return None
            perm = cyclic_derangement(xs[0].shape[0], self.seed)
            self.acc.update(xs, [t[perm] for t in ys])
            return self.acc
        if self.batches < 2:
            return None
        self.acc.update(*_truncated(self._first_a, self._prev_b))
        self._first_a = self._prev_b = None
        return self.acc

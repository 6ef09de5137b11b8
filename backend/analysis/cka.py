"""Linear CKA (Kornblith et al. 2019) in float64.

Three implementations of the same number, for features X (n x d1) and Y (n x d2) of the same n inputs:

* :class:`StreamingCKA` — the one the app and the CLI use. It accumulates, batch by batch and always in
  float64, the feature-space statistics ``XᵀX``, ``YᵀY``, ``YᵀX`` and the column sums, for every layer
  of model A against every layer of model B, and centres at the end:
  ``Cxx = XᵀX - n μxμxᵀ``, ``Cyx = YᵀX - n μyμxᵀ``,
  ``CKA = ||Cyx||²_F / (||Cxx||_F ||Cyy||_F)``.
  Memory is independent of the number of rows (tokens or texts) streamed through it.
* :func:`linear_cka` — one shot, two-pass centring, feature space.
* :func:`gram_cka` — the n x n Gram-matrix formula ``<HKH, HLH> / (||HKH|| ||HLH||)`` with ``K = XXᵀ``,
  ``L = YYᵀ``: O(n²) memory, kept as the reference for tests and the benchmark.

Memory of :class:`StreamingCKA` (8 bytes per float64):

* ``pairs="all"`` (the layer x layer matrix): ``Σ_i Σ_j d_ai d_bj + Σ d_ai² + Σ d_bj²`` numbers, i.e.
  ``(La·Lb + La + Lb)·d²``. ModernBERT-base (23 indices of d=768): 575·768²·8 B ≈ 2.7 GB;
  a 4-layer tiny model (d=256): 35·256²·8 B ≈ 18 MB. Fine for d ≤ 1024 and ~25 layers on a workstation;
  use ``pairs="diagonal"`` when only the profile is needed: ``3·L·d²`` (≈ 0.3 GB for base).
* Until the statistics would be cheaper than the rows themselves, rows are kept (float64) instead of
  being folded into statistics: with ``pairs="all"`` that holds up to ``stats / (Σd_a + Σd_b)`` rows
  (≈ 9.6k rows for ModernBERT-base), so the paper's protocol (500 texts, mean pooling) never allocates
  the d² statistics and costs ~140 MB. The result is the same number either way (exact formulas,
  tested to 1e-10); peak memory is bounded by about twice the statistics whatever n is.

Numerical care: every row is shifted by a per-feature reference (the first batch's mean) before it is
accumulated. Centring is shift invariant, so the result is unchanged, but the one-pass formula
``XᵀX - n μμᵀ`` no longer cancels catastrophically when a feature's mean is large against its spread
(transformer residual streams have such features).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

F64 = torch.float64


def _as_2d64(x, name: str) -> torch.Tensor:
    t = torch.as_tensor(x)
    if t.dim() != 2:
        raise ValueError(f"{name}: expected a 2-D (n x d) array, got shape {tuple(t.shape)}")
    return t.to(F64)


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 and math.isfinite(den) else float("nan")


def linear_cka(x, y) -> float:
    """Linear CKA between ``x`` (n x d1) and ``y`` (n x d2), one shot, float64, two-pass centring.

    Returns NaN when either side has no variance (a constant feature matrix, or n < 2).
    """
    x, y = _as_2d64(x, "x"), _as_2d64(y, "y")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x and y must have the same number of rows, got {x.shape[0]} and {y.shape[0]}")
    x = x - x.mean(0, keepdim=True)
    y = y - y.mean(0, keepdim=True)
    num = torch.linalg.matrix_norm(y.T @ x).item() ** 2
    den = torch.linalg.matrix_norm(x.T @ x).item() * torch.linalg.matrix_norm(y.T @ y).item()
    return _ratio(num, den)


def _center_gram_(k: torch.Tensor) -> torch.Tensor:
    """In place ``HKH`` for a symmetric Gram matrix (H = I - 11ᵀ/n)."""
    m = k.mean(0)
    k -= m.unsqueeze(0)
    k -= m.unsqueeze(1)
    k += m.mean()
    return k


def gram_cka(x, y) -> float:
    """Reference: CKA through the n x n Gram matrices (O(n²) memory and O(n²d) time)."""
    x, y = _as_2d64(x, "x"), _as_2d64(y, "y")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x and y must have the same number of rows, got {x.shape[0]} and {y.shape[0]}")
    k = _center_gram_(x @ x.T).reshape(-1)
    ll = _center_gram_(y @ y.T).reshape(-1)
    num = torch.dot(k, ll).item()
    den = math.sqrt(torch.dot(k, k).item()) * math.sqrt(torch.dot(ll, ll).item())
    return _ratio(num, den)


class StreamingCKA:
    """Accumulates linear CKA between every layer of A and every layer of B, batch by batch, in float64.

    >>> acc = StreamingCKA()                # dimensions are taken from the first batch
    >>> for xs, ys in batches:              # xs: one (rows x d_ai) tensor per layer of A; ys: same for B
    ...     acc.update(xs, ys)              # any dtype (fp32, bf16, ...): converted to float64 here
    >>> acc.matrix()                        # (La x Lb) float64 tensor, NaN where undefined

    ``pairs="diagonal"`` only keeps the pairs (i, i) (requires La == Lb): the divergence profile at
    ``L`` instead of ``L²`` cross statistics. ``buffer_rows`` caps how many rows are kept before they
    are folded into the d² statistics ("auto": while the rows cost less memory than the statistics;
    0: fold at once). ``chunk_rows`` bounds the float64 working copy of a batch (a persistent
    ``chunk_rows x d`` buffer per layer once the statistics are in use).
    """

    def __init__(
        self,
        dims_a: Sequence[int] | None = None,
        dims_b: Sequence[int] | None = None,
        *,
        pairs: str = "all",
        buffer_rows: int | str = "auto",
        chunk_rows: int = 2048,
    ):
        if pairs not in ("all", "diagonal"):
            raise ValueError(f"pairs: got {pairs!r}; use 'all' or 'diagonal'")
        if not (buffer_rows == "auto" or (isinstance(buffer_rows, int) and buffer_rows >= 0)):
            raise ValueError(f"buffer_rows: got {buffer_rows!r}; use 'auto' or an integer >= 0")
        self.pairs = pairs
        self.chunk_rows = max(1, int(chunk_rows))
        self._buffer_rows_opt = buffer_rows
        self.dims_a: list[int] | None = None
        self.dims_b: list[int] | None = None
        self.n = 0
        self._shift_a: list[torch.Tensor] | None = None
        self._shift_b: list[torch.Tensor] | None = None
        self._buf_a: list[list[torch.Tensor]] = []
        self._buf_b: list[list[torch.Tensor]] = []
        self._stats = False
        if dims_a is not None and dims_b is not None:
            self._set_dims(list(dims_a), list(dims_b))

    # ------------------------------------------------------------------ setup
    def _set_dims(self, dims_a: list[int], dims_b: list[int]) -> None:
        if not dims_a or not dims_b:
            raise ValueError("StreamingCKA needs at least one layer on each side")
        if self.pairs == "diagonal" and len(dims_a) != len(dims_b):
            raise ValueError(f"pairs='diagonal' needs the same number of layers, got {len(dims_a)} and {len(dims_b)}")
        self.dims_a, self.dims_b = [int(d) for d in dims_a], [int(d) for d in dims_b]
        self._buf_a = [[] for _ in dims_a]
        self._buf_b = [[] for _ in dims_b]
        if self._buffer_rows_opt == "auto":
            self.buffer_rows = self.stats_numbers() // (sum(self.dims_a) + sum(self.dims_b))
        else:
            self.buffer_rows = int(self._buffer_rows_opt)

    @property
    def layers_a(self) -> int:
        return len(self.dims_a or [])

    @property
    def layers_b(self) -> int:
        return len(self.dims_b or [])

    def _pair_list(self) -> list[tuple[int, int]]:
        if self.pairs == "diagonal":
            return [(i, i) for i in range(self.layers_a)]
        return [(i, j) for i in range(self.layers_a) for j in range(self.layers_b)]

    def stats_numbers(self) -> int:
        """How many float64 numbers the d² statistics take once allocated."""
        da, db = self.dims_a or [], self.dims_b or []
        cross = sum(da[i] * db[j] for i, j in self._pair_list())
        return cross + sum((d + 1) ** 2 for d in da) + sum((d + 1) ** 2 for d in db)

    def memory_bytes(self) -> int:
        """Bytes held now (statistics and/or buffered rows), not counting transient working copies."""
        if self._stats:
            work = self._work_rows * (sum(self.dims_a) + sum(self.dims_b) + self.layers_a + self.layers_b)
            return 8 * (self.stats_numbers() + work)
        rows = sum(t.numel() for layer in self._buf_a + self._buf_b for t in layer)
        return 8 * rows

    # ------------------------------------------------------------------ update
    def update(self, xs: Sequence[torch.Tensor] | torch.Tensor, ys: Sequence[torch.Tensor] | torch.Tensor) -> None:
        """Add a batch: ``xs[i]`` is (rows x d_ai) for layer i of A, ``ys[j]`` (rows x d_bj) for layer j of B.

        Every tensor holds the same ``rows`` inputs in the same order. A single tensor counts as one layer.
        """
        xs = [xs] if isinstance(xs, torch.Tensor) else list(xs)
        ys = [ys] if isinstance(ys, torch.Tensor) else list(ys)
        for name, ts in (("xs", xs), ("ys", ys)):
            for t in ts:
                if t.dim() != 2:
                    raise ValueError(f"{name}: each layer must be a 2-D (rows x d) tensor, got {tuple(t.shape)}")
        if self.dims_a is None:
            self._set_dims([t.shape[1] for t in xs], [t.shape[1] for t in ys])
        if [t.shape[1] for t in xs] != self.dims_a or [t.shape[1] for t in ys] != self.dims_b:
            raise ValueError(
                f"layer widths changed: expected {self.dims_a} / {self.dims_b}, "
                f"got {[t.shape[1] for t in xs]} / {[t.shape[1] for t in ys]}"
            )
        rows = {t.shape[0] for t in xs + ys}
        if len(rows) != 1:
            raise ValueError(f"every layer of A and B must have the same number of rows in a batch, got {rows}")
        m = rows.pop()
        if m == 0:
            return
        if self._shift_a is None:
            self._shift_a = [t[: self.chunk_rows].to(F64).mean(0) for t in xs]
            self._shift_b = [t[: self.chunk_rows].to(F64).mean(0) for t in ys]
        if not self._stats and self._buffered_rows() + m <= self.buffer_rows:
            for i, t in enumerate(xs):
                self._buf_a[i].append(t.to(F64) - self._shift_a[i])
            for j, t in enumerate(ys):
                self._buf_b[j].append(t.to(F64) - self._shift_b[j])
            self.n += m
            return
        if not self._stats:
            self._allocate()
        self._accumulate(xs, ys, shifted=False)
        self.n += m

    def _buffered_rows(self) -> int:
        return sum(t.shape[0] for t in self._buf_a[0]) if self._buf_a else 0

    def _allocate(self) -> None:
        """Switch from kept rows to d² statistics, folding the kept rows in (and freeing them).

        Statistics live in augmented form: the work rows carry a trailing column of ones, so one GEMM
        gives ``[X 1]ᵀ[X 1]`` = XᵀX, the column sums (last row) and n (corner) together."""
        da, db = self.dims_a, self.dims_b
        self._xx = [torch.zeros(d + 1, d + 1, dtype=F64) for d in da]
        self._yy = [torch.zeros(d + 1, d + 1, dtype=F64) for d in db]
        self._yx = {(i, j): torch.zeros(db[j], da[i], dtype=F64) for i, j in self._pair_list()}
        self._work_rows = 0
        self._stats = True
        buf_a, buf_b = self._buf_a, self._buf_b
        self._buf_a = [[] for _ in da]
        self._buf_b = [[] for _ in db]
        while buf_a[0]:
            self._accumulate([layer.pop(0) for layer in buf_a], [layer.pop(0) for layer in buf_b], shifted=True)

    def _ensure_work(self, rows: int) -> None:
        """Persistent float64 work buffers (one chunk per layer, plus the ones column), grown to at most
        ``chunk_rows`` rows: no allocation per batch, so memory stays flat however many batches come."""
        rows = min(rows, self.chunk_rows)
        if rows > self._work_rows:
            self._work_a = [torch.ones(rows, d + 1, dtype=F64) for d in self.dims_a]
            self._work_b = [torch.ones(rows, d + 1, dtype=F64) for d in self.dims_b]
            self._work_rows = rows

    def _accumulate(self, xs: list[torch.Tensor], ys: list[torch.Tensor], *, shifted: bool) -> None:
        # Few kernels per chunk and no allocation: on a busy machine each parallel kernel pays a thread
        # synchronisation, and freed temporaries stay in the process (allocator retention).
        m = xs[0].shape[0]
        self._ensure_work(m)
        for s in range(0, m, self.chunk_rows):
            e = min(m, s + self.chunk_rows)
            r = e - s
            for side, ts, shifts in ((self._work_a, xs, self._shift_a), (self._work_b, ys, self._shift_b)):
                for w, t, c in zip(side, ts, shifts):
                    w[:r, :-1].copy_(t[s:e])  # converts in place (torch.sub(out=) would allocate a copy)
                    if not shifted:
                        w[:r, :-1].sub_(c)
            xa = [w[:r] for w in self._work_a]
            yb = [w[:r] for w in self._work_b]
            for i, x in enumerate(xa):
                self._xx[i].addmm_(x.T, x)
            for j, y in enumerate(yb):
                self._yy[j].addmm_(y.T, y)
            for (i, j), c in self._yx.items():
                c.addmm_(yb[j][:, :-1].T, xa[i][:, :-1])

    # ------------------------------------------------------------------ results
    def matrix(self) -> torch.Tensor:
        """CKA for every (layer of A, layer of B) pair: a (La x Lb) float64 tensor.

        NaN where undefined (no variance, n < 2) and, with ``pairs='diagonal'``, off the diagonal.
        The accumulator can keep receiving batches after this call.
        """
        if self.dims_a is None:
            raise ValueError("StreamingCKA: no data yet")
        out = torch.full((self.layers_a, self.layers_b), float("nan"), dtype=F64)
        if self.n < 2:
            return out
        if self._stats:
            self._matrix_from_stats(out)
        else:
            self._matrix_from_rows(out)
        return out

    def diagonal(self) -> torch.Tensor:
        """CKA(layer i of A, layer i of B) for i < min(La, Lb)."""
        return torch.diagonal(self.matrix()).clone()

    def _matrix_from_stats(self, out: torch.Tensor) -> None:
        n = self.n
        mu_a = [c[-1, :-1] / n for c in self._xx]
        mu_b = [c[-1, :-1] / n for c in self._yy]
        nxx = [torch.linalg.matrix_norm(c[:-1, :-1] - n * torch.outer(m, m)).item() for c, m in zip(self._xx, mu_a)]
        nyy = [torch.linalg.matrix_norm(c[:-1, :-1] - n * torch.outer(m, m)).item() for c, m in zip(self._yy, mu_b)]
        for (i, j), c in self._yx.items():
            num = torch.linalg.matrix_norm(c - n * torch.outer(mu_b[j], mu_a[i])).item() ** 2
            out[i, j] = _ratio(num, nxx[i] * nyy[j])

    def _matrix_from_rows(self, out: torch.Tensor) -> None:
        xa = [torch.cat(layer) for layer in self._buf_a]
        yb = [torch.cat(layer) for layer in self._buf_b]
        xa = [x - x.mean(0, keepdim=True) for x in xa]
        yb = [y - y.mean(0, keepdim=True) for y in yb]
        if self.n <= min(self.dims_a + self.dims_b):
            # Fewer rows than features: the n x n (dual) form is cheaper and takes no more memory.
            ka = [(x @ x.T).reshape(-1) for x in xa]
            kb = [(y @ y.T).reshape(-1) for y in yb]
            na = [torch.linalg.vector_norm(k).item() for k in ka]
            nb = [torch.linalg.vector_norm(k).item() for k in kb]
            for i, j in self._pair_list():
                out[i, j] = _ratio(torch.dot(ka[i], kb[j]).item(), na[i] * nb[j])
        else:
            na = [torch.linalg.matrix_norm(x.T @ x).item() for x in xa]
            nb = [torch.linalg.matrix_norm(y.T @ y).item() for y in yb]
            for i, j in self._pair_list():
                num = torch.linalg.matrix_norm(yb[j].T @ xa[i]).item() ** 2
                out[i, j] = _ratio(num, na[i] * nb[j])

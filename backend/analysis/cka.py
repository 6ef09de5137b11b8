"""Representation similarity between two sets of features of the same n inputs, in float64: debiased linear CKA
(the default), the published (biased) linear CKA, and orthogonal Procrustes similarity.

Measures (``MEASURES``; X is n x d1, Y is n x d2, rows = the same n samples: texts or tokens):

* ``debiased`` — linear CKA with the unbiased HSIC estimator (Song et al. 2012) in place of the biased one, as
  Nguyen et al. (2021) use it for CKA; recommended when samples are few by Murphy et al. (2024). The biased
  estimator is pulled towards 1 when n is small next to the width: for two *independent* random feature sets at
  n = 50, d = 256 biased CKA is ~0.8, the debiased one ~0 (tested). Needs n >= 4 samples (the estimator divides
  by n(n-3) and (n-1)(n-2)). Values near 0 can be slightly negative (it is an unbiased estimate of a
  non-negative number).
* ``linear`` — linear CKA as published (Kornblith et al. 2019) and as the detour paper measured it:
  ``||YcᵀXc||²_F / (||XcᵀXc||_F ||YcᵀYc||_F)``. Needs n >= 2.
* ``procrustes`` — the second family, for cross-checking: orthogonal Procrustes similarity
  ``||XcᵀYc||_* / (||Xc||_F ||Yc||_F)`` (nuclear norm), i.e. ``1 - d²/2`` where ``d²`` is the Procrustes distance
  of Ding et al. (2021) between the centred, unit-Frobenius-norm representations (``min_Q ||X̂ - ŶQ||²_F`` over
  orthogonal Q). Invariant to rotations, isotropic scaling and translation, not to other linear maps (unlike CKA
  it weighs every direction by its singular value, not its square). Biased upwards at small n, as biased CKA is.

Debiased CKA in terms of centred rows (``a_r = ||x̂_r||²``, ``b_r = ||ŷ_r||²``, ``A = Σ a_r``, ``B = Σ b_r``,
``S_ab = Σ a_r b_r``): the unbiased HSIC of the linear kernels is translation invariant, so it can be evaluated
on centred features, where ``K̃1 = -a`` (K̃: the Gram matrix with its diagonal zeroed) and it reduces to

    n(n-3) · HSIC_u(K, L) = ||ŶᵀX̂||²_F + A·B / ((n-1)(n-2)) - n/(n-2) · S_ab

and ``CKA_debiased = HSIC_u(K, L) / sqrt(HSIC_u(K, K) · HSIC_u(L, L))`` (NaN where a self term is not positive).

Three implementations, tested to agree to 1e-10:

* :class:`StreamingSimilarity` — the one the app and the CLI use. Every row (shifted by a
  per-feature reference, see below) is augmented to ``[x, 1, ||x||²]`` and it accumulates, batch by batch and
  in float64, ``[X 1 q]ᵀ[X 1 q]`` per layer and ``[Y 1 p]ᵀ[X 1 q]`` per pair of layers: XᵀX, YᵀX, the column
  sums, n, and the row-norm moments ``Σ q x``, ``Σ p x``, ``Σ q y``, ``Σ q p``, ``Σ q²`` the unbiased estimator
  needs (its "Gram diagonal" terms). ``a_r = q_r - 2 x_rᵀμ + ||μ||²`` expands ``S_ab`` and ``Σ a_r²`` into
  those moments, so every measure comes from the same statistics at the end. Memory is independent of n.
* :func:`similarity` — one shot, two-pass centring, feature space (``linear_cka``, ``debiased_cka``,
  ``procrustes_similarity`` are its three measures).
* :func:`gram_similarity` — the n x n Gram-matrix formulas of both CKAs (the debiased one exactly as Song et
  al. write it, on uncentred Gram matrices): O(n²) memory, the reference for tests and the benchmark
  (``gram_cka`` = the biased one). Procrustes is checked against scipy's ``orthogonal_procrustes``.

Memory of :class:`StreamingSimilarity` (8 bytes per float64):

* ``pairs="all"`` (the layer x layer matrix): ``Σ_i Σ_j (d_ai+2)(d_bj+2) + Σ (d_ai+2)² + Σ (d_bj+2)²`` numbers,
  i.e. about ``(La·Lb + La + Lb)·d²``. ModernBERT-base (23 indices of d=768): 575·768²·8 B ≈ 2.7 GB;
  a 4-layer tiny model (d=256): 35·256²·8 B ≈ 18 MB. Fine for d ≤ 1024 and ~25 layers on a workstation;
  use ``pairs="diagonal"`` when only the profile is needed: ``3·L·d²`` (≈ 0.3 GB for base). The debiased
  estimator's extra terms add two rows and two columns to each matrix: ~0.5% at d = 768.
* Until the statistics would be cheaper than the rows themselves, rows are kept (float64) instead of
  being folded into statistics: with ``pairs="all"`` that holds up to ``stats / (Σd_a + Σd_b)`` rows
  (≈ 9.6k rows for ModernBERT-base), so the paper's protocol (500 texts, mean pooling) never allocates
  the d² statistics and costs ~140 MB. The result is the same number either way (exact formulas,
  tested to 1e-10); peak memory is bounded by about twice the statistics whatever n is.
* ``procrustes`` needs one SVD of the (d_b x d_a) cross-covariance per pair at the end (or, with kept rows and
  n < d, of an n x n matrix): ~0.1 s per pair at d = 768, about a minute for ModernBERT-base's 529 pairs.

Numerical care: every row is shifted by a per-feature reference (the first batch's mean) before it is
accumulated. All three measures are shift invariant, so the result is unchanged, but the one-pass formula
``XᵀX - n μμᵀ`` (and the row-norm expansion) no longer cancels catastrophically when a feature's mean is large
against its spread (transformer residual streams have such features).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from backend.analysis.measures import DEFAULT_MEASURE, MEASURES, MIN_SAMPLES

F64 = torch.float64
__all__ = ["DEFAULT_MEASURE", "MEASURES", "MIN_SAMPLES", "StreamingSimilarity", "similarity", "gram_similarity"]


def check_measure(measure: str) -> str:
    if measure not in MEASURES:
        raise ValueError(f"measure: got {measure!r}; use one of {', '.join(MEASURES)}")
    return measure


def _as_2d64(x, name: str) -> torch.Tensor:
    t = torch.as_tensor(x)
    if t.dim() != 2:
        raise ValueError(f"{name}: expected a 2-D (n x d) array, got shape {tuple(t.shape)}")
    return t.to(F64)


def _paired(x, y, measure: str) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``x`` and ``y`` as float64 n x d arrays of the same n samples; None where n is too few for ``measure``."""
    x, y = _as_2d64(x, "x"), _as_2d64(y, "y")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x and y must have the same number of rows, got {x.shape[0]} and {y.shape[0]}")
    return None if x.shape[0] < MIN_SAMPLES[measure] else (x, y)


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 and math.isfinite(den) else float("nan")


def _hsic_u(t: float, s: float, a: float, b: float, n: int) -> float:
    """n(n-3)·HSIC_u from centred-row summaries: ``t = ||ŶᵀX̂||²``, ``s = Σ a_r b_r``, ``a = Σ a_r``, ``b = Σ b_r``."""
    return t + a * b / ((n - 1) * (n - 2)) - n * s / (n - 2)


def _combine(measure: str, n: int, pair: dict, lx: dict, ly: dict) -> float:
    """One similarity from centred summaries. Layer dicts: ``c2 = ||X̂ᵀX̂||²_F``, ``tr = Σ a_r``, ``s = Σ a_r²``;
    pair dict: ``t = ||ŶᵀX̂||²_F``, ``s = Σ a_r b_r`` and (procrustes) ``nuc = ||ŶᵀX̂||_*``."""
    if n < MIN_SAMPLES[measure]:
        return float("nan")
    if measure == "linear":
        return _ratio(pair["t"], math.sqrt(max(lx["c2"], 0.0)) * math.sqrt(max(ly["c2"], 0.0)))
    if measure == "procrustes":
        return _ratio(pair["nuc"], math.sqrt(max(lx["tr"], 0.0)) * math.sqrt(max(ly["tr"], 0.0)))
    hx = _hsic_u(lx["c2"], lx["s"], lx["tr"], lx["tr"], n)
    hy = _hsic_u(ly["c2"], ly["s"], ly["tr"], ly["tr"], n)
    if not (hx > 0 and hy > 0):
        return float("nan")
    return _hsic_u(pair["t"], pair["s"], lx["tr"], ly["tr"], n) / math.sqrt(hx * hy)


def _nuclear(m: torch.Tensor) -> float:
    return torch.linalg.svdvals(m).sum().item()


def _centred_summaries(xc: torch.Tensor) -> dict:
    """Layer summary of centred rows: ``||X̂ᵀX̂||²_F`` (through the n x n form when n < d), ``Σ a_r``, ``Σ a_r²``
    and the row norms ``a`` themselves (for the pairs' ``S_ab``)."""
    a = (xc * xc).sum(1)
    gram = xc @ xc.T if xc.shape[0] < xc.shape[1] else xc.T @ xc  # same Frobenius norm
    return {
        "c2": torch.linalg.matrix_norm(gram).item() ** 2,
        "tr": a.sum().item(),
        "s": torch.dot(a, a).item(),
        "_a": a,
    }


def similarity(x, y, measure: str = DEFAULT_MEASURE) -> float:
    """``measure`` between ``x`` (n x d1) and ``y`` (n x d2), one shot, float64, two-pass centring.

    NaN when undefined: a side without variance, or fewer samples than the measure needs (``MIN_SAMPLES``).
    """
    check_measure(measure)
    if (xy := _paired(x, y, measure)) is None:
        return float("nan")
    x, y = xy
    n = x.shape[0]
    x = x - x.mean(0, keepdim=True)
    y = y - y.mean(0, keepdim=True)
    lx, ly = _centred_summaries(x), _centred_summaries(y)
    cross = y.T @ x
    pair = {"t": torch.linalg.matrix_norm(cross).item() ** 2, "s": torch.dot(lx["_a"], ly["_a"]).item()}
    if measure == "procrustes":
        pair["nuc"] = _nuclear(cross)
    return _combine(measure, n, pair, lx, ly)


def linear_cka(x, y) -> float:
    """Linear CKA as published (biased): ``similarity(x, y, "linear")``."""
    return similarity(x, y, "linear")


def debiased_cka(x, y) -> float:
    """Debiased linear CKA (unbiased HSIC): ``similarity(x, y, "debiased")``."""
    return similarity(x, y, "debiased")


def procrustes_similarity(x, y) -> float:
    """Orthogonal Procrustes similarity ``1 - d²/2``: ``similarity(x, y, "procrustes")``."""
    return similarity(x, y, "procrustes")


def _center_gram_(k: torch.Tensor) -> torch.Tensor:
    """In place ``HKH`` for a symmetric Gram matrix (H = I - 11ᵀ/n)."""
    m = k.mean(0)
    k -= m.unsqueeze(0)
    k -= m.unsqueeze(1)
    k += m.mean()
    return k


def hsic_unbiased_gram(k: torch.Tensor, ll: torch.Tensor) -> float:
    """Song et al. (2012), eq. 5, on the raw (uncentred) Gram matrices, O(n²):
    ``[tr(K̃L̃) + 1ᵀK̃1·1ᵀL̃1/((n-1)(n-2)) - 2/(n-2)·1ᵀK̃L̃1] / (n(n-3))``, K̃ = K with a zero diagonal."""
    k, ll = k.clone(), ll.clone()
    k.fill_diagonal_(0)
    ll.fill_diagonal_(0)
    return _hsic_u_zero_diagonal(k, ll)


def _hsic_u_zero_diagonal(k: torch.Tensor, ll: torch.Tensor) -> float:
    """:func:`hsic_unbiased_gram` for Gram matrices whose diagonal is already zero (no n x n temporaries)."""
    n = k.shape[0]
    k1, l1 = k.sum(1), ll.sum(1)
    val = torch.dot(k.reshape(-1), ll.reshape(-1)) + k1.sum() * l1.sum() / ((n - 1) * (n - 2))
    return (val - 2.0 / (n - 2) * torch.dot(k1, l1)).item() / (n * (n - 3))


def gram_similarity(x, y, measure: str = "linear") -> float:
    """Reference: ``linear`` or ``debiased`` CKA through the n x n Gram matrices (O(n²) memory, O(n²d) time).
    ``debiased`` uses :func:`hsic_unbiased_gram` on the uncentred Gram matrices (nothing shared with the
    feature-space code). (The tests check ``procrustes`` against scipy's ``orthogonal_procrustes``.)"""
    if measure not in ("linear", "debiased"):
        raise ValueError(f"gram_similarity: measure {measure!r}; use 'linear' or 'debiased'")
    if (xy := _paired(x, y, measure)) is None:
        return float("nan")
    x, y = xy
    if measure == "debiased":
        k, ll = x @ x.T, y @ y.T  # two n x n matrices, as for the biased form
        k.fill_diagonal_(0)
        ll.fill_diagonal_(0)
        hxy, hxx, hyy = (_hsic_u_zero_diagonal(*p) for p in ((k, ll), (k, k), (ll, ll)))
        return hxy / math.sqrt(hxx * hyy) if hxx > 0 and hyy > 0 else float("nan")
    k = _center_gram_(x @ x.T).reshape(-1)
    ll = _center_gram_(y @ y.T).reshape(-1)
    num = torch.dot(k, ll).item()
    den = math.sqrt(torch.dot(k, k).item()) * math.sqrt(torch.dot(ll, ll).item())
    return _ratio(num, den)


def gram_cka(x, y) -> float:
    """Reference: biased linear CKA through the n x n Gram matrices."""
    return gram_similarity(x, y, "linear")


class StreamingSimilarity:
    """Accumulates, batch by batch and in float64, what every measure needs between every layer of A and every
    layer of B; :meth:`matrix` gives any of ``MEASURES`` from the same statistics.

    >>> acc = StreamingSimilarity()         # dimensions are taken from the first batch
    >>> for xs, ys in batches:              # xs: one (rows x d_ai) tensor per layer of A; ys: same for B
    ...     acc.update(xs, ys)              # any dtype (fp32, bf16, ...): converted to float64 here
    >>> acc.matrix("debiased")              # (La x Lb) float64 tensor, NaN where undefined

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
            raise ValueError("StreamingSimilarity needs at least one layer on each side")
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
        """How many float64 numbers the d² statistics take once allocated (augmented: ``[x, 1, ||x||²]``)."""
        da, db = self.dims_a or [], self.dims_b or []
        cross = sum((da[i] + 2) * (db[j] + 2) for i, j in self._pair_list())
        return cross + sum((d + 2) ** 2 for d in da) + sum((d + 2) ** 2 for d in db)

    def memory_bytes(self) -> int:
        """Bytes held now (statistics and/or buffered rows), not counting transient working copies."""
        if self._stats:
            work = self._work_rows * (sum(self.dims_a) + sum(self.dims_b) + 2 * (self.layers_a + self.layers_b))
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

        Statistics live in augmented form: the work rows are ``[x, 1, ||x||²]``, so one GEMM gives XᵀX, the
        column sums, n, ``Σ q x``, ``Σ q`` and ``Σ q²`` together (and, across A and B, YᵀX and its margins)."""
        da, db = self.dims_a, self.dims_b
        self._xx = [torch.zeros(d + 2, d + 2, dtype=F64) for d in da]
        self._yy = [torch.zeros(d + 2, d + 2, dtype=F64) for d in db]
        self._yx = {(i, j): torch.zeros(db[j] + 2, da[i] + 2, dtype=F64) for i, j in self._pair_list()}
        self._work_rows = 0
        self._stats = True
        buf_a, buf_b = self._buf_a, self._buf_b
        self._buf_a = [[] for _ in da]
        self._buf_b = [[] for _ in db]
        while buf_a[0]:
            self._accumulate([layer.pop(0) for layer in buf_a], [layer.pop(0) for layer in buf_b], shifted=True)

    def _ensure_work(self, rows: int) -> None:
        """Persistent float64 work buffers (one chunk per layer, plus the ones and norm columns), grown to at
        most ``chunk_rows`` rows: no allocation per batch, so memory stays flat however many batches come."""
        rows = min(rows, self.chunk_rows)
        if rows > self._work_rows:
            self._work_a = [torch.ones(rows, d + 2, dtype=F64) for d in self.dims_a]
            self._work_b = [torch.ones(rows, d + 2, dtype=F64) for d in self.dims_b]
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
                    w[:r, :-2].copy_(t[s:e])  # converts in place (torch.sub(out=) would allocate a copy)
                    if not shifted:
                        w[:r, :-2].sub_(c)
                    torch.linalg.vector_norm(w[:r, :-2], dim=1, out=w[:r, -1]).square_()
            xa = [w[:r] for w in self._work_a]
            yb = [w[:r] for w in self._work_b]
            for i, x in enumerate(xa):
                self._xx[i].addmm_(x.T, x)
            for j, y in enumerate(yb):
                self._yy[j].addmm_(y.T, y)
            for (i, j), c in self._yx.items():
                c.addmm_(yb[j].T, xa[i])

    # ------------------------------------------------------------------ results
    def matrix(self, measure: str = DEFAULT_MEASURE) -> torch.Tensor:
        """``measure`` for every (layer of A, layer of B) pair: a (La x Lb) float64 tensor.

        NaN where undefined (no variance, fewer samples than ``MIN_SAMPLES[measure]``) and, with
        ``pairs='diagonal'``, off the diagonal. The accumulator can keep receiving batches after this call.
        """
        check_measure(measure)
        if self.dims_a is None:
            raise ValueError("StreamingSimilarity: no data yet")
        out = torch.full((self.layers_a, self.layers_b), float("nan"), dtype=F64)
        if self.n < MIN_SAMPLES[measure]:
            return out
        layers_a, layers_b, pairs = (
            self._summaries_from_stats(measure) if self._stats else self._summaries_from_rows(measure)
        )
        for (i, j), p in pairs.items():
            out[i, j] = _combine(measure, self.n, p, layers_a[i], layers_b[j])
        return out

    def diagonal(self, measure: str = DEFAULT_MEASURE) -> torch.Tensor:
        """``measure``(layer i of A, layer i of B) for i < min(La, Lb)."""
        return torch.diagonal(self.matrix(measure)).clone()

    @staticmethod
    def _layer_from_stats(c: torch.Tensor, n: int) -> tuple[dict, dict]:
        """Centred layer summary from augmented statistics ``[X 1 q]ᵀ[X 1 q]``, and the pieces a pair needs."""
        d = c.shape[0] - 2
        mu = c[d, :d] / n
        m = torch.dot(mu, mu).item()
        xx = c[:d, :d]
        sum_q, sum_q2, qx = c[d, d + 1].item(), c[d + 1, d + 1].item(), c[d + 1, :d]
        cxx = xx - n * torch.outer(mu, mu)
        s = sum_q2 - 4 * torch.dot(mu, qx).item() + 4 * torch.dot(mu, xx @ mu).item() + 2 * m * sum_q - 3 * n * m * m
        return {"c2": torch.linalg.matrix_norm(cxx).item() ** 2, "tr": torch.trace(cxx).item(), "s": s}, {
            "mu": mu, "m": m, "sum_q": sum_q}  # fmt: skip

    def _summaries_from_stats(self, measure: str):
        n = self.n
        la, pa = zip(*(self._layer_from_stats(c, n) for c in self._xx))
        lb, pb = zip(*(self._layer_from_stats(c, n) for c in self._yy))
        pairs = {}
        for (i, j), c in self._yx.items():
            da, db = self.dims_a[i], self.dims_b[j]
            mu, nu = pa[i]["mu"], pb[j]["mu"]
            yx = c[:db, :da]
            cyx = yx - n * torch.outer(nu, mu)
            # S_ab = Σ a_r b_r with a_r = q_r - 2 x_rᵀμ + ||μ||², b_r = p_r - 2 y_rᵀν + ||ν||² (module docstring)
            sum_qp, qy, px = c[db + 1, da + 1].item(), c[:db, da + 1], c[db + 1, :da]
            m, w = pa[i]["m"], pb[j]["m"]
            s = sum_qp - 2 * torch.dot(nu, qy).item() - 2 * torch.dot(mu, px).item()
            s += 4 * torch.dot(nu, yx @ mu).item() + w * pa[i]["sum_q"] + m * pb[j]["sum_q"] - 3 * n * m * w
            p = {"t": torch.linalg.matrix_norm(cyx).item() ** 2, "s": s}
            if measure == "procrustes":
                p["nuc"] = _nuclear(cyx)
            pairs[(i, j)] = p
        return la, lb, pairs

    def _summaries_from_rows(self, measure: str):
        xa = [torch.cat(layer) for layer in self._buf_a]
        yb = [torch.cat(layer) for layer in self._buf_b]
        xa = [x - x.mean(0, keepdim=True) for x in xa]
        yb = [y - y.mean(0, keepdim=True) for y in yb]
        la = [_centred_summaries(x) for x in xa]
        lb = [_centred_summaries(y) for y in yb]
        pairs = {}
        if self.n <= min(self.dims_a + self.dims_b):
            # Fewer rows than features: the n x n (dual) forms are cheaper and take no more memory.
            ka = [(x @ x.T).reshape(-1) for x in xa]
            kb = [(y @ y.T).reshape(-1) for y in yb]
            if measure == "procrustes":  # ||X̂ᵀŶ||_* = ||R_x R_yᵀ||_* with X̂ᵀ = Q_x R_x (n x n R)
                ra = [torch.linalg.qr(x.T, mode="r").R for x in xa]
                rb = [torch.linalg.qr(y.T, mode="r").R for y in yb]
            for i, j in self._pair_list():
                p = {"t": torch.dot(ka[i], kb[j]).item(), "s": torch.dot(la[i]["_a"], lb[j]["_a"]).item()}
                if measure == "procrustes":
                    p["nuc"] = _nuclear(ra[i] @ rb[j].T)
                pairs[(i, j)] = p
        else:
            for i, j in self._pair_list():
                cross = yb[j].T @ xa[i]
                p = {"t": torch.linalg.matrix_norm(cross).item() ** 2, "s": torch.dot(la[i]["_a"], lb[j]["_a"]).item()}
                if measure == "procrustes":
                    p["nuc"] = _nuclear(cross)
                pairs[(i, j)] = p
        return la, lb, pairs

"""Representation analysis the app and the CLI call: similarity between two encoders (with a seed-noise control
and a shuffled-inputs baseline), its trajectory over a run's checkpoints, per-layer weight change. Every function
returns a JSON-ready dict naming the measure, the number of samples (texts or tokens) and the hidden sizes.

Measures (:mod:`backend.analysis.cka`): ``debiased`` linear CKA (the default: unbiased at small n), ``linear``
(the published, biased CKA: the paper's numbers) and ``procrustes`` (a second family, for cross-checking).
Protocol (paper, §3.4): linear CKA in float64, 500 held-out texts, max length 512, attention-masked mean
pooling per text, 3 sampling seeds; divergence = 1 - similarity; seed-noise ratio
``r_l = (1 - CKA(detour_l, mlm_seedA_l)) / (1 - CKA(mlm_seedB_l, mlm_seedA_l))``.
Layer indices: see :mod:`backend.analysis.hidden_states` (index 0 = embedding output, i = output of block i-1).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from backend.analysis.baseline import ShuffledBaseline
from backend.analysis.cka import DEFAULT_MEASURE, MEASURES, MIN_SAMPLES, StreamingSimilarity
from backend.analysis.cka_guard import check_distinct, check_measure, check_n_texts, check_samples, few_samples_note
from backend.analysis.hidden_states import (
    LAYER_CONVENTION,
    POOLINGS,
    check_same_tokenization,
    iter_layer_features,
    layer_names,
    max_positions,
)
from backend.analysis.weight_change import relative_weight_change
from backend.core.errors import DataError, DetourError, ModelSpecError
from backend.engine import readers
from backend.engine.models import ModelRef, load_encoder, load_tokenizer, quiet_transformers, resolve_model
from backend.engine.rundir import read_status, saved_models

VERSION = 2  # 2: a measure (default debiased), samples, hidden sizes and the shuffled baseline
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
Progress = Callable[[float, str], object]


# ---------------------------------------------------------------------------------------------- texts
_CKA_RULE = readers.Skipped(hint="(every text a string)")  # the corpus rule; CKA compares the texts it is given


def load_text_pool(src: str | Path | Sequence[str]) -> tuple[list[str], str]:
    """All candidate texts and a label for where they came from.

    ``src``: a list of strings, a ``.txt`` file (one text per non-empty line) or a ``.jsonl`` file
    (one JSON object per line with a string ``text`` field).
    """
    if isinstance(src, (list, tuple)):
        cells = (readers.text_cell(t, f"texts: item {i}", _CKA_RULE) for i, t in enumerate(src, 1))
        texts = [t.strip() for t in cells if t.strip()]
        label = f"<list of {len(src)} texts>"
    else:
        path = Path(src).expanduser()
        if not path.is_file():
            raise DataError(f"texts '{src}': no such file (give a .txt file, one text per line, or a .jsonl file)")
        label = str(path)
        texts = []
        raw = path.read_bytes()
        if b"\x00" in raw:
            raise DataError(f"texts '{src}': looks binary (NUL bytes); expected UTF-8 text")
        try:
            lines = list(io.StringIO(raw.decode("utf-8"), newline=None))  # the lines a text-mode file gives
        except UnicodeDecodeError as exc:
            raise DataError(f"texts '{src}': not UTF-8 text (byte {exc.start}); save it as UTF-8") from exc
        if path.suffix.lower() == ".jsonl":  # the corpus reader and its one rule for cells (readers.text_cell)
            try:
                texts = [t.strip() for t in readers.jsonl_documents(path, "text", _CKA_RULE) if t.strip()]
            except DataError as exc:
                raise DataError(str(exc).replace("data.corpus: ", "texts: ", 1)) from exc
        else:
            texts = [line.strip() for line in lines if line.strip()]
    if not texts:
        raise DataError(f"texts '{label}': no non-empty text")
    return texts, label


def sample_texts(pool: Sequence[str], n: int | None, seed: int = 0) -> list[str]:
    """``n`` texts drawn without replacement with ``random.Random(seed)`` (all of them, in order, when
    ``n`` is None or not smaller than the pool). Deterministic: same pool, n and seed -> same texts."""
    if n is None or n >= len(pool):
        return list(pool)
    if n < 1:
        raise DataError(f"n_texts: got {n}; use an integer >= 2")
    idx = sorted(random.Random(seed).sample(range(len(pool)), n))
    return [pool[i] for i in idx]


def read_texts(path_or_list: str | Path | Sequence[str], n: int | None = None, seed: int = 0) -> list[str]:
    """Read texts (``.txt``: one per non-empty line; ``.jsonl``: a ``text`` field) and sample ``n`` with ``seed``."""
    pool, _ = load_text_pool(path_or_list)
    return sample_texts(pool, n, seed)


def texts_sha256(texts: Sequence[str]) -> str:
    """sha256 of the JSON list of texts (order matters): identifies exactly what was compared."""
    return hashlib.sha256(json.dumps(list(texts), ensure_ascii=False).encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------------------- models
@dataclass
class LoadedModel:
    spec: str
    source: ModelRef
    model: torch.nn.Module
    tokenizer: object
    names: list[str]
    dtype: str

    @property
    def key(self) -> str:
        return f"{self.source.kind}:{self.source.path}"

    def info(self, spec=None) -> dict:
        cfg = self.model.config
        return {
            "spec": self.spec if spec is None else _spec_str(spec),
            "kind": self.source.kind,
            "path": self.source.path,
            "model_type": getattr(cfg, "model_type", None),
            "blocks": len(self.names) - 1,
            "hidden_size": getattr(cfg, "hidden_size", None),
            "dtype": self.dtype,
        }


def _spec_str(spec) -> str:
    return spec.spec if isinstance(spec, ModelRef) else str(spec)


def load_for_cka(spec: str | Path | ModelRef, dtype: str = "fp32") -> LoadedModel:
    """The bare encoder (eval mode, ``dtype`` fp32 or bf16) and its own tokenizer."""
    if dtype not in DTYPES:
        raise DataError(f"dtype: got {dtype!r}; use one of {', '.join(DTYPES)}")
    source = spec if isinstance(spec, ModelRef) else resolve_model(str(spec))
    with quiet_transformers():
        # A bare encoder loaded from an MLM checkpoint: the head weights are "unexpected" (and unused) and
        # BERT's pooler "missing" (and unused): transformers' load report would only be noise here.
        model = load_encoder(source, dtype=DTYPES[dtype]).eval()
        tok = load_tokenizer(source)
    return LoadedModel(_spec_str(spec), source, model, tok, layer_names(model), dtype)


class _Models:
    """Loads each distinct model once."""

    def __init__(self, dtype: str):
        self.dtype = dtype
        self._by_key: dict[str, LoadedModel] = {}

    def get(self, spec) -> LoadedModel:
        source = spec if isinstance(spec, ModelRef) else resolve_model(str(spec))
        key = f"{source.kind}:{source.path}"
        if key not in self._by_key:
            self._by_key[key] = load_for_cka(source, self.dtype)
        return self._by_key[key]


# ---------------------------------------------------------------------------------------------- core
def _check_args(
    pooling: str,
    max_len: int,
    n_texts: int | None,
    batch_size: int,
    dtype: str,
    seed: int,
    seeds: Sequence[int] | None,
    measure: str,
) -> list[int]:
    """The sampling arguments both entry points share, checked before any model loads; returns the seed list."""
    if pooling not in POOLINGS:
        raise DataError(f"pooling: got {pooling!r}; use one of {', '.join(POOLINGS)}")
    if not isinstance(max_len, int) or max_len < 2:
        raise DataError(f"max_len: got {max_len!r}; use an integer >= 2")
    check_measure(measure)
    check_n_texts(n_texts, measure, pooling)  # what the estimator needs (debiased: 4 samples)
    if not isinstance(batch_size, int) or batch_size < 1:
        raise DataError(f"batch_size: got {batch_size!r}; use an integer >= 1")
    if dtype not in DTYPES:
        raise DataError(f"dtype: got {dtype!r}; use one of {', '.join(DTYPES)}")
    out = [int(s) for s in seeds] if seeds else [int(seed)]
    if len(set(out)) != len(out):
        raise DataError(f"seeds: got {out}; give distinct seeds")
    return out


def _n_used(pool: Sequence[str], n_texts: int | None, source_label: str, measure: str, pooling: str) -> int:
    """How many texts each seed compares (with pooling 'mean', the samples: refused below what the measure needs)."""
    n_used = len(sample_texts(pool, n_texts, 0))
    if pooling == "mean":
        check_samples(n_used, measure, "texts", where=f"texts '{source_label}': ")
    return n_used


def _unit(pooling: str) -> str:
    return "texts" if pooling == "mean" else "tokens"


def _measure_info(measure: str, pooling: str, n_rows: list[int], hidden: dict) -> dict:
    """What every result names: the measure, the samples it compared and the hidden sizes."""
    return {
        "measure": measure,
        "measure_description": MEASURES[measure],
        "samples": {"unit": _unit(pooling), "n": n_rows[0] if len(set(n_rows)) == 1 else n_rows},
        "hidden_sizes": hidden,
    }


def _texts_info(pool: Sequence[str], source_label: str, n_used: int) -> dict:
    return {"texts_source": source_label, "texts_sha256": texts_sha256(pool), "n_available": len(pool), "n": n_used}


def _settings_info(pooling: str, max_len: int, eff_len: int, seeds: list[int], batch_size: int, dtype: str) -> dict:
    """How texts were encoded and pooled: the ``inputs`` keys a pair and a trajectory share."""
    return {
        "pooling": pooling,
        "max_len": max_len,
        "max_len_effective": eff_len,
        "seeds": seeds,
        "batch_size": batch_size,
        "dtype": dtype,
        "accumulation": "float64",
    }


def _capped_note(max_len: int, eff_len: int) -> list[str]:
    return [f"max_len {max_len} capped at {eff_len} by the models' position embeddings"] if eff_len < max_len else []


def _effective_max_len(max_len: int, models: Sequence[LoadedModel]) -> int:
    limits = [m for m in (max_positions(lm.model) for lm in models) if m]
    return min([max_len, *limits])


def _features(lm: LoadedModel, texts, pooling, max_len, batch_size, cache: dict | None):
    """Rows per batch for one model; mean-pooled rows (n x d per layer: small) are cached per model."""
    if cache is not None and pooling == "mean":
        if lm.key not in cache:
            cache[lm.key] = list(iter_layer_features(lm.model, lm.tokenizer, texts, pooling=pooling,
                                                     max_len=max_len, batch_size=batch_size))  # fmt: skip
        return iter(cache[lm.key])
    return iter_layer_features(lm.model, lm.tokenizer, texts, pooling=pooling, max_len=max_len, batch_size=batch_size)


@dataclass
class PairResult:
    matrix: torch.Tensor
    n_rows: int
    baseline: torch.Tensor | None = None  # the same measure on mismatched inputs (backend.analysis.baseline)
    baseline_rows: int | None = None
    baseline_how: str | None = None


def _pair_cka(
    a: LoadedModel,
    b: LoadedModel,
    texts: list[str],
    *,
    pooling: str,
    max_len: int,
    batch_size: int,
    pairs: str,
    cache_a: dict | None,
    cache_b: dict | None,
    tick: Callable[[], None],
    measure: str,
    baseline_seed: int | None = None,
) -> PairResult:
    acc = StreamingSimilarity(pairs=pairs)
    base = ShuffledBaseline(pooling, pairs, baseline_seed) if baseline_seed is not None else None
    fa = _features(a, texts, pooling, max_len, batch_size, cache_a)
    fb = _features(b, texts, pooling, max_len, batch_size, cache_b)
    for xs, ys in zip(fa, fb, strict=True):
        acc.update(xs, ys)
        if base is not None:
            base.add(xs, ys)
        tick()
    check_samples(acc.n, measure, _unit(pooling))
    res = PairResult(acc.matrix(measure), acc.n)
    filled = base.finish() if base is not None else None
    if filled is not None and filled.n >= MIN_SAMPLES[measure]:
        res.baseline, res.baseline_rows, res.baseline_how = filled.matrix(measure), filled.n, base.how
    return res


def _f(x) -> float | None:
    """A float for JSON: NaN/inf become None."""
    x = float(x)
    return x if math.isfinite(x) else None


def _flist(t) -> list:
    if isinstance(t, torch.Tensor):
        t = t.tolist()
    return [_flist(v) if isinstance(v, list) else _f(v) for v in t]


def _mean_std(stack: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    mean = stack.mean(0)
    return mean, (stack.std(0, correction=1) if stack.shape[0] > 1 else None)


def _ticker(progress: Progress | None, total: int, label: str):
    state = {"done": 0}

    def tick():
        state["done"] += 1
        if progress is not None:
            progress(min(1.0, state["done"] / max(total, 1)), label)

    return tick


# ---------------------------------------------------------------------------------------------- public
def cka_between(
    a: str | Path | ModelRef,
    b: str | Path | ModelRef,
    texts: str | Path | Sequence[str],
    pooling: str = "mean",
    max_len: int = 512,
    n_texts: int | None = 500,
    batch_size: int = 8,
    seed: int = 0,
    control: tuple | None = None,
    *,
    seeds: Sequence[int] | None = None,
    dtype: str = "fp32",
    measure: str = DEFAULT_MEASURE,
    baseline: bool = True,
    progress: Progress | None = None,
) -> dict:
    """Layer x layer similarity (``measure``: debiased CKA by default; ``linear`` for the paper's biased CKA)
    between encoders ``a`` (rows) and ``b`` (columns), JSON-ready.

    ``baseline`` adds the same measure on mismatched inputs (``baseline``: texts shuffled between A and B, see
    :mod:`backend.analysis.baseline`): what two unrelated representations score at this n.

    ``control=(mlm_seedA, mlm_seedB)`` adds the seed-noise control ``1 - CKA(mlm_seedB_l, mlm_seedA_l)`` and
    the ratio ``divergence_l / control_divergence_l`` (pass ``a`` = the detour model and ``b`` = mlm_seedA
    for the paper's r_l). ``seeds=[0, 1, 2]`` repeats the sampling with each seed and reports mean and
    sample std (ddof=1) per cell / layer; otherwise ``seed`` is the one sampling seed.
    ``progress(fraction, message)`` is called after each batch (e.g. a ``gr.Progress``).
    """
    t0 = time.time()
    seed_list = _check_args(pooling, max_len, n_texts, batch_size, dtype, seed, seeds, measure)
    pool, source_label = load_text_pool(texts)
    check_distinct(list(pool), source_label)  # identical texts: CKA undefined at every layer, before any model
    if control is not None and len(control) != 2:
        raise DataError(f"control: give two models (mlm_seedA, mlm_seedB), got {len(control)}")
    models = _Models(dtype)
    ma, mb = models.get(a), models.get(b)
    mc = (models.get(control[0]), models.get(control[1])) if control is not None else None
    every = [ma, mb, *(mc or ())]
    eff_len = _effective_max_len(max_len, every)
    la, lb = len(ma.names), len(mb.names)
    same_depth = la == lb
    notes: list[str] = []
    if mc is not None:
        if not (same_depth and len(mc[0].names) == la and len(mc[1].names) == la):
            raise ModelSpecError(
                "control: the ratio needs the same number of layers in all four models, got "
                f"a={la}, b={lb}, control={len(mc[0].names)}/{len(mc[1].names)}"
            )
        if mc[0].key != mb.key:
            notes.append("b is not control[0]: the ratio divides div(a, b) by div(control[1], control[0])")
    if not same_depth:
        notes.append(f"depths differ ({la} vs {lb} layer indices): no diagonal divergence; see the matrix")
    notes += _capped_note(max_len, eff_len)
    n_used = _n_used(pool, n_texts, source_label, measure, pooling)
    if n_texts is not None and n_used < n_texts:
        notes.append(f"only {n_used} texts available (asked for {n_texts}): every seed uses all of them")
    if len(seed_list) > 1 and n_texts is not None and n_used < n_texts:
        notes.append("seeds see identical texts: their std is 0 up to summation order")

    n_batches = math.ceil(n_used / batch_size)
    total = len(seed_list) * n_batches * (2 if mc else 1)
    tick = _ticker(progress, total, "CKA")
    per_seed = []
    for s in seed_list:
        sample = sample_texts(pool, n_texts, s)
        ordered = sorted(sample, key=len)  # less padding per batch; both models see the same order
        if pooling == "token":
            check_same_tokenization(ma.tokenizer, mb.tokenizer, ordered, eff_len, labels=("a", "b"))
            if mc is not None:
                check_same_tokenization(mc[0].tokenizer, mc[1].tokenizer, ordered, eff_len, labels=("control",) * 2)
        cache: dict = {}
        kw = dict(pooling=pooling, max_len=eff_len, batch_size=batch_size, cache_a=cache, cache_b=cache, tick=tick)
        pr = _pair_cka(ma, mb, ordered, pairs="all", measure=measure, baseline_seed=s if baseline else None, **kw)
        entry = {"seed": s, "texts_sha256": texts_sha256(sample), "n_texts": len(sample), "n_rows": pr.n_rows}
        entry["_matrix"], entry["_baseline"] = pr.matrix, pr.baseline
        entry["baseline_rows"], entry["_baseline_how"] = pr.baseline_rows, pr.baseline_how
        if mc is not None:
            cmat = _pair_cka(mc[1], mc[0], ordered, pairs="diagonal", measure=measure, **kw).matrix
            entry["_control"] = 1.0 - torch.diagonal(cmat)
        per_seed.append(entry)
        del cache

    mats = torch.stack([e["_matrix"] for e in per_seed])
    mat_mean, mat_std = _mean_std(mats)
    hidden = {"a": ma.info(a)["hidden_size"], "b": mb.info(b)["hidden_size"]}
    out: dict = {
        "kind": "cka",
        "version": VERSION,
        **_measure_info(measure, pooling, [e["n_rows"] for e in per_seed], hidden),
        "layers_a": ma.names,
        "layers_b": mb.names,
        "layer_convention": LAYER_CONVENTION,
        "matrix": _flist(mat_mean),
        "matrix_std": _flist(mat_std) if mat_std is not None else None,
        "cka_diagonal": None,
        "divergence": None,
        "divergence_std": None,
        "control_divergence": None,
        "control_divergence_std": None,
        "ratio": None,
        "baseline": _baseline_summary(per_seed, pooling) if baseline else None,
    }
    if baseline and out["baseline"] is None:
        notes.append(
            "no shuffled baseline: a single batch of tokens has no other texts to pair with (lower --batch-size)"
        )
    if same_depth:
        divs = torch.stack([1.0 - torch.diagonal(e["_matrix"]) for e in per_seed])
        div_mean, div_std = _mean_std(divs)
        out["cka_diagonal"] = _flist(torch.diagonal(mat_mean))
        out["divergence"] = _flist(div_mean)
        out["divergence_std"] = _flist(div_std) if div_std is not None else None
        if mc is not None:
            ctrl = torch.stack([e["_control"] for e in per_seed])
            c_mean, c_std = _mean_std(ctrl)
            out["control_divergence"] = _flist(c_mean)
            out["control_divergence_std"] = _flist(c_std) if c_std is not None else None
            out["ratio"] = [seed_noise_ratio(d, c) for d, c in zip(div_mean.tolist(), c_mean.tolist())]
    for e in per_seed:
        m = e.pop("_matrix")
        b_ = e.pop("_baseline")
        e.pop("_baseline_how")
        e["matrix"] = _flist(m)
        e["baseline_matrix"] = _flist(b_) if b_ is not None else None
        if same_depth:
            e["divergence"] = _flist(1.0 - torch.diagonal(m))
        if "_control" in e:
            c = e.pop("_control")
            e["control_divergence"] = _flist(c)
            e["ratio"] = [seed_noise_ratio(d, cc) for d, cc in zip(e["divergence"], c.tolist())]
    out["per_seed"] = per_seed
    out["inputs"] = {
        "models": {
            "a": ma.info(a),
            "b": mb.info(b),
            "control": [mc[0].info(control[0]), mc[1].info(control[1])] if mc is not None else None,
        },
        **_texts_info(pool, source_label, n_used),
        "n_rows": [e["n_rows"] for e in per_seed],
        **_settings_info(pooling, max_len, eff_len, seed_list, batch_size, dtype),
        "layers": {"a": la, "b": lb},
    }
    notes += few_samples_note(min(e["n_rows"] for e in per_seed), list(hidden.values()), measure, _unit(pooling))
    out["notes"] = notes
    out["elapsed_s"] = round(time.time() - t0, 3)
    return out


def _baseline_summary(per_seed: list[dict], pooling: str) -> dict | None:
    """The shuffled baseline over seeds: its matrix (mean), diagonal and range, for a figure's caption."""
    mats = [e["_baseline"] for e in per_seed if e["_baseline"] is not None]
    if not mats:
        return None
    mean, std = _mean_std(torch.stack(mats))
    finite = mean[torch.isfinite(mean)]
    return {
        "how": per_seed[0]["_baseline_how"],
        "unit": _unit(pooling),
        "n_rows": [e["baseline_rows"] for e in per_seed if e["_baseline"] is not None],
        "matrix": _flist(mean),
        "matrix_std": _flist(std) if std is not None else None,
        "diagonal": _flist(torch.diagonal(mean)) if mean.shape[0] == mean.shape[1] else None,
        "mean": _f(finite.mean()) if finite.numel() else None,
        "min": _f(finite.min()) if finite.numel() else None,
        "max": _f(finite.max()) if finite.numel() else None,
    }


def seed_noise_ratio(d, c) -> float | None:
    """Seed-noise ratio; None when undefined (no control divergence, or NaN)."""
    if d is None or c is None:
        return None
    d, c = float(d), float(c)
    if not (math.isfinite(d) and math.isfinite(c)) or c <= 1e-12:
        return None
    return d / c


def _checkpoint_points(run_dir: Path, include_final: bool) -> list[dict]:
    points = saved_models(run_dir)
    if include_final and (run_dir / "final" / "config.json").exists():
        st = read_status(run_dir)
        points.append(
            {
                "name": "final",
                "path": str(run_dir / "final"),
                "step": st.get("step"),
                "tokens_seen": st.get("tokens_seen"),
                "tag": "final",
                "phase": None,
            }
        )
    return points


def run_folder_of(run: str | Path) -> Path:
    """A run typed as its folder or by its name (a run, a sweep's ``SWEEP/RUN``: ``model_ref``) -> its folder."""
    p = Path(run).expanduser()
    if p.is_dir():
        return p
    ref = resolve_model(str(run))  # refused with the close names when it names nothing
    if ref.run is None:
        raise ModelSpecError(f"run '{run}': is a {ref.kind} model, not a run (a trajectory reads a run's checkpoints)")
    return Path(ref.run)


def cka_trajectory(
    run_dir: str | Path,
    reference: str | Path | ModelRef,
    texts: str | Path | Sequence[str],
    pooling: str = "mean",
    max_len: int = 512,
    n_texts: int | None = 500,
    batch_size: int = 8,
    seed: int = 0,
    *,
    seeds: Sequence[int] | None = None,
    dtype: str = "fp32",
    measure: str = DEFAULT_MEASURE,
    weights: bool = True,
    include_final: bool = True,
    progress: Progress | None = None,
) -> dict:
    """Divergence per layer (1 - similarity(checkpoint_l, reference_l), ``measure`` as in :func:`cka_between`)
    for every complete checkpoint of a run
    (and ``final/``), with each point's step / tokens_seen / tag / phase, and (``weights=True``) the
    relative weight change per block against the reference. JSON-ready.

    ``divergence`` is a (points x layers) list of lists, ready for a heatmap; ``points`` has the details.
    """
    t0 = time.time()
    seed_list = _check_args(pooling, max_len, n_texts, batch_size, dtype, seed, seeds, measure)
    run_dir = run_folder_of(run_dir)
    points = _checkpoint_points(run_dir, include_final)
    if not points:
        raise ModelSpecError(f"run directory '{run_dir}': no complete checkpoint (nor final/) yet")
    pool, source_label = load_text_pool(texts)
    check_distinct(list(pool), source_label)  # identical texts: CKA undefined at every layer, before any model
    ref = load_for_cka(reference, dtype)
    n_used = _n_used(pool, n_texts, source_label, measure, pooling)
    raw = {s: sample_texts(pool, n_texts, s) for s in seed_list}
    samples = {s: sorted(t, key=len) for s, t in raw.items()}
    ref_cache = {s: {} for s in seed_list}
    total = len(points) * len(seed_list) * math.ceil(n_used / batch_size)
    tick = _ticker(progress, total, "CKA trajectory")
    notes: list[str] = []
    eff_len = max_len
    for p in points:
        ck = load_for_cka(ModelRef("checkpoint", p["path"], p["path"]), dtype)
        if len(ck.names) != len(ref.names):
            raise ModelSpecError(
                f"checkpoint {p['name']} has {len(ck.names)} layer indices, reference '{ref.spec}' has "
                f"{len(ref.names)}: a trajectory needs the same depth"
            )
        eff_len = _effective_max_len(max_len, [ref, ck])
        divs = []
        for s in seed_list:
            if pooling == "token":
                check_same_tokenization(ck.tokenizer, ref.tokenizer, samples[s], eff_len, labels=(p["name"], "ref"))
            pr = _pair_cka(
                ck, ref, samples[s], pooling=pooling, max_len=eff_len, batch_size=batch_size,
                pairs="diagonal", cache_a=None, cache_b=ref_cache[s], tick=tick, measure=measure,
            )  # fmt: skip
            divs.append(1.0 - torch.diagonal(pr.matrix))
            p["n_rows"] = pr.n_rows
        mean, std = _mean_std(torch.stack(divs))
        p["divergence"] = _flist(mean)
        p["divergence_std"] = _flist(std) if std is not None else None
        p["weight_change"] = None
        if weights:
            try:
                wc = relative_weight_change(ref.source, p["path"])
                p["weight_change"] = wc["layers"]
                p["weight_change_embeddings"] = wc["embeddings"]
            except DetourError as exc:
                notes.append(f"{p['name']}: no weight change ({exc})")
        del ck
    notes += _capped_note(max_len, eff_len)
    n_rows = [p["n_rows"] for p in points]
    notes += few_samples_note(min(n_rows), [ref.info()["hidden_size"]], measure, _unit(pooling))
    n_blocks = len(ref.names) - 1
    return {
        "kind": "cka_trajectory",
        "version": VERSION,
        **_measure_info(measure, pooling, n_rows, {"reference": ref.info()["hidden_size"]}),
        "run": str(run_dir),
        "layers": ref.names,
        "layer_convention": LAYER_CONVENTION,
        "weight_layers": [f"block_{i}" for i in range(n_blocks)],
        "points": points,
        "steps": [p["step"] for p in points],
        "tokens_seen": [p["tokens_seen"] for p in points],
        "divergence": [p["divergence"] for p in points],
        "weight_change": [p.get("weight_change") for p in points] if weights else None,
        "inputs": {
            "reference": ref.info(),
            "run": str(run_dir),
            **_texts_info(pool, source_label, n_used),
            "samples_sha256": {str(s): texts_sha256(t) for s, t in raw.items()},
            **_settings_info(pooling, max_len, eff_len, seed_list, batch_size, dtype),
            "layers": len(ref.names),
        },
        "notes": notes,
        "elapsed_s": round(time.time() - t0, 3),
    }


def weight_change_between(a: str | Path | ModelRef, b: str | Path | ModelRef, *, detail: bool = False) -> dict:
    """Relative weight change ``||W_b - W_a|| / ||W_a||`` per block (``layers``, named ``block_i``: the same
    names as CKA indices 1..L), ``embeddings``, ``head``, ``other`` and ``total``. JSON-ready."""
    out = relative_weight_change(a, b, detail=detail)
    out["version"] = VERSION
    return out

"""Similarity measures: the math (backend/analysis/cka.py: debiased and biased linear CKA, Procrustes), then the
analysis functions and the CLI on tiny models."""

from __future__ import annotations

import json
import math

import pytest
import torch

from backend.analysis.cka import (
    MEASURES,
    StreamingSimilarity,
    debiased_cka,
    gram_cka,
    gram_similarity,
    hsic_unbiased_gram,
    linear_cka,
    procrustes_similarity,
    similarity,
)

TOL = 1e-10


def _data(n=200, d1=12, d2=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d1, generator=g, dtype=torch.float64)
    y = x @ torch.randn(d1, d2, generator=g, dtype=torch.float64) + 0.7 * torch.randn(n, d2, generator=g)
    return x, y


def _stream(x, y, splits, measure="linear", **kw) -> float:
    acc = StreamingSimilarity(**kw)
    s = 0
    for m in splits:
        acc.update([x[s : s + m]], [y[s : s + m]])
        s += m
    assert s == x.shape[0]
    return acc.matrix(measure).item()


def _reference(x, y, measure) -> float:
    """An implementation that shares no code with the feature-space one: the n x n Gram formulas for both CKAs
    (Song et al.'s unbiased HSIC on uncentred Gram matrices), scipy's orthogonal Procrustes for Procrustes."""
    if measure != "procrustes":
        return gram_similarity(x, y, measure)
    from scipy.linalg import orthogonal_procrustes

    xc, yc = x - x.mean(0), y - y.mean(0)
    xc, yc = (xc / xc.norm()).numpy(), (yc / yc.norm()).numpy()
    width = max(xc.shape[1], yc.shape[1])  # zero columns change no distance: pad to one width
    xc = torch.nn.functional.pad(torch.from_numpy(xc), (0, width - xc.shape[1])).numpy()
    yc = torch.nn.functional.pad(torch.from_numpy(yc), (0, width - yc.shape[1])).numpy()
    r, _ = orthogonal_procrustes(yc, xc)
    return 1.0 - float(((xc - yc @ r) ** 2).sum()) / 2.0


# ------------------------------------------------------------------------------------------ properties
@pytest.mark.parametrize(
    "fn",
    [linear_cka, gram_cka, debiased_cka, procrustes_similarity]
    + [lambda x, y, m=m: _stream(x, y, [50, 50, 100], m) for m in MEASURES]
    + [lambda x, y: gram_similarity(x, y, "debiased")],
)
def test_self_similarity_is_one(fn):
    x, _ = _data()
    assert fn(x, x) == pytest.approx(1.0, abs=TOL)


def test_symmetric():
    x, y = _data()
    assert linear_cka(x, y) == pytest.approx(linear_cka(y, x), abs=TOL)
    assert gram_cka(x, y) == pytest.approx(gram_cka(y, x), abs=TOL)
    acc = StreamingSimilarity()
    acc.update([x, y], [y, x])
    m = acc.matrix()
    assert m[0, 0].item() == pytest.approx(m[1, 1].item(), abs=TOL)
    assert 0.05 < linear_cka(x, y) < 0.95  # a non-trivial value, so the checks above mean something


@pytest.mark.parametrize("measure", list(MEASURES))
def test_orthogonal_and_isotropic_scaling_invariance_not_anisotropic(measure):
    x, y = _data()

    def sim(a, b):
        return similarity(a, b, measure)

    q, _ = torch.linalg.qr(torch.randn(x.shape[1], x.shape[1], dtype=torch.float64))
    base = sim(x, y)
    assert sim(x @ q, y) == pytest.approx(base, abs=TOL)
    assert sim(x, x @ q) == pytest.approx(1.0, abs=TOL)
    assert sim(3.7 * x, y) == pytest.approx(base, abs=TOL)
    assert sim(x, 1e-3 * x) == pytest.approx(1.0, abs=TOL)
    assert sim(x + 5.0, y - 2.0) == pytest.approx(base, abs=TOL)  # translation invariant (debiased: unbiased HSIC is)
    scale = torch.logspace(-2, 2, x.shape[1], dtype=torch.float64)
    assert sim(x, x * scale) < 0.9
    assert abs(sim(x * scale, y) - base) > 1e-3


def test_independent_features_at_small_n_biased_is_large_debiased_near_zero():
    """The reason for the default: at n = 50 texts and d = 256 (the app's regime: 100 texts, hidden 256-768),
    two independent representations score high with the published linear CKA and ~0 debiased."""
    biased, debiased, procrustes = [], [], []
    for seed in range(5):
        g = torch.Generator().manual_seed(100 + seed)
        x = torch.randn(50, 256, generator=g, dtype=torch.float64)
        y = torch.randn(50, 256, generator=g, dtype=torch.float64)
        biased.append(linear_cka(x, y))
        debiased.append(debiased_cka(x, y))
        procrustes.append(procrustes_similarity(x, y))
        assert _stream(x, y, [16, 16, 18], "debiased", buffer_rows=0) == pytest.approx(debiased[-1], abs=TOL)
    assert min(biased) > 0.75, biased
    assert max(abs(v) for v in debiased) < 0.15 and abs(sum(debiased) / 5) < 0.05, debiased  # sd ~0.05 at n = 50
    assert min(procrustes) > 0.9, procrustes  # Procrustes is biased too: hence the shuffled baseline
    g = torch.Generator().manual_seed(7)  # and a real relation still reads clearly
    x = torch.randn(50, 256, generator=g, dtype=torch.float64)
    y = x[:, :64] @ torch.randn(64, 256, generator=g, dtype=torch.float64) + 4 * torch.randn(50, 256, generator=g)
    assert debiased_cka(x, y) > 0.2


def test_unbiased_hsic_matches_a_literal_loop_over_distinct_index_quadruples():
    """Song et al. (2012) define HSIC_u as a U-statistic; the closed form in hsic_unbiased_gram must equal it."""
    from itertools import permutations

    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(6, 3, generator=g, dtype=torch.float64), torch.randn(6, 2, generator=g, dtype=torch.float64)
    k, ll = x @ x.T, y @ y.T
    total, count = 0.0, 0
    for i, j, q, r in permutations(range(6), 4):  # HSIC = E[k_ij l_ij] + E[k_ij] E[l_qr] - 2 E[k_ij l_iq]
        total += k[i, j] * ll[i, j] + k[i, j] * ll[q, r] - 2 * k[i, j] * ll[i, q]
        count += 1
    assert hsic_unbiased_gram(k, ll) == pytest.approx((total / count).item(), abs=1e-12)


def test_procrustes_known_value_and_scipy():
    """X = U diag(s), Y = U diag(t) with U's columns orthonormal and centred: ||XᵀY||_* = Σ s t, so the
    similarity is the cosine of s and t."""
    g = torch.Generator().manual_seed(4)
    u = torch.randn(40, 5, generator=g, dtype=torch.float64)
    u, _ = torch.linalg.qr(u - u.mean(0))
    s = torch.tensor([5.0, 3.0, 2.0, 1.0, 0.5], dtype=torch.float64)
    t = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0], dtype=torch.float64)
    want = (torch.dot(s, t) / (s.norm() * t.norm())).item()
    assert procrustes_similarity(u * s, u * t) == pytest.approx(want, abs=TOL)
    assert _stream(u * s, u * t, [13, 27], "procrustes", buffer_rows=0) == pytest.approx(want, abs=TOL)
    x, y = _data()
    assert procrustes_similarity(x, y) == pytest.approx(_reference(x, y, "procrustes"), abs=TOL)


def test_debiased_needs_four_samples():
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)
    assert math.isnan(debiased_cka(x[:3], y[:3])) and math.isnan(_stream(x[:3], y[:3], [3], "debiased"))
    assert math.isfinite(debiased_cka(x, y))
    assert debiased_cka(x, y) == pytest.approx(gram_similarity(x, y, "debiased"), abs=TOL)
    assert math.isfinite(linear_cka(x[:2], y[:2]))


# ------------------------------------------------------------------------------------------ streaming
@pytest.mark.parametrize(
    "splits",
    [[200], [1] * 200, [3, 0, 97, 1, 99], [150, 50], [7] * 28 + [4]],
)
@pytest.mark.parametrize("buffer_rows", [0, "auto", 10**9])
def test_streaming_equals_one_shot_and_gram(splits, buffer_rows):
    x, y = _data()
    x = x + 3.0  # uncentred, so the row-norm expansion of the debiased terms is exercised
    for measure in MEASURES:
        ref = _reference(x, y, measure)
        assert similarity(x, y, measure) == pytest.approx(ref, abs=TOL)
        assert _stream(x, y, splits, measure, buffer_rows=buffer_rows) == pytest.approx(ref, abs=TOL)


def test_streaming_fewer_rows_than_features_uses_dual_form_exactly():
    x, y = _data(n=20, d1=64, d2=48)
    for measure in MEASURES:
        ref = _reference(x, y, measure)
        for br in (0, 10**9):  # statistics path and kept-rows (n x n) path
            assert _stream(x, y, [6, 6, 8], measure, buffer_rows=br) == pytest.approx(ref, abs=TOL)


def test_layer_by_layer_matrix_different_depths_and_widths():
    g = torch.Generator().manual_seed(1)
    n = 150
    xs = [torch.randn(n, d, generator=g, dtype=torch.float64) for d in (8, 16, 8)]
    ys = [xs[0] @ torch.randn(8, 5, generator=g, dtype=torch.float64), torch.randn(n, 11, generator=g)]
    for br in (0, "auto", 10**9):
        acc = StreamingSimilarity(buffer_rows=br, chunk_rows=16)
        for s in range(0, n, 40):
            acc.update([t[s : s + 40] for t in xs], [t[s : s + 40].float() for t in ys])
        for measure in ("debiased", "linear"):
            m = acc.matrix(measure)
            assert m.shape == (3, 2) and m.dtype == torch.float64
            for i in range(3):
                for j in range(2):
                    ref = gram_similarity(xs[i], ys[j].float(), measure)
                    assert m[i, j].item() == pytest.approx(ref, abs=1e-9)


def test_diagonal_mode_matches_full_matrix():
    x, y = _data()
    xs, ys = [x, y, x[:, :3]], [y, x, y[:, :4]]
    full, diag = StreamingSimilarity(buffer_rows=0), StreamingSimilarity(pairs="diagonal", buffer_rows=0)
    for acc in (full, diag):
        for s in range(0, 200, 64):
            acc.update([t[s : s + 64] for t in xs], [t[s : s + 64] for t in ys])
    assert torch.allclose(full.diagonal(), diag.diagonal(), atol=TOL, rtol=0)
    assert torch.isnan(diag.matrix()[0, 1])
    assert diag.stats_numbers() < full.stats_numbers()


def test_float64_accumulation_stays_exact_where_float32_drifts():
    """A feature with a large mean (transformer residual streams have them) against its spread."""
    g = torch.Generator().manual_seed(2)
    n, d = 2048, 16
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    x[:, 0] += 1e4
    y = x[:, :8] @ torch.randn(8, 6, generator=g, dtype=torch.float64) + torch.randn(n, 6, generator=g)
    ref = linear_cka(x, y)  # two-pass centring in float64: the exact value
    assert gram_cka(x, y) == pytest.approx(ref, abs=1e-9)

    def naive_streaming(x, y, dtype):  # the same one-pass formula, accumulated in `dtype`
        sx, sy = torch.zeros(x.shape[1], dtype=dtype), torch.zeros(y.shape[1], dtype=dtype)
        xx = torch.zeros(x.shape[1], x.shape[1], dtype=dtype)
        yy, yx = torch.zeros(y.shape[1], y.shape[1], dtype=dtype), torch.zeros(y.shape[1], x.shape[1], dtype=dtype)
        for s in range(0, n, 256):
            a, b = x[s : s + 256].to(dtype), y[s : s + 256].to(dtype)
            sx += a.sum(0)
            sy += b.sum(0)
            xx += a.T @ a
            yy += b.T @ b
            yx += b.T @ a
        mx, my = sx / n, sy / n
        num = torch.linalg.matrix_norm(yx - n * torch.outer(my, mx)) ** 2
        nx = torch.linalg.matrix_norm(xx - n * torch.outer(mx, mx))
        den = nx * torch.linalg.matrix_norm(yy - n * torch.outer(my, my))
        return (num / den).item()

    drift32 = abs(naive_streaming(x, y, torch.float32) - ref)
    assert drift32 > 1e-3 or math.isnan(drift32)
    assert abs(naive_streaming(x, y, torch.float64) - ref) < 1e-6
    xf, yf = x.float(), y.float()
    for br in (0, 10**9):  # ours, fed float32 batches: float64 statistics on shifted rows
        for measure in MEASURES:
            want = similarity(xf, yf, measure)
            assert _stream(xf, yf, [256] * 8, measure, buffer_rows=br) == pytest.approx(want, abs=1e-10)
    acc = StreamingSimilarity(buffer_rows=0)
    for s in range(0, n, 256):
        acc.update([x[s : s + 256]], [y[s : s + 256]])
    assert acc.matrix("linear").item() == pytest.approx(ref, abs=1e-10)
    # the debiased terms expand fourth moments (Σ ||x_r||² ||y_r||²): still exact on the large-mean feature
    assert acc.matrix("debiased").item() == pytest.approx(debiased_cka(x, y), abs=1e-10)


def test_undefined_and_bad_input():
    acc = StreamingSimilarity()
    acc.update([torch.ones(5, 3)], [torch.randn(5, 2)])  # no variance in X
    assert math.isnan(acc.matrix().item())
    one = StreamingSimilarity()
    one.update([torch.randn(1, 3)], [torch.randn(1, 2)])
    assert math.isnan(one.matrix().item())
    assert math.isnan(linear_cka(torch.ones(4, 2), torch.randn(4, 2)))
    with pytest.raises(ValueError):
        StreamingSimilarity().update([torch.randn(5, 3)], [torch.randn(4, 3)])
    with pytest.raises(ValueError):
        linear_cka(torch.randn(5, 3), torch.randn(4, 3))
    with pytest.raises(ValueError):
        StreamingSimilarity(pairs="diagonal").update([torch.randn(5, 3)] * 2, [torch.randn(5, 3)])
    acc = StreamingSimilarity()
    acc.update([torch.randn(5, 3)], [torch.randn(5, 2)])
    with pytest.raises(ValueError):
        acc.update([torch.randn(5, 4)], [torch.randn(5, 2)])


def test_memory_does_not_grow_with_rows():
    x, y = _data(n=3000, d1=16, d2=16)
    sizes = {}
    for n in (500, 3000):
        acc = StreamingSimilarity()
        for s in range(0, n, 100):
            acc.update([x[s : s + 100]], [y[s : s + 100]])
        sizes[n] = acc.memory_bytes()
    assert sizes[500] == sizes[3000] > 0
    kept = StreamingSimilarity(buffer_rows=10**9)  # rows kept instead: grows, which is why "auto" caps it
    kept.update([x], [y])
    assert kept.memory_bytes() == 3000 * 32 * 8


# ------------------------------------------------------------------------------------------ texts
def test_read_texts_txt_jsonl_and_deterministic_sampling(tmp_path):
    from backend.analysis.api import read_texts, texts_sha256
    from backend.core.errors import DataError

    txt = tmp_path / "t.txt"
    txt.write_text("a one\n\n  b two  \nc three\n\nd four\ne five\n")
    assert read_texts(txt) == ["a one", "b two", "c three", "d four", "e five"]
    s0 = read_texts(txt, n=3, seed=0)
    assert len(s0) == 3 and s0 == read_texts(txt, n=3, seed=0)
    assert {tuple(read_texts(txt, n=3, seed=s)) for s in range(6)} != {tuple(s0)}
    assert read_texts(txt, n=10) == read_texts(txt)
    jl = tmp_path / "t.jsonl"
    jl.write_text('{"text": "x y"}\n\n{"text": "z", "id": 3}\n')
    assert read_texts(jl) == ["x y", "z"]
    assert read_texts(["p", " ", "q"]) == ["p", "q"]
    assert texts_sha256(["a", "b"]) != texts_sha256(["b", "a"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"txt": "no"}\n')
    with pytest.raises(DataError, match="line 2"):
        read_texts(bad)
    with pytest.raises(DataError, match="no such file"):
        read_texts(tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(DataError, match="no non-empty"):
        read_texts(tmp_path / "empty.txt")


# ------------------------------------------------------------------------------------------ analysis + CLI
@pytest.fixture(scope="module")
def texts_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("cka_texts") / "texts.txt"
    words = "patient fever aspirin tumour biopsy cardiac renal dose trial cohort lesion therapy".split()
    lines = [" ".join(words[(i * 7 + k) % len(words)] for k in range(5 + (i * 3) % 17)) for i in range(40)]
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.fixture(scope="module")
def tiny_modernbert_seed1(tmp_path_factory):
    from conftest import TINY_MODERNBERT, save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny_modernbert_s1"), TINY_MODERNBERT, seed=1)


def test_cka_between_with_control_and_seeds(tiny_modernbert_dir, tiny_modernbert_seed1, tiny_bert_dir, texts_file):
    from backend.analysis.api import cka_between

    a, b = str(tiny_modernbert_dir), str(tiny_modernbert_seed1)
    calls = []
    res = cka_between(
        a, b, texts_file, n_texts=6, batch_size=6, seeds=[0, 1, 2], control=(b, a), max_len=32,
        progress=lambda f, m: calls.append(f),
    )  # fmt: skip
    json.dumps(res, allow_nan=False)  # strictly JSON-ready
    assert res["layers_a"] == ["embeddings", "block_0", "block_1", "block_2", "block_3"]
    assert len(res["matrix"]) == 5 and len(res["matrix"][0]) == 5
    assert len(res["divergence"]) == 5 and len(res["divergence_std"]) == 5
    assert res["ratio"] == pytest.approx([1.0] * 5)  # control pair = the same two models
    assert [e["seed"] for e in res["per_seed"]] == [0, 1, 2]
    assert len({e["texts_sha256"] for e in res["per_seed"]}) == 3
    inp = res["inputs"]
    assert inp["pooling"] == "mean" and inp["n"] == 6 and inp["n_rows"] == [6, 6, 6] and inp["max_len"] == 32
    assert inp["models"]["a"]["blocks"] == 4 and inp["accumulation"] == "float64" and len(inp["texts_sha256"]) == 64
    assert calls and calls[-1] == pytest.approx(1.0)
    same = cka_between(a, a, texts_file, n_texts=4, max_len=16)
    assert same["divergence"] == pytest.approx([0.0] * 5, abs=1e-9)
    assert same["matrix_std"] is None
    mixed = cka_between(a, str(tiny_bert_dir), texts_file, n_texts=4, max_len=16)
    assert mixed["divergence"] is None and len(mixed["matrix"]) == 5 and len(mixed["matrix"][0]) == 4


def test_cli_cka_weights_and_errors(tiny_modernbert_dir, tiny_modernbert_seed1, texts_file, tmp_path, capsys):
    from backend.__main__ import main

    a, b = str(tiny_modernbert_dir), str(tiny_modernbert_seed1)
    out = tmp_path / "cka.json"
    rc = main(["cka", "--a", a, "--b", b, "--texts", str(texts_file), "--n-texts", "6", "--max-len", "24",
               "--control", b, a, "--pooling", "token", "--out", str(out)])  # fmt: skip
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["inputs"]["pooling"] == "token" and res["inputs"]["n_rows"][0] > 6
    assert res["weight_change"]["layer_names"] == ["block_0", "block_1", "block_2", "block_3"]
    assert "ratio" in capsys.readouterr().out
    wout = tmp_path / "w.json"
    assert main(["cka", "--a", a, "--b", b, "--weights-only", "--out", str(wout)]) == 0
    assert json.loads(wout.read_text())["kind"] == "weight_change"
    assert main(["cka", "--a", a, "--texts", str(texts_file), "--out", str(out)]) == 2
    assert main(["cka", "--a", a, "--b", b, "--texts", str(tmp_path / "nope.txt"), "--out", str(out)]) == 2
    assert main(["cka", "--a", a, "--b", str(tmp_path / "nope"), "--texts", str(texts_file)]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


# ------------------------------------------------------------------------------------------ measure, baseline, --out
def test_cyclic_derangement_moves_every_text():
    from backend.analysis.baseline import cyclic_derangement

    for n, seed in ((2, 0), (5, 1), (100, 2)):
        p = cyclic_derangement(n, seed)
        assert sorted(p.tolist()) == list(range(n)) and not (p == torch.arange(n)).any()
    assert cyclic_derangement(50, 3).tolist() == cyclic_derangement(50, 3).tolist()


def test_measures_name_themselves_and_the_baseline_is_the_same_measure_on_shuffled_texts(
    tiny_modernbert_dir, tiny_modernbert_seed1, texts_file
):
    """Every result names its measure, n and hidden sizes; ``linear`` reproduces the published CKA on the same
    features; the baseline is the measure on texts paired with other texts (the derangement of baseline.py)."""
    from backend.analysis.api import cka_between, load_for_cka, read_texts
    from backend.analysis.baseline import cyclic_derangement
    from backend.analysis.hidden_states import iter_layer_features

    a, b = str(tiny_modernbert_dir), str(tiny_modernbert_seed1)
    res = {m: cka_between(a, b, texts_file, n_texts=12, max_len=24, batch_size=5, measure=m) for m in MEASURES}
    texts = sorted(read_texts(texts_file, 12, 0), key=len)
    feats = []
    for spec in (a, b):
        lm = load_for_cka(spec)
        batches = list(iter_layer_features(lm.model, lm.tokenizer, texts, max_len=24, batch_size=5))
        feats.append([torch.cat(layer) for layer in zip(*batches)])
    perm = cyclic_derangement(12, 0)
    for m, r in res.items():
        json.dumps(r, allow_nan=False)
        assert r["measure"] == m and r["samples"] == {"unit": "texts", "n": 12}
        assert r["hidden_sizes"] == {"a": 64, "b": 64} and r["version"] == 2
        for i, j in ((0, 0), (2, 3), (4, 4)):
            assert r["matrix"][i][j] == pytest.approx(similarity(feats[0][i], feats[1][j], m), abs=1e-9)
            want = similarity(feats[0][i], feats[1][j][perm], m)
            assert r["baseline"]["matrix"][i][j] == pytest.approx(want, abs=1e-9)
        assert r["baseline"]["n_rows"] == [12] and "derangement" in r["baseline"]["how"]
    assert res["linear"]["matrix"][1][1] == pytest.approx(linear_cka(feats[0][1], feats[1][1]), abs=1e-9)
    tok = cka_between(a, b, texts_file, n_texts=8, max_len=24, batch_size=4, pooling="token")
    assert tok["samples"]["unit"] == "tokens" and tok["samples"]["n"] == tok["inputs"]["n_rows"][0]
    assert "batch k-1" in tok["baseline"]["how"] and 0 < tok["baseline"]["n_rows"][0] <= tok["samples"]["n"]
    one = cka_between(a, b, texts_file, n_texts=4, max_len=24, batch_size=8, pooling="token")
    assert one["baseline"] is None and any("no shuffled baseline" in n for n in one["notes"])
    off = cka_between(a, b, texts_file, n_texts=4, max_len=24, baseline=False)
    assert off["baseline"] is None and not any("baseline" in n for n in off["notes"])


def test_cli_measure_and_out_folder_refused_before_any_model_loads(tiny_modernbert_dir, texts_file, tmp_path, capsys):
    from backend.__main__ import main

    a = str(tiny_modernbert_dir)
    missing = str(tmp_path / "no-such-model")  # loading it would fail: the --out error must come first
    assert main(["cka", "--a", a, "--b", missing, "--texts", str(texts_file), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"--out '{tmp_path}': is a folder; give a file name" in err and "no-such-model" not in err
    (tmp_path / "f").write_text("")
    assert main(["cka", "--a", a, "--b", missing, "--texts", str(texts_file), "--out", str(tmp_path / "f/x.json")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    out = tmp_path / "paper.json"
    rc = main(["cka", "--a", a, "--b", a, "--texts", str(texts_file), "--n-texts", "5", "--max-len", "16",
               "--measure", "linear", "--no-weights", "--out", str(out)])  # fmt: skip
    assert rc == 0
    saved = json.loads(out.read_text())
    assert saved["measure"] == "linear" and saved["cka_diagonal"] == pytest.approx([1.0] * 5)
    printed = capsys.readouterr().out
    assert "linear CKA (Kornblith et al. 2019" in printed and "n = 5 texts; hidden 64 / 64" in printed
    assert "shuffled baseline" in printed
    assert main(["cka", "--a", a, "--b", a, "--texts", str(texts_file), "--n-texts", "3", "--out", str(out)]) == 2
    assert "debiased needs at least 4 samples" in capsys.readouterr().err

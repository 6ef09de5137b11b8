"""``bench/bench_train.py`` counts the Trainer's tokens honestly: its dataset is whole batches (the demo corpus's 161
rows taken once ended the epoch on a 1-row batch that the clock counted as 16, and the Trainer read ~12% faster)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("n_rows", [161, 16, 5, 1000])
@pytest.mark.parametrize("steps", [15, 30])
def test_the_trainers_dataset_is_whole_batches_of_the_corpus_cycled(monkeypatch, n_rows, steps):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import bench_train

    idx = bench_train.trainer_rows(n_rows, steps)
    assert len(idx) == 16 * (steps + 1)  # every step timed is a full batch of 16 rows: no partial batch to count
    assert int(idx.max()) < n_rows and set(idx[:n_rows].tolist()) == set(range(min(n_rows, len(idx))))

"""A sweep has a bound: a 1,000-value grid gave no answer in 150 s (planned and checked one run at a time) and
left 681 queued runs and no worker. Its size is now said before anything is queued, a grid above ``--max-runs`` is
refused from its axes alone, in seconds, the preflight reads the model, tokenizer and corpus once per grid, and two
values that are the same number make one cell, not two."""

from __future__ import annotations

import time

import pytest

from backend.__main__ import main
from backend.core.errors import ConfigError
from backend.runs import preflight
from backend.sweeps import sweep

VALUES = ",".join(str(40_960 + 64 * i) for i in range(1000))


def test_a_grid_past_the_bound_is_refused_from_its_axes_in_seconds_naming_its_size_and_the_flag(tmp_path):
    t0 = time.time()
    with pytest.raises(ConfigError, match=r"makes 1,000 runs \(1,000 cells x 1 seed\), more than --max-runs 100") as e:
        sweep.plan_sweep(None, ["recipe=mlm"], [f"phases.main.tokens={VALUES}"], 1)
    assert time.time() - t0 < 10  # no run config was built (that took minutes for 1,000 runs with the queueing)
    assert "pass --max-runs 1000" in str(e.value)
    with pytest.raises(ConfigError, match="more than --max-runs 100"):  # cells x seeds
        sweep.plan_sweep(None, ["recipe=mlm"], ["phases.main.tokens=40960,81920", "train.lr=1e-4,2e-4,3e-4"], 20)
    assert not (tmp_path / "sweeps").exists()


def test_the_bound_is_raised_on_purpose_and_the_command_says_the_size_before_queueing(capsys, tmp_path):
    grid = ["train.lr=1e-4,2e-4,3e-4"]
    with pytest.raises(ConfigError, match="makes 3 runs"):
        sweep.plan_sweep(None, ["recipe=mlm"], grid, 1, max_runs=2)
    assert len(sweep.plan_sweep(None, ["recipe=mlm"], grid, 1, max_runs=3)["cells"]) == 3  # raised: planned
    with pytest.raises(ConfigError, match="--max-runs"):
        sweep.plan_sweep(None, ["recipe=mlm"], ["train.lr=1e-4,2e-4"], 1, max_runs=0)
    # the size is printed before the launch, which refuses here (a pair is two runs, a cell one): nothing queued
    rc = main(["sweep", "--grid", "train.lr=1e-4,2e-4", "--max-runs", "2", "--out", str(tmp_path / "sw")])
    out, err = capsys.readouterr()
    assert "2 cells x 1 seeds = 2 runs" in out and "training tokens" in out
    assert rc == 2 and "recipe 'pair'" in err and not (tmp_path / "sw").exists()


@pytest.mark.parametrize("axis", ["phases.main.tokens=40960,40960.0", "phases.main.tokens=40960,81920,81920.0",
                                  "train.grad_accum=1,2,1.0"])  # fmt: skip
def test_two_values_that_are_the_same_number_are_refused(axis):
    with pytest.raises(ConfigError, match=r"a value appears twice \(\d+ and [\d.]+ are the same value\)"):
        sweep.plan_sweep(None, ["recipe=mlm"], [axis], 1)


def test_the_preflight_reads_the_model_tokenizer_and_corpus_once_per_grid(tmp_path, monkeypatch):
    calls = {"model": 0, "tokenizer": 0, "corpus": 0}
    for name, real in (("model", preflight._model), ("tokenizer", preflight._tokenizer),
                       ("corpus", preflight._check_batch_fills)):  # fmt: skip

        def counted(*a, _name=name, _real=real, **k):  # the real check runs; it is only counted
            calls[_name] += 1
            return _real(*a, **k)

        monkeypatch.setattr(preflight, f"_{name}" if name != "corpus" else "_check_batch_fills", counted)
    values = ",".join(str(40_960 + 64 * i) for i in range(12))
    m = sweep.plan_sweep(None, ["recipe=mlm"], [f"phases.main.tokens={values}"], 2, name="once")
    out = tmp_path / "once"
    out.mkdir()
    sweep.write_manifest(out, {**m, "state": "running", "created_at": 0})
    assert len(sweep._queue_missing(out, m)) == 24  # queued, not started
    assert calls == {"model": 1, "tokenizer": 1, "corpus": 1}

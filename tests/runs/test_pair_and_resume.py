"""A pair sees identical token streams; kill -9 + resume reproduces the uninterrupted run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend.core.paths import REPO_ROOT
from backend.engine.rundir import read_metrics, read_status
from backend.runs.train import prepare_runs, train_run
from conftest import resume_from_first_checkpoint, tiny_train_cfg, train_rows


def test_pair_sees_identical_token_streams_and_budget(tiny_modernbert_dir, isolated_runs_dir):
    runs = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "p", recipe="pair"))
    assert [r.name for r in runs] == ["p-detour", "p-mlm"]
    for r in runs:
        assert train_run(r)["state"] == "done"
    a, b = (train_rows(r) for r in runs)
    assert sorted(a) == sorted(b) == list(range(1, 13))
    assert [a[s]["data_hash"] for s in a] == [b[s]["data_hash"] for s in b]
    assert a[12]["tokens_seen"] == b[12]["tokens_seen"]
    assert [a[s]["objective"] for s in (8, 9)] == ["clm", "mlm"] and b[8]["objective"] == "mlm"
    # the comparable curve exists for both, starting from the same number
    ea = [r for r in read_metrics(runs[0]) if r["type"] == "eval"]
    eb = [r for r in read_metrics(runs[1]) if r["type"] == "eval"]
    assert ea[0]["eval_mlm_loss"] == eb[0]["eval_mlm_loss"]
    # one token store for both: the first run built it, the second opened it
    ia, ib = (json.loads((r / "data_info.json").read_text()) for r in runs)
    assert ia["cache_path"] == ib["cache_path"] and (ia["cache_hit"], ib["cache_hit"]) == (False, True)
    assert ia["cache_bytes"] == ib["cache_bytes"] > 0 and ia["fingerprint"] == ib["fingerprint"]
    entries = [p for p in Path(ia["cache_path"]).parent.iterdir() if not p.name.endswith(".lock")]
    assert entries == [Path(ia["cache_path"])]


def test_seed_noise_control_keeps_data_order_and_changes_only_masks(tiny_modernbert_dir, isolated_runs_dir):
    """The paper's control: two MLM runs with another seed but identical data order (train.data_seed)."""
    small = {"recipe": "mlm", "phases.main.steps": 4, "phases.decay.steps": 0, "train.data_seed": 0}
    (a,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "s0", **small, **{"train.seed": 0}))
    (b,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "s1", **small, **{"train.seed": 1}))
    (c,) = prepare_runs(
        tiny_train_cfg(tiny_modernbert_dir, "s1-own-order", **{**small, "train.data_seed": "null", "train.seed": 1})
    )
    for r in (a, b, c):
        assert train_run(r)["state"] == "done"
    ra, rb, rc = (train_rows(r) for r in (a, b, c))
    assert [ra[s]["data_hash"] for s in ra] == [rb[s]["data_hash"] for s in rb]  # same tokens, same order
    assert [ra[s]["loss"] for s in ra] != [rb[s]["loss"] for s in rb]  # ... but other masks
    assert [ra[s]["data_hash"] for s in ra] != [rc[s]["data_hash"] for s in rc]  # data_seed None follows seed


def _spawn(run_dir: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "backend", "train", "--run-dir", str(run_dir), *extra],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_kill_9_then_resume_matches_uninterrupted(tiny_modernbert_dir, isolated_runs_dir):
    base = dict(recipe="mlm", **{"phases.main.steps": 14, "phases.decay.steps": 4})
    (ref,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "ref", **base))
    assert train_run(ref)["state"] == "done"
    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "killed", **base))
    proc = _spawn(run)
    deadline = time.time() + 240
    while time.time() < deadline and max(train_rows(run) or [0]) < 10:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert json.loads((run / "status.json").read_text())["state"] == "running"  # it had no chance to say anything
    assert read_status(run)["state"] == "failed"  # and no reader believes a dead pid's 'running' (issue 25, #3)
    res = _spawn(run, "--resume")
    assert res.wait(timeout=300) == 0
    assert read_status(run)["state"] == "done"
    # nothing partial where a complete file is expected: temp dirs cleaned, every checkpoint verifies,
    # every metrics line parses
    from backend.engine.checkpoint import verify

    assert not list((run / "checkpoints").glob(".tmp-*"))
    for ck in sorted((run / "checkpoints").glob("step-*")):
        verify(ck)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert all(json.loads(line) for line in lines)
    got, want = train_rows(run), train_rows(ref)
    assert sorted(got) == sorted(want)  # no duplicated or missing steps in the curve
    for s in want:
        assert got[s]["loss"] == pytest.approx(want[s]["loss"], abs=1e-5), s
        assert got[s]["data_hash"] == want[s]["data_hash"]


def test_corrupt_checkpoint_falls_back_to_previous(tiny_modernbert_dir, isolated_runs_dir):
    from backend.engine.checkpoint import latest_good

    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "c", recipe="mlm"))
    train_run(run)
    cks = sorted((run / "checkpoints").glob("step-*"))
    newest = cks[-1]
    victim = newest / "model" / "model.safetensors"
    victim.write_bytes(victim.read_bytes()[:100])  # truncated
    msgs = []
    found = latest_good(run, log=msgs.append)
    assert found[0] == cks[-2]
    assert str(victim) in msgs[0] and "truncated" in msgs[0]
    # and resume goes on from the previous good checkpoint (of a run stopped before the end)
    shutil.rmtree(run / "final")
    st = train_run(run, resume=True)
    assert st["state"] == "done"
    assert any(f"from {cks[-2].name}" in line for line in (run / "train.log").read_text().splitlines())


def test_a_run_is_never_trained_twice_at_once(tiny_modernbert_dir, isolated_runs_dir):
    """The CLI claims the runs it prepares (the queue worker skips them) and each trainer holds a lock."""
    import fcntl

    from backend.core.process import Busy as RunBusyError
    from backend.runs.jobs import queued_runs

    runs = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "lk", recipe="pair"), claim=True)
    assert queued_runs(isolated_runs_dir) == []  # claimed by this live process
    with open(runs[0] / ".train.lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # someone else is training it
        with pytest.raises(RunBusyError, match="already being trained"):
            train_run(runs[0])
    assert read_status(runs[0])["state"] == "queued"  # untouched


def test_run_made_before_newer_config_keys_still_trains_and_resumes(tiny_modernbert_dir, isolated_runs_dir):
    """config.yaml written by an older version (no train.data_seed / train.compile) reads with their defaults."""
    import yaml

    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "old", recipe="mlm"))
    saved = yaml.safe_load((run / "config.yaml").read_text())
    del saved["train"]["data_seed"], saved["train"]["compile"]
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    assert train_run(run)["state"] == "done"
    shutil.rmtree(run / "final")  # stopped before the end, then resumed
    assert train_run(run, resume=True)["state"] == "done"


def test_run_made_before_the_token_store_resumes_and_reproduces(tiny_modernbert_dir, isolated_runs_dir):
    """A run dir from before the store (data_info.json without the cache keys, no cache at all) resumes from its
    checkpoint, builds the store, and the resumed steps reproduce the uninterrupted run."""
    import shutil

    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "pre", recipe="mlm"))
    assert train_run(run)["state"] == "done"
    want = train_rows(run)
    info = json.loads((run / "data_info.json").read_text())
    shutil.rmtree(Path(info["cache_path"]).parent)  # no token store anywhere
    old = {k: v for k, v in info.items() if k not in ("cache_path", "cache_bytes", "cache_hit", "prepare_seconds")}
    (run / "data_info.json").write_text(json.dumps(old))
    got = resume_from_first_checkpoint(run, want)
    assert all(got[s]["data_hash"] == want[s]["data_hash"] for s in want)
    new = json.loads((run / "data_info.json").read_text())
    assert {k: new[k] for k in old} == old and new["cache_hit"] is False

"""Sweeps that train for real (tiny runs of 1-2 steps): a 2x2 grid x 2 seeds from the CLI, killed with kill -9 and
resumed to its report; cancel; and the submitit LocalExecutor path."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from backend.core.paths import REPO_ROOT
from backend.core.process import pid_alive
from backend.engine import rundir
from backend.runs import jobs
from backend.sweeps import sweep

pytestmark = pytest.mark.slow


def _config(tmp_path: Path, model_dir: Path) -> Path:
    cfg = {
        "name": "e2e",
        "model": {"name": str(model_dir)},
        "data": {"corpus": "demo", "heldout_fraction": 0.1},
        "train": {"seq_len": 64, "batch_size": 4, "lr": 1e-3, "precision": "fp32"},
        "recipe": "clm_detour",
        "phases": {"main": {"tokens": 256}, "decay": {"steps": 1}},
        "logging": {"log_every": 1, "eval_every": 4, "eval_batches": 1, "checkpoint_every": 1},
    }
    p = tmp_path / "tiny.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "backend", "sweep", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_a_2x2_sweep_survives_kill_9_and_reports_cis_and_verdicts(tmp_path, tiny_modernbert_dir, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "sw"
    cfg = _config(tmp_path, tiny_modernbert_dir)
    grid = ["--grid", "recipe=mlm,clm_detour", "--grid", "phases.main.tokens=256,512"]
    r = _cli(str(cfg), *grid, "--seeds", "2", "--max-concurrent", "2", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "same documents in the same order" in r.stdout and "queued 8 runs" in r.stdout
    m = json.loads((out / "sweep.json").read_text())
    assert len(m["cells"]) == 4 and m["seeds"] == [0, 1]

    # the machine "crashes" while runs train: the worker and every trainer die with SIGKILL
    deadline = time.time() + 120
    while time.time() < deadline and "running" not in sweep.cell_states(out).values():
        time.sleep(0.2)
    worker = jobs.worker_pid(out / "runs")
    assert worker is not None
    os.kill(worker, signal.SIGKILL)
    killed = []
    for d in (out / "runs").iterdir():
        st = rundir.read_status(d) if (d / "status.json").exists() else {}
        for pid in (st.get("pid"), st.get("launched_pid")):
            if pid and pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
                killed.append(d.name)
    assert killed
    time.sleep(0.5)
    states = sweep.cell_states(out)
    assert not all(s == "done" for s in states.values())

    r = _cli("--resume", str(out), "--wait")
    assert r.returncode == 0, r.stdout + r.stderr
    assert set(sweep.cell_states(out).values()) == {"done"}
    rep = json.loads((out / "report.json").read_text())
    rows = rep["tables"]["heldout_mlm_loss"]
    assert len(rows) == 4 and all(row["n"] == 2 and row["ci95"][0] <= row["mean"] <= row["ci95"][1] for row in rows)
    refs = [row for row in rows if row["reference"]]
    assert [row["values"]["recipe"] for row in refs] == ["mlm", "mlm"]  # one reference per budget line
    deltas = [row["delta"] for row in rows if row["delta"]]
    assert len(deltas) == 2 and all(d["verdict"] in ("better", "worse", "inconclusive") for d in deltas)
    assert all(d["ci95"][0] <= d["mean"] <= d["ci95"][1] for d in deltas)
    md = (out / "report.md").read_text()
    assert "95% CI" in md and "| reference |" in md and "alpha 0.05" in md
    assert (out / "report.html").exists() and (out / "figures" / "heldout_mlm_loss.html").exists()
    again = sweep.finish(out, progress=lambda _: None, jobs=2)  # two measuring processes: the same cached numbers
    assert [r["mean"] for r in again["tables"]["heldout_mlm_loss"]] == [r["mean"] for r in rows]


def test_cancel_stops_the_rest_of_a_sweep(tmp_path, tiny_modernbert_dir):
    m = sweep.plan_sweep(_config(tmp_path, tiny_modernbert_dir), grid=["recipe=mlm,clm_detour"], seeds=2)
    out = sweep.launch(m, tmp_path / "sw")
    msgs = sweep.cancel(out)
    assert msgs and json.loads((out / "sweep.json").read_text())["state"] == "cancelled"
    st = sweep.wait(out, poll_s=0.5, timeout_s=120)
    assert st["finished"] and st["counts"].get("cancelled", 0) >= 3  # at most the first one had started
    # the same sweep again (what re-running the same command does) re-queues the cancelled runs; another is refused
    again = sweep.plan_sweep(_config(tmp_path, tiny_modernbert_dir), grid=["recipe=mlm,clm_detour"], seeds=2)
    assert sweep.launch(again, out) == out and "queued" in sweep.cell_states(out).values()
    sweep.cancel(out)
    other = sweep.plan_sweep(
        _config(tmp_path, tiny_modernbert_dir), grid=["phases.decay.mlm_probability=0.15,0.2"], seeds=2
    )
    with pytest.raises(sweep.SweepError, match="another sweep"):
        sweep.launch(other, out)
    sweep.wait(out, poll_s=0.5, timeout_s=120)


def test_a_corrected_sweep_replaces_a_failed_launch_that_queued_nothing(tmp_path, tiny_modernbert_dir):
    """A launch that wrote its manifest and then failed leaves no run: the corrected command may reuse --out."""
    from backend.sweeps.manifest import write_manifest

    out = tmp_path / "sw"
    out.mkdir()
    failed = sweep.plan_sweep(_config(tmp_path, tiny_modernbert_dir), grid=["recipe=mlm,clm_detour"], seeds=2)
    write_manifest(out, {**failed, "state": "running"})
    fixed = sweep.plan_sweep(
        _config(tmp_path, tiny_modernbert_dir), grid=["phases.decay.mlm_probability=0.15,0.2"], seeds=2
    )
    assert sweep.launch(fixed, out) == out
    sweep.cancel(out)
    assert json.loads((out / "sweep.json").read_text())["axes"] == fixed["axes"]
    sweep.wait(out, poll_s=0.5, timeout_s=120)
    with pytest.raises(sweep.SweepError, match="already on disk"):  # now its runs exist: another is refused
        sweep.launch(failed, out)


def test_submitit_local_executor_trains_every_cell_and_evaluates_it(tmp_path, tiny_modernbert_dir):
    """Each run a submitit job (LocalExecutor), then NER fine-tuning and CKA against the reference cell."""
    from backend.core.paths import DEMO_CORPUS, DEMO_NER_DIR

    ev = {
        "task": "ner",
        "data": str(DEMO_NER_DIR),
        "seeds": 1,
        "hparams": {"epochs": 1, "max_train_examples": 16, "max_eval_examples": 16, "max_len": 32},
        "cka_texts": str(DEMO_CORPUS),
        "cka_n_texts": 8,
        "cka_max_len": 32,
    }
    m = sweep.plan_sweep(
        _config(tmp_path, tiny_modernbert_dir), grid=["recipe=mlm,clm_detour"], seeds=1, executor="local", evaluation=ev
    )
    res = sweep.run_sweep(m, tmp_path / "sw", wait_for=True, progress=lambda s: None)
    out = Path(res["out"])
    ids = json.loads((out / "submitit.json").read_text())
    assert sorted(ids) == sorted(r for c in m["cells"] for r in c["runs"].values())
    assert set(sweep.cell_states(out).values()) == {"done"}
    assert not (out / "runs" / ".queue.lock").exists() or jobs.worker_pid(out / "runs") is None  # no queue used
    tables = res["report"]["tables"]
    assert len(tables["heldout_mlm_loss"]) == 2 and res["report"]["primary"] == "finetune"
    assert all(0 <= row["mean"] <= 100 for row in tables["finetune"])  # a test F1 per cell, in points
    cka = {row["label"]: row["mean"] for row in tables["cka_divergence"]}
    assert cka["recipe=mlm"] is None and 0 < cka["recipe=clm_detour"] < 1  # the reference is not compared to itself

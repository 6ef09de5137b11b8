"""Sweeps without training: the statistics against scipy and published power values, the grid and its
matched-budget rule, and one run per GPU (assignment, and a queue worker that pins what it launches)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from scipy import stats as sps

from backend.core.errors import ConfigError
from backend.evaluation.stats import paired_t_power, seeds_needed, t_interval, verdict
from backend.runs import gpus, jobs
from backend.sweeps.grid import expand_cells, parse_axis
from backend.sweeps.sweep import plan_sweep
from tests.conftest import tiny_train_cfg


def _finished(out, run: str) -> None:
    """A sweep's run folder that trained to the end (the report reads its results, not its weights)."""
    from backend.engine import rundir

    d = out / "runs" / run
    d.mkdir(parents=True)
    (d / "config.yaml").write_text("{}")
    rundir.write_status(d, state="done")


# --------------------------------------------------------------------------------------------------------- stats


def test_t_interval_matches_scipy():
    vals = [0.61, 0.64, 0.58, 0.66, 0.63]
    lo, hi = t_interval(vals)
    ref = sps.t.interval(0.95, len(vals) - 1, loc=sum(vals) / len(vals), scale=sps.sem(vals))
    assert lo == pytest.approx(ref[0], abs=1e-12) and hi == pytest.approx(ref[1], abs=1e-12)
    assert t_interval([1.0]) is None


def test_verdicts_follow_the_interval_and_the_metric_direction():
    assert verdict([0.1, 0.3]) == "better"
    assert verdict([0.1, 0.3], higher_is_better=False) == "worse"  # a loss that went up
    assert verdict([-0.3, -0.1], higher_is_better=False) == "better"
    assert verdict([-0.1, 0.2]) == "inconclusive"
    assert verdict(None) == "inconclusive"


def test_power_and_seeds_needed_match_published_values():
    # G*Power, paired t (matched pairs), two-sided alpha 0.05: dz = 1, n = 10 -> power 0.8031; dz = 0.5 needs 34
    # pairs (power 0.8078) for 0.8; dz = 0.8 needs 15 (0.8213).
    assert paired_t_power(10, 1.0) == pytest.approx(0.8031, abs=5e-4)
    assert paired_t_power(34, 0.5) == pytest.approx(0.8078, abs=5e-4)
    assert seeds_needed(1.0, 1.0) == 10
    assert seeds_needed(-0.5, 1.0) == 34  # the sign does not matter
    assert seeds_needed(0.8, 1.0) == 15
    assert seeds_needed(0.0, 1.0) is None and seeds_needed(0.3, None) is None


# ---------------------------------------------------------------------------------------------------------- grid


def test_axes_parse_yaml_values_and_cells_cover_the_product():
    a = parse_axis("phases.main.tokens=1024, 2048")
    b = parse_axis("recipe=mlm,clm_detour")
    assert a.values == [1024, 2048] and b.values == ["mlm", "clm_detour"]
    cells = expand_cells([a, b])
    assert [c.values for c in cells] == [
        {"phases.main.tokens": 1024, "recipe": "mlm"},
        {"phases.main.tokens": 1024, "recipe": "clm_detour"},
        {"phases.main.tokens": 2048, "recipe": "mlm"},
        {"phases.main.tokens": 2048, "recipe": "clm_detour"},
    ]
    assert len({c.slug for c in cells}) == 4
    with pytest.raises(ConfigError, match="--seeds"):
        parse_axis("train.seed=1,2")
    with pytest.raises(ConfigError, match="twice"):
        parse_axis("recipe=mlm,mlm")


def _base(tiny_modernbert_dir) -> dict:
    cfg = tiny_train_cfg(tiny_modernbert_dir, name="u", **{"phases.main.steps": "null", "phases.main.tokens": 1024})
    return cfg


def test_a_budget_axis_is_fine_and_every_cell_is_named_and_sized(tiny_modernbert_dir):
    m = plan_sweep(_base(tiny_modernbert_dir), grid=["recipe=mlm,clm_detour", "phases.main.tokens=1024,2048"], seeds=2)
    assert m["matched"]["budget_axes"] == ["phases.main.tokens"]
    # 4 decay steps x 256 tokens ride on top of the main phase's tokens
    assert sorted({c["tokens"] for c in m["cells"]}) == [1024 + 1024, 2048 + 1024]
    assert "compare cells within a budget" in m["summary"] and "same documents in the same order" in m["summary"]
    assert sum(len(c["runs"]) for c in m["cells"]) == 8 and m["seeds"] == [0, 1]
    assert m["reference"] == "mlm"


def test_a_key_that_changes_the_budget_of_only_some_cells_is_refused(tiny_modernbert_dir):
    # the batch size changes the tokens of the 4-step decay but not of the main phase (given in tokens): neither
    # axis alone fixes the compute, so cells would be compared at different budgets
    grid = ["train.batch_size=4,8", "phases.decay.steps=2,4"]
    with pytest.raises(ConfigError, match="allow-unmatched-budget"):
        plan_sweep(_base(tiny_modernbert_dir), grid=grid, seeds=1)
    m = plan_sweep(_base(tiny_modernbert_dir), grid=grid, seeds=1, allow_unmatched_budget=True)
    assert m["matched"]["matched_budget"] is False and "NOT matched" in m["summary"]
    assert "train.batch_size" in m["summary"]  # the packing changes along it: the summary says so


def test_a_wrong_reference_or_key_is_refused_before_anything_is_queued(tiny_modernbert_dir, tmp_path):
    with pytest.raises(ConfigError, match="--reference"):
        plan_sweep(_base(tiny_modernbert_dir), grid=["recipe=mlm,clm_detour"], reference="pair")
    with pytest.raises(ConfigError, match="unknown"):
        plan_sweep(_base(tiny_modernbert_dir), grid=["train.nope=1,2"])
    assert not (tmp_path / "sweeps").exists()


# ---------------------------------------------------------------------------------------------------------- GPUs


def test_gpu_assignment_gives_each_run_a_free_gpu():
    assert gpus.pick_gpu(["0", "1", "2"], []) == "0"
    assert gpus.pick_gpu(["0", "1", "2"], ["0", None, "2"]) == "1"
    assert gpus.pick_gpu(["0", "1"], ["0", "1"]) is None
    assert gpus.slots(8, ["0", "1"]) == 2 and gpus.slots(1, ["0", "1"]) == 1 and gpus.slots(3, []) == 3


def test_visible_gpus_reads_the_environment(monkeypatch):
    monkeypatch.setenv("DETOUR_GPUS", "2, 3")
    assert gpus.visible_gpus() == ["2", "3"]
    monkeypatch.delenv("DETOUR_GPUS")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert gpus.visible_gpus() == []


PINNED = r"""
import json, os, sys, time
sys.path.insert(0, os.environ["REPO"])
from backend.engine import rundir
d = sys.argv[1]
rundir.write_status(d, state="running", pid=os.getpid(), started_at=time.time())
with open(os.path.join(os.path.dirname(d), "gpu.log"), "a") as f:
    f.write(json.dumps([os.path.basename(d), os.environ.get("CUDA_VISIBLE_DEVICES"), time.time()]) + "\n")
time.sleep(0.8)
rundir.write_status(d, state="done", finished_at=time.time())
"""


def test_a_pinning_worker_runs_one_run_per_gpu(tmp_path, monkeypatch):
    from backend.core.atomic import write_yaml
    from backend.engine import rundir
    from backend.engine.config import default_config

    root = tmp_path / "q"
    script = tmp_path / "pinned.py"
    script.write_text(PINNED)
    monkeypatch.setenv("REPO", str(Path(__file__).resolve().parents[2]))
    for i in range(4):
        d = root / f"r{i}"
        d.mkdir(parents=True)
        write_yaml(d / "config.yaml", {**default_config(), "name": f"r{i}"})
        rundir.write_status(d, state="queued", created_at=time.time() + i, queued_at=time.time() + i)
    jobs.run_worker(
        root, max_concurrent=4, poll_s=0.1, gpus=["0", "1"], launch=lambda d, r: [sys.executable, str(script), str(d)]
    )
    rows = [json.loads(x) for x in (root / "gpu.log").read_text().splitlines()]
    assert sorted(r[0] for r in rows) == ["r0", "r1", "r2", "r3"]
    assert {r[1] for r in rows} == {"0", "1"}  # pinned, to the two GPUs only
    # never two runs on one GPU at once: the third run started only after one of the first two ended
    assert rows[2][2] - rows[0][2] > 0.5
    assert all(rundir.read_status(root / f"r{i}")["gpu"] in ("0", "1") for i in range(4))


# --------------------------------------------------------------------------------------------------------- report


def test_report_from_known_values(tiny_modernbert_dir, tmp_path, monkeypatch):
    """A sweep folder whose runs 'finished' with known held-out losses: the table, the paired deltas, the verdicts
    and the seeds needed are the textbook numbers, and the app's view draws the figure."""
    from backend.core import atomic, paths
    from backend.sweeps.manifest import write_manifest
    from backend.sweeps.report import write_report

    monkeypatch.setenv(paths.SWEEPS_ENV, str(tmp_path / "sweeps"))
    m = plan_sweep(_base(tiny_modernbert_dir), grid=["recipe=mlm,clm_detour"], seeds=3, name="known")
    out = tmp_path / "sweeps" / "known"
    write_manifest(out, {**m, "state": "running"})
    losses = {"mlm": [2.0, 2.2, 1.9], "clm_detour": [2.1, 2.45, 2.0]}  # diffs 0.1, 0.25, 0.1
    for c in m["cells"]:
        for i, (_seed, run) in enumerate(sorted(c["runs"].items())):
            _finished(out, run)
            atomic.write_json(out / "results" / f"{run}.json", {"heldout_mlm_loss": losses[c["values"]["recipe"]][i]})
    rep = write_report(out, png=False)
    ref, det = rep["tables"]["heldout_mlm_loss"]
    assert ref["reference"] and ref["delta"] is None
    assert det["mean"] == pytest.approx(sum(losses["clm_detour"]) / 3)
    diffs = [0.1, 0.25, 0.1]
    d = det["delta"]
    ci = sps.t.interval(0.95, 2, loc=sum(diffs) / 3, scale=sps.sem(diffs))
    assert d["mean"] == pytest.approx(0.15) and d["ci95"] == pytest.approx(list(ci))
    assert d["verdict"] == "inconclusive"  # [-0.065, 0.365]: contains 0
    sd = sps.tstd(diffs)
    assert d["seeds_needed"] == seeds_needed(0.15, sd) and d["seeds_needed"] > 3
    md = (out / "report.md").read_text()
    assert f"| inconclusive | {d['seeds_needed']} |" in md and "lower is better" in md  # the column the note explains
    assert "| verdict | seeds needed |" in md
    assert (out / "figures" / "heldout_mlm_loss.html").exists() and "<table>" in (out / "report.html").read_text()

    from app import sweeps_tab

    v = sweeps_tab.view("known")
    assert v["figure"] is not None and "6 done" in v["status"]


def test_a_gpu_box_gets_one_pinned_cell_per_gpu_by_default(tiny_modernbert_dir, monkeypatch):
    monkeypatch.setenv("DETOUR_GPUS", "0,1,2")
    m = plan_sweep(_base(tiny_modernbert_dir), grid=["recipe=mlm,clm_detour"])
    assert m["pin_gpus"] is True and m["max_concurrent"] == 3
    monkeypatch.setenv("DETOUR_GPUS", "")
    m = plan_sweep(_base(tiny_modernbert_dir), grid=["recipe=mlm,clm_detour"])
    assert m["pin_gpus"] is False and m["max_concurrent"] == 1


def test_report_keeps_both_seed_levels_and_pools_a_suite(tiny_modernbert_dir, tmp_path, monkeypatch):
    """Issue 31: one pretraining seed x five fine-tuning seeds per cell gave one number, 'CI -' and 'inconclusive';
    now the fine-tunes are paired by (pretraining seed, fine-tuning seed), in points, with the interval they
    support and a note that pretraining variance is not measured; a suite is pooled into one verdict."""
    from backend.core import atomic, paths
    from backend.sweeps.manifest import write_manifest
    from backend.sweeps.report import write_report

    monkeypatch.setenv(paths.SWEEPS_ENV, str(tmp_path / "sweeps"))
    m = plan_sweep(_base(tiny_modernbert_dir), grid=["recipe=mlm,clm_detour"], seeds=1, name="two")
    out = tmp_path / "sweeps" / "two"
    write_manifest(out, {**m, "state": "running", "evaluation": {**m["evaluation"], "suite": "s.yaml"}})
    ft = {"mlm": [0.29, 0.41, 0.57, 0.35, 0.48], "clm_detour": [0.33, 0.44, 0.60, 0.37, 0.52]}  # +2.4 pts each
    for c in m["cells"]:
        [(_seed, run)] = c["runs"].items()
        _finished(out, run)
        vals = ft[c["values"]["recipe"]]
        by_seed = {str(f): v for f, v in enumerate(vals)}
        suite = {t: {f: v + 0.01 * i for f, v in by_seed.items()} for i, t in enumerate(("ncbi", "anatem"))}
        atomic.write_json(
            out / "results" / f"{run}.json",
            {"finetune": sum(vals) / 5, "finetune_by_seed": by_seed, "suite_scores": suite,
             "suite_metrics": {"ncbi": "f1", "anatem": "f1"}},
        )  # fmt: skip
    rep = write_report(out, png=False)
    ref, det = rep["tables"]["finetune"]
    assert ref["n"] == 5 and ref["ci95"] is not None and "not measured" in ref["interval"]
    assert ref["mean"] == pytest.approx(100 * sum(ft["mlm"]) / 5)  # points
    d = det["delta"]
    diffs = [100 * (b - a) for a, b in zip(ft["mlm"], ft["clm_detour"], strict=True)]
    assert d["n"] == 5 and d["mean"] == pytest.approx(sum(diffs) / 5)
    assert d["ci95"] == pytest.approx(list(sps.t.interval(0.95, 4, loc=sum(diffs) / 5, scale=sps.sem(diffs))))
    assert d["verdict"] == "better" and "pretraining variance not measured" in d["interval"]
    su = rep["suite"]
    assert su["tasks"] == ["ncbi", "anatem"]
    [c] = su["comparisons"]
    assert (c["a"], c["b"]) == (det["label"], ref["label"]) and c["verdict"] == f"{det['label']} better"
    md = (out / "report.md").read_text()
    assert "Suite `s.yaml`" in md and "Verdict over the suite" in md and "Seed levels: one pretraining seed" in md


def test_two_pretraining_seeds_get_the_same_rule_as_the_suite_and_a_constant_task_is_left_out(
    tiny_modernbert_dir, tmp_path, monkeypatch
):
    """Issue 41 section 3, real case 2 in a sweep: two pretraining seeds x three fine-tuning seeds per cell. The
    old nested bootstrap gave the delta [-2.59, -1.84] ('worse'); the one rule gives the t interval over the two
    pretraining-seed means (as the cell table does), inconclusive. A suite task where every fine-tune of both
    cells gave one constant answer is left out of the suite verdict, and the report says so."""
    from backend.core import atomic, paths
    from backend.sweeps.manifest import write_manifest
    from backend.sweeps.report import write_report

    monkeypatch.setenv(paths.SWEEPS_ENV, str(tmp_path / "sweeps"))
    m = plan_sweep(_base(tiny_modernbert_dir), grid=["recipe=mlm,clm_detour"], seeds=2, name="two-pre")
    out = tmp_path / "sweeps" / "two-pre"
    write_manifest(out, {**m, "state": "running", "evaluation": {**m["evaluation"], "suite": "s.yaml"}})
    shift = {0: -2.53, 1: -1.88}  # clm_detour - mlm per pretraining seed, in points
    for c in m["cells"]:
        for i, (_seed, run) in enumerate(sorted(c["runs"].items())):
            _finished(out, run)
            det = c["values"]["recipe"] == "clm_detour"
            by = {str(f): (60 + i + 0.3 * f + (shift[i] + e if det else 0.0)) / 100
                  for f, e in enumerate((-0.12, 0.0, 0.12))}  # fmt: skip
            atomic.write_json(
                out / "results" / f"{run}.json",
                {"finetune": sum(by.values()) / 3, "finetune_by_seed": by,
                 "suite_scores": {"ncbi": by, "hoc": dict.fromkeys(by, 0.0)},
                 "suite_metrics": {"ncbi": "f1", "hoc": "macro_f1"}, "suite_constant": {"hoc": list(by)}},
            )  # fmt: skip
    rep = write_report(out, png=False)
    ref, det = rep["tables"]["finetune"]
    d = det["delta"]
    means = [shift[0], shift[1]]
    assert d["ci95"] == pytest.approx(list(sps.t.interval(0.95, 1, loc=sum(means) / 2, scale=sps.sem(means))), abs=1e-9)
    assert d["verdict"] == "inconclusive" and "2 pretraining-seed means" in d["interval"]
    [c] = rep["suite"]["comparisons"]
    assert c["excluded_tasks"] == {"hoc": "every run of both models gave one constant answer"}
    assert c["verdict"] == "inconclusive" and c["aggregate"]["mean_delta"]["ci95"] == pytest.approx(d["ci95"], abs=1e-9)
    md = (out / "report.md").read_text()
    assert "Left out of the aggregate (they measure nothing): hoc" in md


# --------------------------------------------------------------------------------------------------------- slurm


def test_slurm_settings_come_from_the_config_and_bad_ones_are_refused_naming_the_key():
    from backend.engine.config import load_config
    from backend.sweeps.cluster import _additional, slurm_settings

    cfg = load_config(None, ["slurm.partition=gpu", "slurm.sbatch=--qos=high --exclusive"])
    sl = slurm_settings(cfg["slurm"])
    assert sl["partition"] == "gpu" and sl["time_min"] == 1440 and sl["sbatch"] == ["--qos=high", "--exclusive"]
    assert _additional(sl["sbatch"]) == {"qos": "high", "exclusive": True}  # submitit writes #SBATCH --qos=high
    old = slurm_settings({"partition": None, "timeout_min": 5, "gpus_per_cell": 2})  # a sweep.json of before
    assert (old["time_min"], old["gpus_per_task"]) == (5, 2)
    assert slurm_settings({"sbatch": ["#SBATCH --qos=high", "--exclusive"]})["sbatch"] == sl["sbatch"]
    with pytest.raises(ConfigError, match="one long option"):
        slurm_settings({"sbatch": "qos=high"})
    with pytest.raises(ConfigError, match="unknown key"):
        slurm_settings({"nodes": 2})
    with pytest.raises(ConfigError) as err:
        load_config(None, ["slurm.time_min=0"])
    assert err.value.key == "slurm.time_min"


def test_where_a_job_trains_is_no_change_a_resume_refuses(tmp_path):
    from backend.engine.resume_guard import training_keys

    a = tiny_train_cfg(Path("m"), "x")
    b = tiny_train_cfg(Path("m"), "x", **{"slurm.partition": "other", "slurm.time_min": 5})
    assert training_keys(a) == training_keys(b)


def test_a_queue_worker_leaves_a_run_slurm_trains(tmp_path, tiny_modernbert_dir):
    from backend.engine import rundir
    from backend.runs.train import prepare_runs

    (d,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "s", recipe="mlm"), root=tmp_path)
    assert [r.name for r in jobs.queued_runs(tmp_path)] == ["s"]
    rundir.write_status(d, executor="slurm", submitit_job="7")
    assert jobs.queued_runs(tmp_path) == []


def test_a_slurm_launch_where_sbatch_is_missing_is_refused_before_anything_is_prepared(
    tmp_path, tiny_modernbert_dir, monkeypatch
):
    from backend.sweeps.cluster import SlurmError, submit_config

    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SlurmError, match="sbatch.* not on this machine's PATH"):
        submit_config(tiny_train_cfg(tiny_modernbert_dir, "x", recipe="mlm"), root=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()

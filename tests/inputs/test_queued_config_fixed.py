"""A queued run's config is fixed when it is queued: its training keys and their hash are in status.json (and in a
sweep's manifest); a run whose config.yaml changed before it starts is refused naming the key, never trained."""

from __future__ import annotations

import pytest
import yaml

from backend.core.errors import ConfigError
from backend.engine.rundir import read_status
from backend.runs.train import prepare_runs, train_run
from conftest import tiny_train_cfg


def test_a_queued_run_edited_before_it_starts_is_refused_naming_the_keys(tiny_modernbert_dir):
    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "fixed", recipe="mlm"))
    st = read_status(run)
    assert st["state"] == "queued" and len(st["queued_config_sha256"]) == 64
    assert st["queued_config"]["phases.main.steps"] == 8
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["phases"]["main"]["steps"] = 2
    cfg["train"]["seed"] = 7
    (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    with pytest.raises(ConfigError, match=r"changed since the run was queued \(phases.main.steps 8 -> 2, train.seed"):
        train_run(run)
    st = read_status(run)
    assert st["state"] == "failed" and "phases.main.steps 8 -> 2" in st["error"]
    assert not (run / "metrics.jsonl").exists() or not (run / "metrics.jsonl").read_text().strip()


def test_keys_that_change_no_weight_may_still_change(tiny_modernbert_dir):
    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "logs", recipe="mlm", phases__main__steps=2,
                                         phases__decay__steps=1))  # fmt: skip
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["logging"]["log_every"] = 2
    (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    assert train_run(run)["state"] == "done"


def test_a_sweep_reports_compute_from_what_ran(tiny_modernbert_dir, tmp_path, monkeypatch):
    """The report's "Compute: every cell trains the same N tokens" holds only where every done run's recorded config
    is the one queued (the manifest's ``config_sha256``); a run that trained another config is named instead."""
    from backend.core import atomic, paths
    from backend.engine import rundir
    from backend.engine.resume_guard import fixed_config
    from backend.sweeps.grid import Cell
    from backend.sweeps.manifest import write_manifest
    from backend.sweeps.report import write_report
    from backend.sweeps.sweep import plan_sweep, run_config

    monkeypatch.setenv(paths.SWEEPS_ENV, str(tmp_path / "sweeps"))
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(tiny_train_cfg(tiny_modernbert_dir, "b", recipe="mlm")))
    m = plan_sweep(str(base), grid=["train.lr=1e-3,2e-3"], seeds=2, name="ran")
    assert "Compute: every cell trains the same" in m["summary"]
    out = tmp_path / "sweeps" / "ran"
    hashes, edited = {}, None
    for c in m["cells"]:
        for seed, run in c["runs"].items():
            cfg = run_config(m["base"], Cell(c["index"], c["values"], c["label"], c["slug"]), int(seed), m["name"])
            cfg["name"] = run
            hashes[run] = fixed_config(cfg)[1]
            if edited is None:  # what the issue saw: one queued cell edited before it started
                edited = run
                cfg["phases"]["main"]["steps"] = 2
            d = out / "runs" / run
            d.mkdir(parents=True)
            atomic.write_yaml(d / "config.yaml", cfg)
            rundir.write_status(d, state="done")
            atomic.write_json(out / "results" / f"{run}.json", {"heldout_mlm_loss": 2.0})
    write_manifest(out, {**m, "state": "running", "config_sha256": hashes})
    rep = write_report(out, png=False)
    assert "every cell trains the same" not in rep["summary"]
    assert f"Compute: NOT as planned: {edited} trained a config other than the one queued" in rep["summary"]

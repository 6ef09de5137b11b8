"""The doctor: the loop's time split is real (a loader slowed on purpose shows up as data wait), train.log gets a line
per logged step, and the findings name the setting that fixes each, on run directories built by hand."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from backend.__main__ import main
from backend.core import atomic, process
from backend.detour import trainer
from backend.engine import rates, throughput
from backend.engine.models import load_masked_lm
from backend.engine.rundir import read_metrics
from backend.runs.doctor import diagnose, launch_estimate, report
from backend.runs.train import prepare_runs, train_run
from conftest import measured_rate, tiny_train_cfg

FEW = {"recipe": "clm_detour", "phases.main.steps": 6, "phases.decay.steps": 2, "logging.log_every": 2,
       "logging.eval_every": 100, "logging.checkpoint_every": 100, "logging.eval_batches": 1}  # fmt: skip


class _SlowStore:
    """The real token store, each batch read ``delay`` seconds late: a loader that cannot keep up."""

    def __init__(self, store, delay: float):
        self.store, self.delay = store, delay

    def __len__(self) -> int:
        return len(self.store)

    def rows(self, idx):
        time.sleep(self.delay)
        return self.store.rows(idx)


def _data_share(run: Path) -> float:
    rows = [r for r in read_metrics(run) if r["type"] == "train"]
    data = sum(r["time_split"]["data"] for r in rows)
    step = sum(r["time_split"][k] for r in rows for k in ("data", "forward_backward", "optimizer"))
    return data / step


def test_a_slow_loader_raises_the_data_wait_share(tiny_modernbert_dir, one_torch_thread, monkeypatch):
    (fast,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "fast", **FEW))
    assert train_run(fast)["state"] == "done"
    real_open = trainer.open_corpus

    def slow_open(*a, **kw):
        train, held, info = real_open(*a, **kw)
        return _SlowStore(train, 0.25), held, info

    monkeypatch.setattr(trainer, "open_corpus", slow_open)
    (slow,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "slow", **FEW))
    assert train_run(slow)["state"] == "done"
    fast_share, slow_share = _data_share(fast), _data_share(slow)
    assert fast_share < 0.15 and slow_share > 0.4 and slow_share > fast_share + 0.3, (fast_share, slow_share)
    slow_doc, fast_doc = diagnose(slow), diagnose(fast)
    assert any("waits for data" in f for f, _ in slow_doc["findings"])
    assert not any("waits for data" in f for f, _ in fast_doc["findings"])
    # defect 11: a line per logged step in train.log, with loss, tok/s and the split
    log = (slow / "train.log").read_text()
    steps = [line for line in log.splitlines() if "] step " in line]
    assert len(steps) == 4 and "loss" in steps[0] and "tok/s" in steps[0] and "data" in steps[0]
    # per phase: tok/s, MFU against a measured peak, and the machine row that says which
    assert [p["objective"] for p in fast_doc["phases"]] == ["clm", "mlm"]
    assert all(p["tokens_per_s"] > 0 and 0 < p["mfu"] < 1 for p in fast_doc["phases"])
    assert fast_doc["machine"]["precision"] == "fp32" and fast_doc["machine"]["peak_flops"] > 1e9
    assert "MFU" in report(fast_doc) and fast_doc["eta_s"] == 0.0
    # a phase of a few steps records no rate for the Launch form's estimate (engine/rates.py: too few to mean
    # anything); one measured here times the next launch of this size
    n = fast_doc["machine"]["parameters"]
    assert rates.pick(n, "fp32", "cpu") is None
    measured_rate(n, "fp32", "cpu", "clm", 900.0)
    est = launch_estimate(n, "fp32", "cpu", {"clm": 10_000, "mlm": 1_000})
    assert est and est.startswith("~") and "CLM" in est
    assert launch_estimate(n * 10, "fp32", "cpu", {"mlm": 1}) is None  # another size: not measured here


def _write_run(root: Path, name: str, cfg: dict, machine: dict, rows: list[dict], status: dict) -> Path:
    d = root / name
    d.mkdir(parents=True)
    atomic.write_yaml(d / "config.yaml", cfg)
    atomic.write_json(d / "status.json", status)
    atomic.write_text(d / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in [machine, *rows]))
    return d


def _row(step: int, split: dict, phase="main", objective="clm", tps=1000, rate=500.0) -> dict:
    parts = {k: 0.0 for k in (*throughput.PARTS, "other")} | {k: v for k, v in split.items() if not k.startswith("n_")}
    counts = {"n_eval": split.get("n_eval", 0), "n_checkpoint": split.get("n_checkpoint", 0)}
    return {"type": "train", "step": step, "phase": phase, "objective": objective, "tokens_seen": step * tps,
            "tokens_per_s": rate, "mfu": 0.2, "time_split": parts | {"wall": sum(parts.values())} | counts}  # fmt: skip


def test_findings_name_the_setting_that_fixes_each(tmp_path):
    cfg = {"name": "gpu", "train": {"seq_len": 2048, "compile": False},
           "logging": {"eval_every": 25, "eval_batches": 8, "checkpoint_every": 10, "log_every": 5},
           "_meta": {"attn_implementation": {"resolved": "sdpa"}, "compile": {"resolved": False},
                     "precision": {"resolved": "fp32"}}}  # fmt: skip
    machine = {"type": "machine", "step": 0, "device": "cuda:0", "precision": "fp32", "bf16_supported": True,
               "peak_flops": 67e12, "peak_source": "published", "parameters": 149_000_000, "world": 1}  # fmt: skip
    rows = [_row(s, {"data": 0.5, "forward_backward": 1.0, "checkpoint": 4.0, "n_checkpoint": 1}) for s in (10, 20)]
    d = _write_run(tmp_path, "gpu", cfg, machine, rows,
                   {"state": "running", "tokens_seen": 20_000, "total_tokens": 131_000,
                    "pid": os.getpid(), "pid_identity": process.identity()})  # fmt: skip  # a running run: ours
    doc = diagnose(d)
    text = dict(doc["findings"])
    assert text["checkpoint writes stall 4.0 s each (73% of the wall time)"].startswith(
        "raise logging.checkpoint_every"
    )
    assert "flex_attention would give about 1.5x at 2048 tokens" in " ".join(text)
    assert text["precision fp32 on a GPU with bf16"].startswith("train.precision=bf16")
    assert text["compile is off"].startswith("train.compile=true")
    assert "waits for data" not in " ".join(text)  # 9%: under the threshold
    assert doc["findings"][0][0].startswith("checkpoint writes stall")  # the biggest cost first
    # ETA: 111k tokens left at the effective rate (20k tokens in 11 s of wall time, checkpoints included)
    assert doc["eta_s"] == pytest.approx(111_000 / (20_000 / 11.0))
    out = report(doc)
    assert "ETA: 1m01s" in out and "checkpoint 8.0 s" in out


def test_a_quiet_run_gets_no_false_alarm_and_the_cli_prints_it(tmp_path, capsys):
    cfg = {"name": "ok", "train": {"seq_len": 256}, "logging": {},
           "_meta": {"attn_implementation": {"resolved": "sdpa"}, "compile": {"resolved": True}}}  # fmt: skip
    machine = {"type": "machine", "step": 0, "device": "cpu", "precision": "bf16", "peak_flops": 8e11,
               "peak_source": "measured", "parameters": 5_500_000}  # fmt: skip
    rows = [_row(s, {"data": 0.01, "forward_backward": 1.0, "optimizer": 0.1}) for s in (5, 10, 15)]
    d = _write_run(tmp_path, "ok", cfg, machine, rows, {"state": "done"})
    assert diagnose(d)["findings"] == []
    assert main(["doctor", str(d)]) == 0
    out = capsys.readouterr().out
    assert "500 tok/s, MFU 20.0%" in out and "findings: none" in out
    assert main(["doctor", str(tmp_path / "absent")]) == 2


def test_metrics_lines_that_are_not_json_objects_are_skipped_like_torn_ones(tmp_path, capsys):
    """Bytes that are not UTF-8 (a traceback: UnicodeDecodeError) and a list or a number on a line (a traceback:
    'list' object has no attribute 'get') are not rows; the doctor reads the rows around them."""
    cfg = {"name": "odd", "train": {"seq_len": 256}, "logging": {},
           "_meta": {"attn_implementation": {"resolved": "sdpa"}, "compile": {"resolved": True}}}  # fmt: skip
    machine = {"type": "machine", "step": 0, "device": "cpu", "precision": "bf16", "peak_flops": 8e11,
               "peak_source": "measured", "parameters": 5_500_000}  # fmt: skip
    rows = [_row(s, {"data": 0.01, "forward_backward": 1.0, "optimizer": 0.1}) for s in (5, 10, 15)]
    d = _write_run(tmp_path, "odd", cfg, machine, rows, {"state": "done"})
    with open(d / "metrics.jsonl", "ab") as f:
        f.write(b'\x00\xff\xfe\n[1, 2]\n5\n"text"\n')
    assert len(read_metrics(d)) == 4  # the machine row and the three steps
    assert main(["doctor", str(d)]) == 0
    assert "500 tok/s, MFU 20.0%" in capsys.readouterr().out


def test_flops_per_token_counts_the_vocabulary_only_where_labelled():
    config = load_masked_lm("detour-tiny-en").config
    mlm, clm = (throughput.flops_per_token(config, 256, f) for f in (0.3, 1.0))
    vocab = 6 * config.hidden_size * config.vocab_size
    head = 6 * config.hidden_size**2
    assert clm - mlm == pytest.approx(0.7 * (vocab + head))
    h, i = config.hidden_size, config.intermediate_size  # 6 N: QKV, out, GLU in (2 x inter), MLP out
    matmuls = 6 * config.num_hidden_layers * (3 * h * h + h * h + 2 * h * i + i * h)
    attention = sum(12 * h * (256 if k == "full_attention" else config.local_attention + 1) for k in config.layer_types)
    assert clm == pytest.approx(matmuls + head + attention + vocab)


def test_evaluation_folders_get_seconds_per_seed_and_the_fine_tuning_rate(tmp_path, capsys):
    runs = [{"seed": 0, "status": "done", "train_time_s": 30.0, "n_train": 100, "epochs_run": 3, "device": "cpu"},
            {"seed": 1, "status": "done", "train_time_s": 50.0, "n_train": 100, "epochs_run": 3, "device": "cpu"},
            {"seed": 2, "status": "pending"}]  # fmt: skip
    results = {"task": "ner", "status": "running", "hparams": {"max_len": 128},
               "models": [{"label": "base", "runs": runs}, {"label": "late", "runs": [{"seed": 0}]}]}  # fmt: skip
    atomic.write_json(tmp_path / "results.json", results)
    assert main(["doctor", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "base: 2/3 seeds, 40 s per seed, 7.5 examples/s, <= 960 tokens/s" in out  # 600 examples in 80 s
    assert "late: no seed finished yet" in out


def test_the_launch_estimate_never_names_a_rate_that_was_not_measured():
    """Only CLM was measured for this size: an MNTP run's estimate once read '100 tok/s MNTP', a measurement that
    was never made. It now says whose rate stands in."""
    n = 123_457
    measured_rate(n, "fp32", "cpu", "clm", 100.0)
    est = launch_estimate(n, "fp32", "cpu", {"clm": 1_000, "mntp": 1_000})
    assert "100 tok/s CLM" in est and "MNTP not measured here, taken at CLM's 100 tok/s" in est
    assert "tok/s MNTP" not in est


BUSY_APP = """
import sys, time
from pathlib import Path
from backend.core.process import FileLock
lock = FileLock(Path(sys.argv[1]) / ".app.lock", "app").acquire()
print("holding", flush=True)
while True:  # an app busy with its users' requests
    sum(i * i for i in range(10_000))
"""


def test_a_run_slowed_while_the_app_computes_names_the_app(tmp_path, monkeypatch):
    """Issue 40: the doctor says when a run is being slowed by the app (its rate now against its own earlier rate,
    the app's CPU use measured through psutil)."""
    import subprocess
    import sys

    from backend.runs import doctor

    monkeypatch.setattr(doctor, "BUSY_CORES", 0.05)  # the app's share of 2 busy shared cores, whatever else runs
    cfg = {"name": "slowed", "train": {"seq_len": 64}, "logging": {}, "_meta": {}}
    machine = {"type": "machine", "step": 0, "device": "cpu", "precision": "fp32", "world": 1}
    rates = [900.0] + [1000.0] * 8 + [300.0] * 5  # warm-up, its own pace, then a third of it
    rows = [_row(10 * (i + 1), {"forward_backward": 1.0}, rate=r) for i, r in enumerate(rates)]
    status = {"state": "running", "tokens_seen": 14_000, "total_tokens": 1_000_000, "pid": os.getpid(),
              "pid_identity": process.identity()}  # fmt: skip
    d = _write_run(tmp_path, "slowed", cfg, machine, rows, status)
    steady = _write_run(tmp_path, "steady", cfg, machine, rows[:9], status)
    assert diagnose(steady)["slowdown"] is None  # its own pace all along: no alarm
    alone = diagnose(d)
    assert alone["slowdown"]["ratio"] == pytest.approx(0.3)
    assert alone["findings"][0][0].startswith("the run slowed to 300 tok/s over its last 5 logged steps, 30% of its "
                                              "earlier 1,000 tok/s")  # fmt: skip
    assert "the app" not in alone["findings"][0][0]  # no app serves this runs folder

    app = subprocess.Popen([sys.executable, "-c", BUSY_APP, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                           cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    try:
        assert app.stdout.readline().strip() == "holding"
        doc = diagnose(d)
    finally:
        app.kill()
        app.wait()
    finding, fix = doc["findings"][0]
    assert doc["slowdown"]["app_pid"] == app.pid and doc["slowdown"]["app_cores"] >= 0.05
    assert f"the app (pid {app.pid}) uses" in finding and "DETOUR_APP_SESSION_NICE" in fix
    assert finding in report(doc)

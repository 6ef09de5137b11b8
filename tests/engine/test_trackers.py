"""``logging.report_to``: the config key, the clear error for a missing package, and real trackers read back with
their own readers (TensorBoard's EventAccumulator, trackio's SQLite storage) against metrics.jsonl."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backend.core.errors import ConfigError
from backend.core.paths import REPO_ROOT
from backend.engine import trackers
from backend.engine.config import load_config
from backend.engine.rundir import read_metrics
from backend.runs.train import prepare_runs
from conftest import tiny_train_cfg


def _event_accumulator(path: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def _scalars(path: Path) -> dict[str, list[tuple[int, float]]]:
    acc = _event_accumulator(path)
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _expected(rows: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """What every tracker must hold: each metrics row's values under the tracker names, at the row's step."""
    out: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        for tag, v in trackers.train_values(r).items():
            out.setdefault(tag, []).append((r["step"], float(v)))
    return out


def _close(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> bool:
    return [s for s, _ in got] == [s for s, _ in want] and all(
        abs(a - b) <= 1e-5 * max(1.0, abs(b)) for (_, a), (_, b) in zip(got, want, strict=True)
    )


# --- the config key ----------------------------------------------------------------------------------------


def test_report_to_is_a_list_from_yaml_a_comma_string_or_none():
    assert load_config(None)["logging"]["report_to"] == []  # offline-first: no tracker unless asked
    assert load_config({"logging": {"report_to": ["trackio", "tensorboard"]}})["logging"]["report_to"] == [
        "trackio",
        "tensorboard",
    ]
    cfg = load_config(None, ["logging.report_to=tensorboard, trackio,tensorboard"])
    assert cfg["logging"]["report_to"] == ["tensorboard", "trackio"]  # each once, in order
    assert load_config(None, ["logging.report_to="])["logging"]["report_to"] == []
    assert load_config(None, ["logging.report_to=[wandb]"])["logging"]["report_to"] == ["wandb"]  # valid, if absent
    with pytest.raises(ConfigError, match=r"logging.report_to.*unknown tracker tensorbored; allowed: tensorboard, "
                       r"trackio, wandb, mlflow"):  # fmt: skip
        load_config(None, ["logging.report_to=tensorbored"])
    with pytest.raises(ConfigError, match="logging.report_to.*list of tracker names"):
        load_config({"logging": {"report_to": 3}})


def test_hyperparameters_are_flat_and_typed_for_tensorboard():
    flat = trackers.flatten({"train": {"lr": 2e-4, "betas": [0.9, 0.98], "data_seed": None, "fsdp": False}})
    assert flat == {"train.lr": 2e-4, "train.betas": "[0.9, 0.98]", "train.data_seed": "null", "train.fsdp": False}


def test_a_missing_tracker_package_fails_before_any_run_directory(tiny_modernbert_dir, isolated_runs_dir):
    if importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed here: this test needs a tracker whose package is missing")
    cfg = tiny_train_cfg(tiny_modernbert_dir, "nowandb", **{"logging.report_to": "tensorboard,wandb"})
    with pytest.raises(ConfigError, match=r"logging.report_to.*wandb is not installed here: pip install wandb"):
        prepare_runs(cfg)
    assert not (isolated_runs_dir / "nowandb").exists()


# --- real trackers, read back ------------------------------------------------------------------------------


def _train_in_its_own_process(run_dir: Path) -> None:
    """What the queue worker runs (``python -m backend train --run-dir``): trackio reads its folder at import, so a
    fresh process is also the only honest place to see where it writes."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("TRACKIO_DIR", None)
    proc = subprocess.run(
        [sys.executable, "-m", "backend", "train", "--run-dir", str(run_dir)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _trackio_logs(store: Path, run: str) -> tuple[list[dict], dict]:
    """The run's rows and config through trackio's own storage, in a process whose TRACKIO_DIR is ``store``."""
    code = (
        "import json, sys\n"
        "from trackio.sqlite_storage import SQLiteStorage as S\n"
        f"print(json.dumps([S.get_logs({trackers.PROJECT!r}, {run!r}), S.get_run_config({trackers.PROJECT!r}, "
        f"{run!r})], default=str))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "TRACKIO_DIR": str(store)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_tensorboard_and_trackio_hold_every_metric_row(tiny_modernbert_dir, isolated_runs_dir):
    pytest.importorskip("tensorboard")
    pytest.importorskip("trackio")
    cfg = tiny_train_cfg(
        tiny_modernbert_dir,
        "tracked",
        recipe="clm_detour",  # CLM main then MLM decay: both objectives, one phase switch
        **{"logging.report_to": "tensorboard,trackio", "phases.main.steps": 6, "phases.decay.steps": 2},
    )
    (run,) = prepare_runs(cfg)
    _train_in_its_own_process(run)
    rows = read_metrics(run)
    want = _expected(rows)
    assert {"train/loss", "train/loss_main_clm", "train/loss_decay_mlm", "train/lr", "train/grad_norm",
            "train/tokens_per_s", "eval/mlm_loss", "eval/clm_loss", "phase/index"} <= set(want)  # fmt: skip
    assert len(want["train/loss"]) == 8 and want["phase/index"] == [(0, 1.0), (6, 2.0)]

    # TensorBoard: the event files under the run directory, read by TensorBoard's own reader
    tb = run / "trackers" / "tensorboard" / trackers.PROJECT
    got = _scalars(tb)
    assert set(got) == set(want)
    for tag in want:
        assert _close(got[tag], want[tag]), (tag, got[tag], want[tag])
    hparam_runs = [d for d in tb.iterdir() if d.is_dir() and any(d.glob("events.out.tfevents.*"))]
    contents = [_event_accumulator(d).PluginTagToContent("hparams") for d in hparam_runs]
    from tensorboard.plugins.hparams import plugin_data_pb2

    starts = [plugin_data_pb2.HParamsPluginData.FromString(c).session_start_info for x in contents for c in x.values()]
    hp = next(s.hparams for s in starts if s.hparams)
    assert hp["train.lr"].number_value == pytest.approx(1e-3) and hp["recipe"].string_value == "clm_detour"
    assert hp["train.data_seed"].string_value == "null"

    # trackio: the local store beside the runs, read through trackio's storage
    logs, config = _trackio_logs(isolated_runs_dir / trackers.TRACKIO_STORE, "tracked")
    for tag, series in want.items():
        got_t = [(r["step"], float(r[tag])) for r in logs if tag in r]
        assert _close(got_t, series), (tag, got_t, series)
    assert config["recipe"] == "clm_detour" and config["phases.main.steps"] == 6
    assert "trackers: tensorboard -> " in (run / "train.log").read_text()


def test_evaluation_reports_each_seed_and_the_summary_to_tensorboard(tiny_modernbert_dir, tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from backend.__main__ import main as cli

    out = tmp_path / "ev"
    rc = cli(["evaluate", "--models", str(tiny_modernbert_dir), "--labels", "tiny", "--seeds", "0,1", "--out",
              str(out), "--epochs", "1", "--max-len", "32", "--max-train-examples", "16", "--max-eval-examples", "8",
              "--no-keep-models", "--report-to", "tensorboard"])  # fmt: skip
    assert rc == 0, capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    got = _scalars(out / "trackers" / "tensorboard" / trackers.PROJECT)
    runs = {r["seed"]: r for r in results["models"][0]["runs"]}
    assert [s for s, _ in got["test/tiny/f1"]] == [0, 1]
    for seed, value in got["test/tiny/f1"]:
        assert value == pytest.approx(runs[seed]["test"]["f1"], abs=1e-6)
    (step, mean), = got["summary/tiny/f1_mean"]  # fmt: skip
    assert step == 0 and mean == pytest.approx(results["models"][0]["summary"]["f1"]["mean"], abs=1e-6)

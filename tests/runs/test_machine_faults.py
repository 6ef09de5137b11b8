"""Issue 25, mechanism 3: the machine's faults get one line, and the run's state says what happened.

The faults are real: a small tmpfs that fills up, a tmpfs mounted read-only (root can write through permissions,
never through a read-only mount), real corrupt checkpoints and NaN weights. Where the machine does not let this
process mount (not root), those tests skip with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from backend.core import atomic, faults
from backend.core.paths import REPO_ROOT
from backend.engine import rundir
from backend.engine.config import default_config
from backend.engine.rundir import list_runs, read_status, write_status
from backend.runs.train import prepare_runs
from conftest import TINY_MODERNBERT, save_tiny_model, tiny_train_cfg

DEAD_PID = 2**22 + 12345


def cli(*argv: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "backend", *argv],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_line(proc: subprocess.CompletedProcess) -> str:
    """The CLI's answer to a user-actionable error: exit 2, no traceback anywhere on the terminal, one error line."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def _remount_ro(target: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(target)], check=True)


def _fill(folder: Path) -> None:
    """Write until the filesystem says ENOSPC."""
    with open(folder / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\1" * 4096)
        except OSError as exc:
            assert exc.errno in faults.NO_SPACE


# --- disk full ----------------------------------------------------------------------------------------------------


def test_the_reserve_records_the_failure_on_a_disk_that_is_full(small_fs):
    """With every block taken, writing status.json fails; the reserve held from the start gives the blocks back."""
    run = small_fs("disk", "1m") / "r"
    run.mkdir()
    write_status(run, state="running", pid=os.getpid())
    reserve = faults.SpaceReserve(run / ".failure-reserve")
    assert reserve.hold()
    _fill(run.parent)
    with pytest.raises(OSError):
        write_status(run, state="failed", error="disk full")
    reserve.write(lambda: write_status(run, state="failed", error="disk full"))
    assert read_status(run)["state"] == "failed" and not (run / ".failure-reserve").exists()


def test_disk_full_during_training_is_one_line_exit_2_and_the_run_reads_failed(
    small_fs, tiny_modernbert_dir, isolated_runs_dir
):
    """The run folder sits on a 1.5 MB disk: its config, status and metrics fit, its first checkpoint does not. The
    terminal gets one line naming the disk's file and what to do (exit 2); status.json says failed, not running."""
    root = small_fs("runs", "1500k")
    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "full", recipe="mlm"), root=root)
    proc = cli("train", "--run-dir", str(run))
    line = one_line(proc)
    assert "no space left on device" in line.lower() and str(root) in line and "free space" in line, line
    st = read_status(run)
    assert st["state"] == "failed" and "no space left on device" in st["error"].lower(), st
    assert list_runs(root)[0].state == "failed"


def test_a_dead_process_never_reads_running():
    """Every reader goes through read_status: a 'running' whose pid is gone is failed, with why and the resume."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        write_status(d, state="running", pid=DEAD_PID)
        st = read_status(d)
        assert st["state"] == "failed" and "is gone" in st["error"] and "--resume" in st["error"]
        write_status(d, state="running", pid=os.getpid())
        assert read_status(d)["state"] == "running"


@pytest.mark.parametrize("content", [b"", b'{"state": "runn', b"[]", b"\xff\xfe garbage", b'"running"'])
def test_a_truncated_or_garbage_status_reads_unknown(tmp_path, content):
    """A torn or foreign status.json is 'unknown' naming the folder, never a traceback and never 'running'."""
    (tmp_path / "status.json").write_bytes(content)
    assert read_status(tmp_path)["state"] == "unknown"
    write_status(tmp_path, state="queued")  # and a writer replaces it
    assert read_status(tmp_path)["state"] == "queued"


# --- read-only folders --------------------------------------------------------------------------------------------


def test_train_into_a_read_only_runs_folder_is_one_line(small_fs, tiny_modernbert_dir):
    root = small_fs("ro-runs", "1m", readonly=True)
    proc = cli("train", "--runs-dir", str(root), "--set", f"model.name={tiny_modernbert_dir}", "--name", "ro")
    line = one_line(proc)
    assert "read-only file system" in line and str(root) in line and "writable" in line, line


def test_resume_in_a_read_only_runs_folder_is_one_line(small_fs, tiny_modernbert_dir):
    root = small_fs("ro-resume", "2m")
    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "ro", recipe="mlm"), root=root)
    write_status(run, state="failed", error="killed")
    _remount_ro(root)
    line = one_line(cli("train", "--run-dir", str(run), "--resume"))
    assert "read-only file system" in line and str(run) in line, line


def test_evaluate_into_a_read_only_folder_is_one_line(small_fs, tiny_modernbert_dir):
    out = small_fs("ro-evals", "1m", readonly=True)
    proc = cli("evaluate", "--models", str(tiny_modernbert_dir), "--seeds", "1", "--epochs", "1", "--out", str(out))
    line = one_line(proc)
    assert "read-only file system" in line and str(out) in line, line


def test_the_queue_worker_on_a_read_only_runs_folder_is_one_line(small_fs):
    root = small_fs("ro-queue", "1m", readonly=True)
    line = one_line(cli("queue", "--root", str(root)))
    assert "read-only file system" in line and str(root) in line, line


def test_a_runs_folder_that_is_a_file_is_one_line(tmp_path, tiny_modernbert_dir):
    root = tmp_path / "runs-file"
    root.write_text("not a folder")
    proc = cli("train", "--runs-dir", str(root), "--set", f"model.name={tiny_modernbert_dir}", "--name", "f")
    line = one_line(proc)
    assert str(root) in line, line


# --- correct refusals: one line, exit 2, the traceback in train.log -----------------------------------------------


def _tiny_run(tmp_path: Path, model_dir: Path, name: str, **sets) -> Path:
    (run,) = prepare_runs(tiny_train_cfg(model_dir, name, recipe="mlm", **sets), root=tmp_path / "runs")
    return run


def test_nan_base_weights_are_a_one_line_refusal_with_the_traceback_in_train_log(tmp_path):
    model_dir = save_tiny_model(tmp_path / "nan-model", TINY_MODERNBERT)
    weights = load_file(model_dir / "model.safetensors")
    name = next(n for n in weights if "layers.1.mlp" in n)
    weights[name][0, 0] = float("nan")
    save_file(weights, model_dir / "model.safetensors", metadata={"format": "pt"})
    run = _tiny_run(tmp_path, model_dir, "nanstart")
    line = one_line(cli("train", "--run-dir", str(run)))
    assert "weights are not finite" in line and run.name in line, line  # refused at load, before step 0
    assert "Traceback" in (run / "train.log").read_text()
    assert read_status(run)["state"] == "failed"


def test_every_checkpoint_corrupt_is_a_one_line_refusal(tmp_path, tiny_modernbert_dir):
    run = _tiny_run(tmp_path, tiny_modernbert_dir, "corrupt", **{"phases.main.steps": 4, "phases.decay.steps": 0})
    assert cli("train", "--run-dir", str(run)).returncode == 0
    shutil.rmtree(run / "final")
    write_status(run, state="running", pid=DEAD_PID)
    for ck in (run / "checkpoints").glob("step-*"):
        victim = ck / "model" / "model.safetensors"
        victim.write_bytes(victim.read_bytes()[:100])
    line = one_line(cli("train", "--run-dir", str(run), "--resume"))
    assert "no usable checkpoint" in line, line
    assert "Traceback" in (run / "train.log").read_text()


# --- the rule itself ----------------------------------------------------------------------------------------------


def test_a_bug_prints_its_traceback_and_says_so(capsys):
    """Not the user's to fix: the traceback stays, with 'a bug', exit 1; an OSError of the machine is one line."""
    try:
        {}["missing"]
    except KeyError as exc:
        assert faults.report(exc) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "a bug" in err
    assert faults.report(OSError(28, "No space left on device", "/x/status.json")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "/x/status.json" in err and "free space" in err


# --- adversarial cases of this kind -------------------------------------------------------------------------------


def test_a_train_log_that_is_a_folder_is_one_line(tmp_path, tiny_modernbert_dir):
    """The log cannot be opened: the path and what to do, not an IsADirectoryError traceback."""
    run = _tiny_run(tmp_path, tiny_modernbert_dir, "logdir")
    (run / "train.log").mkdir()
    line = one_line(cli("train", "--run-dir", str(run)))
    assert str(run / "train.log") in line and "folder" in line, line


def test_the_queue_worker_survives_a_status_it_cannot_write(small_fs, capsys):
    """A trainer died on a folder that then went read-only: the worker logs one line and serves on."""
    from backend.runs import jobs

    root = small_fs("ro-worker", "1m")
    run = root / "r"
    run.mkdir()
    write_status(run, state="running", pid=DEAD_PID)
    _remount_ro(root)
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    jobs._finish_child(run, proc)  # raised OSError before, which ended the worker
    out = capsys.readouterr().out
    assert "could not record failed" in out and "read-only file system" in out, out


def test_a_runs_folder_that_is_a_file_lists_no_runs(tmp_path):
    """Readers (the app's lists, the queue) see no runs; the writer says why (test above)."""
    root = tmp_path / "file"
    root.write_text("x")
    assert list_runs(root) == []


@pytest.mark.slow
def test_disk_full_during_evaluate_is_one_line_exit_2(small_fs, tiny_modernbert_dir):
    """Every seed fails on the full disk: the seed table says it, and the rule's line says what to do (exit 2)."""
    out = small_fs("ev", "600k")
    proc = cli(
        "evaluate", "--models", str(tiny_modernbert_dir), "--seeds", "1", "--epochs", "1", "--out", str(out / "e")
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(line) == 1 and "no space left on device" in line[0] and "free space" in line[0], proc.stderr


def test_cancel_of_a_run_whose_process_is_gone_marks_it_failed(tmp_path):
    """Cancel still answers a dead pid's 'running' (read as failed): the file then says failed too, with why."""
    from backend.runs import jobs

    (tmp_path / "config.yaml").write_text("name: gone\n")  # a run folder: its config and its status
    write_status(tmp_path, state="running", pid=DEAD_PID, finished_at=None)
    assert "its process is gone (nothing was signalled); marked failed" in jobs.cancel(tmp_path)
    on_disk = json.loads((tmp_path / "status.json").read_text())
    assert on_disk["state"] == "failed" and "is gone" in on_disk["error"] and on_disk["finished_at"]


def test_a_full_disk_at_start_leaves_no_folder_that_blocks_the_name(small_fs, tiny_modernbert_dir):
    """Issue 32: ``mkdir`` claims the name on a full disk (a folder takes no data block on tmpfs), then config.yaml
    cannot be written; the half-made folder went with the error, so once space is freed the same name starts."""
    root = small_fs("runs", "1m")
    _fill(root)
    cfg = tiny_train_cfg(tiny_modernbert_dir, "fresh", recipe="mlm")
    with pytest.raises(OSError) as exc:
        prepare_runs(cfg, root=root)
    assert exc.value.errno in faults.NO_SPACE
    assert not (root / "fresh").exists() and list_runs(root) == []
    (root / "filler").unlink()
    (run,) = prepare_runs(cfg, root=root)
    assert run == root / "fresh" and read_status(run)["state"] == "queued"


def test_a_status_with_a_wrong_typed_value_is_unknown_naming_the_key_and_the_runs_table_lists_the_rest(tmp_path):
    """A status.json whose numbers are text (``"tokens_seen": "x"``) or whose state is not a state crashed the whole
    Runs table and the doctor (a TypeError in the ETA and % arithmetic): it reads ``unknown`` with one line naming
    the file and the key, and every other run is still listed."""
    from app import runs_tab

    root = tmp_path / "runs"
    good = root / "good"
    good.mkdir(parents=True)
    atomic.write_yaml(good / "config.yaml", default_config())
    rundir.write_status(good, state="done", step=3, total_steps=3, tokens_seen=30, total_tokens=30)
    bad = {
        "text": {"state": "running", "tokens_seen": "x", "total_tokens": 10},
        "odd": {"state": ["running"]},
        "when": {"state": "failed", "started_at": "yesterday"},
    }
    for name, st in bad.items():
        d = root / name
        d.mkdir()
        atomic.write_yaml(d / "config.yaml", default_config())
        atomic.write_json(d / "status.json", st)
        read = rundir.read_status(d)
        assert read["state"] == "unknown" and str(d / "status.json") in read["error"], read
    assert "tokens_seen 'x' is not a number" in rundir.read_status(root / "text")["error"]
    table = {r[0]: r for r in runs_tab.runs_table()}
    assert (
        set(table) == {"good", "text", "odd", "when"} and table["good"][1] == "done" and table["text"][1] == "unknown"
    )

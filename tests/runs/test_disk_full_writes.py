"""A full disk, for every file the lab writes: the write fails whole (the old file intact, no truncated figure that
reads as written), leaves no temporary file or half checkpoint behind (which kept the disk full, so the resume
failed the same way), and the message names the file and the bytes it needed.

On real small filesystems (a tmpfs mounted for the test; skipped, saying why, where this process may not mount)
and, without any privilege, at the atomic writer under a file-size limit (RLIMIT_FSIZE: EFBIG, a fault of the
same family)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from backend.core import atomic, faults
from backend.core.paths import REPO_ROOT
from backend.engine.rundir import read_status
from backend.runs.train import prepare_runs, train_run
from conftest import tiny_train_cfg


def _leftovers(folder) -> list[str]:
    """Temporary files and folders of a write that did not finish (``.x.tmp``, ``.tmp-step-N``, ``.png-*``)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if ".tmp" in p.name or p.name[:5] == ".png-")


def test_the_atomic_writer_on_a_full_disk_keeps_the_old_file_and_names_the_path_and_bytes(small_fs):
    disk = small_fs("disk", "1m")
    target = disk / "report.json"
    atomic.write_text(target, "the old report\n")
    with pytest.raises(OSError) as e:
        atomic.write_bytes(target, b"x" * 2_000_000)
    assert e.value.errno in faults.NO_SPACE and isinstance(e.value, atomic.NoSpace)
    line = faults.user_message(e.value)
    assert str(target) in line and "writing 2,000,000 bytes" in line and "bytes free" in line, line
    assert target.read_text() == "the old report\n" and _leftovers(disk) == []  # its temporary file went with it


def test_the_atomic_writer_under_a_file_size_limit_names_the_path_and_bytes(tmp_path):
    """No mount needed: RLIMIT_FSIZE makes the write fail with EFBIG, as a full quota would."""
    code = f"""
import resource, signal, sys
sys.path.insert(0, {str(REPO_ROOT)!r})
from backend.core import atomic, faults
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
try:
    atomic.write_bytes({str(tmp_path / "big.bin")!r}, b"x" * 300_000)
except OSError as exc:
    print(faults.user_message(exc))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert str(tmp_path / "big.bin") in out.stdout and "writing 300,000 bytes" in out.stdout, out.stdout + out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # neither the file nor its temporary one


def test_a_suite_report_on_a_full_disk_leaves_no_truncated_figure(small_fs):
    from backend.evaluation.suite_report import write_suite_report

    out = small_fs("suite", "3m")  # a standalone figure (plotly.js inlined) is larger than the whole disk
    runs = [{"seed": s, "status": "ok", "test": {"f1": 0.4 + 0.01 * s}} for s in range(3)]
    for t in ("t1", "t2"):
        (out / "tasks" / t).mkdir(parents=True)
        res = {"primary_metric": "f1", "task": "ner", "models": [
            {"label": lab, "path": f"/m/{lab}", "runs": runs} for lab in ("A", "B")]}  # fmt: skip
        (out / "tasks" / t / "results.json").write_text(json.dumps(res))
    spec = {"name": "s", "path": str(out / "s.yaml"), "tasks": [{"name": "t1"}, {"name": "t2"}]}
    with pytest.raises(OSError) as e:
        write_suite_report(out, spec, png=False)
    line = faults.user_message(e.value)
    assert "deltas-1.html" in line and "bytes" in line, line
    assert not (out / "figures" / "deltas-1.html").exists() and _leftovers(out) == []


@pytest.mark.slow
def test_a_checkpoint_on_a_full_disk_leaves_no_half_checkpoint_and_says_what_it_needed(
    small_fs, tiny_modernbert_dir, isolated_runs_dir
):
    """The run's config, status and metrics fit on the disk; its first checkpoint does not. Its temporary folder
    goes with the failure (it kept the disk full, and the resume failed the same way), and the line names the
    checkpoint and the bytes it needed."""
    root = small_fs("runs", "1500k")
    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "full", recipe="mlm"), root=root)
    st = train_run(run)
    assert st["state"] == "failed" and not st["bug"], st
    assert f"checkpoint {run / 'checkpoints' / 'step-00000004'}" in st["error"], st["error"]
    assert "it needs about" in st["error"] and "bytes" in st["error"], st["error"]
    assert _leftovers(run) == [] and read_status(run)["state"] == "failed"


def test_a_half_checkpoint_a_killed_process_left_is_removed_when_the_run_starts_again(tiny_modernbert_dir, tmp_path):
    from accelerate import Accelerator

    from backend.detour.encoder_lm import EncoderLM
    from backend.engine import checkpoint
    from backend.engine.models import load_masked_lm, load_tokenizer

    run = tmp_path / "r"
    stale = run / "checkpoints" / ".tmp-step-00000008"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(os.urandom(4096))
    lm = EncoderLM(load_masked_lm(str(tiny_modernbert_dir)))
    opt = __import__("torch").optim.AdamW(lm.parameters())
    acc = Accelerator(cpu=True)
    with checkpoint.Checkpointer(acc, lm, opt, load_tokenizer(str(tiny_modernbert_dir)), run, keep=1):
        assert not stale.exists()

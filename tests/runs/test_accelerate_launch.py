"""Issue 24, defect 12: the README's ``accelerate launch`` command for N CPU processes really trains N processes.

``accelerate launch --cpu --num_processes 2`` started one process and said nothing; ``--multi_gpu`` on a CPU
started two that each trained alone on one run folder. The README now gives the command below; it is run here
as written, and train.log says the world size and the tokens per step per process count.

Issue 30: the command as written with a config (a name in it, or ``--set name=``) now works (one process makes the
run folder); two launchers on this machine stand for two machines (gloo over 127.0.0.1), and a process that is
refused or fails stops the others with its reason."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from backend.core.paths import REPO_ROOT
from backend.engine.rundir import read_metrics, read_status
from backend.runs.train import prepare_runs
from conftest import free_port, tiny_train_cfg

STEPS = {"phases.main.steps": 2, "phases.decay.steps": 1, "logging.checkpoint_every": 3}


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "ACCELERATE_USE_CPU"}  # as a user's shell has it
    env["OMP_NUM_THREADS"] = "1"
    return env


def _exe() -> str:
    exe = shutil.which("accelerate")
    if exe is None:
        pytest.skip("the accelerate command is not installed")
    return exe


def _accelerate(*flags: str, run=None, train: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """``accelerate launch FLAGS -m backend train`` with ``--run-dir RUN`` or the ``train`` arguments given."""
    argv = [_exe(), "launch", *flags, "-m", "backend", "train", *(("--run-dir", str(run)) if run else train)]
    return subprocess.run(argv, cwd=REPO_ROOT, env=_env(), capture_output=True, text=True, timeout=600)


def config_file(tmp_path: Path, model_dir: Path, name: str) -> Path:
    """A config YAML with a name in it, as a user writes one."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(tiny_train_cfg(model_dir, name, recipe="mlm", **STEPS)))
    return path


@pytest.mark.slow
def test_the_readmes_multi_process_command_trains_a_config_with_a_name(
    tiny_modernbert_dir, isolated_runs_dir, tmp_path
):
    """Issue 30: every process made the run folder, the second was refused ("already exists") and the launcher
    killed the first; now the global main process makes it and the others train in it."""
    readme = (REPO_ROOT / "README.md").read_text()
    assert "accelerate launch --multi_gpu --num_processes 2 -m backend train CONFIG.yaml" in readme
    cfg = config_file(tmp_path, tiny_modernbert_dir, "ddp2")
    proc = _accelerate(
        "--multi_gpu", "--num_processes", "2", "--main_process_port", str(free_port()), train=(str(cfg),)
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = isolated_runs_dir / "ddp2"
    assert [p.name for p in isolated_runs_dir.iterdir()] == ["ddp2"] and read_status(run)["state"] == "done"
    log = (run / "train.log").read_text()
    assert "processes: world size 2 (DDP, gloo); tokens/step 512 = 2 x 256 per process" in log, log
    rows = [r for r in read_metrics(run) if r["type"] == "train"]
    assert rows[-1]["step"] == 3 and rows[-1]["tokens_seen"] == 3 * 2 * 4 * 64
    assert len([r for r in rows if r["step"] == 3]) == 1  # one group: only rank 0 writes


@pytest.mark.slow
def test_cpu_flag_with_several_processes_is_refused_naming_the_command_that_works(
    tiny_modernbert_dir, isolated_runs_dir
):
    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "cpu2", recipe="mlm", **STEPS))
    proc = _accelerate("--cpu", "--num_processes", "2", run=run)
    assert proc.returncode != 0
    assert "accelerate launch --multi_gpu --num_processes 2 -m backend train" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr.split("accelerate launch --multi_gpu")[0][-500:]
    assert read_status(run)["state"] == "queued" and not (run / "checkpoints").exists()


def test_one_process_says_so_in_train_log(tiny_modernbert_dir, isolated_runs_dir, one_torch_thread):
    from backend.runs.train import train_run

    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "one", recipe="mlm", **STEPS))
    assert train_run(run)["state"] == "done"
    assert (
        "processes: world size 1 (one process); tokens/step 256 = 1 x 256 per process"
        in (run / "train.log").read_text()
    )


def _two_machines(
    port: int, train: tuple[str, ...], timeout: int, env1: dict | None = None
) -> list[tuple[int | None, str]]:
    """Two ``accelerate launch`` processes on this machine standing for two machines (machine ranks 0 and 1, one
    process each, gloo over 127.0.0.1): (exit code or None if still running at ``timeout``, output) for each.
    ``env1``: what differs on machine 1."""
    flags = ["--multi_gpu", "--num_machines", "2", "--num_processes", "2", "--main_process_ip", "127.0.0.1"]
    procs = [
        subprocess.Popen(
            [
                _exe(),
                "launch",
                *flags,
                "--machine_rank",
                str(r),
                "--main_process_port",
                str(port),
                "-m",
                "backend",
                "train",
                *train,
            ],
            cwd=REPO_ROOT,
            env={**_env(), **((env1 or {}) if r == 1 else {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for r in (0, 1)
    ]
    deadline = time.monotonic() + timeout
    out = []
    for p in procs:
        try:
            text, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            out.append((p.returncode, text))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out.append((None, p.communicate()[0]))
    return out


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_two_machines_train_one_run_with_the_single_machine_weights_and_a_refusal_stops_both(
    tiny_modernbert_dir, isolated_runs_dir, tmp_path
):
    """Issue 30: ``--num_machines 2`` (two launchers here, gloo) trains one run folder whose final weights equal
    those of ``--num_processes 2`` on one machine (the README's command with ``--set name=``); train.log says the
    world. Then the same two-machine launch of a name that exists: before, machine 1 was refused and machine 0
    waited for it until killed; now the main process's refusal stops both, each with the one line, at once."""
    cfg = str(config_file(tmp_path, tiny_modernbert_dir, "base"))
    # the one-machine run trains while the two machines do (its own name and port; the token store's lock lets one
    # process build the store and the others wait for it): the two launches wait on each other's starts, not CPU
    flags = ["--multi_gpu", "--num_processes", "2", "--main_process_port", str(free_port())]
    one = subprocess.Popen(
        [_exe(), "launch", *flags, "-m", "backend", "train", cfg, "--set", "name=one"],
        cwd=REPO_ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        (r0, out0), (r1, out1) = _two_machines(free_port(), (cfg, "--set", "name=two"), timeout=400)
        out_one = one.communicate(timeout=400)[0]
    finally:
        if one.poll() is None:
            os.killpg(one.pid, signal.SIGKILL)
    assert one.returncode == 0, out_one[-3000:]
    assert r0 == 0 and r1 == 0, out0[-3000:] + out1[-3000:]
    assert sorted(p.name for p in isolated_runs_dir.iterdir()) == ["one", "two"]
    two = isolated_runs_dir / "two"
    assert read_status(two)["state"] == "done"
    log = (two / "train.log").read_text()
    want = "processes: world size 2 (2 machines x 1 process each, DDP, gloo); tokens/step 512 = 2 x 256 per process"
    assert want in log, log
    assert _sha256(two / "final" / "model.safetensors") == _sha256(
        isolated_runs_dir / "one" / "final" / "model.safetensors"
    )

    started = time.monotonic()
    refused = _two_machines(free_port(), (cfg, "--set", "name=two"), timeout=120)
    assert time.monotonic() - started < 120, "a launch waited for a process that had left"
    for code, out in refused:
        assert code not in (0, None), out[-3000:]
        assert "a run named 'two' already exists; try 'two-2'" in out, out[-3000:]
    assert read_status(two)["state"] == "done"  # the finished run is untouched


@pytest.mark.slow
def test_a_process_that_fails_on_one_machine_stops_the_other_with_its_reason(
    tiny_modernbert_dir, isolated_runs_dir, tmp_path
):
    """Machine 1's cache folder lies under a file (its disk, its mistake): its process fails opening the token
    store. Machine 0's next collective breaks ("Connection closed by peer"); it stops at once and the run's status
    names machine 1's reason, as one line, not a bug."""
    (tmp_path / "a-file").write_text("x")
    cfg = str(config_file(tmp_path, tiny_modernbert_dir, "split"))
    started = time.monotonic()
    ends = _two_machines(free_port(), (cfg,), timeout=300, env1={"DETOUR_CACHE_DIR": str(tmp_path / "a-file" / "c")})
    assert time.monotonic() - started < 300, "a process waited for one that had failed"
    for code, out in ends:
        assert code not in (0, None), ends[0][1][-2000:] + ends[1][1][-3000:]
        assert f'File "{REPO_ROOT / "backend"}' not in out, out[-4000:]  # one line from us (the launcher adds its own)
    st = read_status(isolated_runs_dir / "split")
    assert st["state"] == "failed" and "(a bug" not in st["error"], st
    assert st["error"].startswith(
        "another process of this launch failed: process rank 1 (machine 1): not a directory"
    ), st
    assert "error: run split failed: another process of this launch failed: process rank 1" in ends[0][1]


def test_a_refused_launch_leaves_no_run_behind(tiny_modernbert_dir, isolated_runs_dir, tmp_path):
    """Issue 39: ``--num_processes 2`` without ``--multi_gpu`` starts one process and is refused, but the run folder
    was made first (``queued``), and ``queue`` later trained it as one process. Now nothing is left behind."""
    cfg = config_file(tmp_path, tiny_modernbert_dir, "acc1")
    proc = _accelerate("--num_processes", "2", "--main_process_port", str(free_port()), train=(str(cfg),))
    assert proc.returncode != 0  # accelerate's own launcher adds its traceback after the process's one line
    assert "error: config key '--num_processes': got 2; this accelerate launch started 1 process" in proc.stderr
    assert not (isolated_runs_dir / "acc1").exists()

"""The job queue and detached launcher, with a stand-in trainer (a tiny script) so it runs in seconds.

The real trainer is driven end to end by tests/ui/test_app_client.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from backend.core import atomic, process
from backend.core.atomic import write_yaml
from backend.engine import rundir
from backend.engine.config import default_config, load_config
from backend.runs import jobs

FAKE_TRAINER = r"""
import os, signal, sys, time
sys.path.insert(0, os.environ["REPO"])
from backend.engine import rundir
d = sys.argv[1]
resume = "--resume" in sys.argv
seconds = float(os.environ.get("FAKE_SECONDS", "0.3"))
if os.path.exists(os.path.join(d, "crash")):
    sys.exit(3)  # dies before writing any status
time.sleep(float(os.environ.get("FAKE_START_S", "0")))  # importing torch, checking the config: no handler yet
def on_term(signum, frame):
    rundir.write_status(d, state="cancelled", finished_at=time.time())
    with open(os.path.join(os.path.dirname(d), "events.log"), "a") as f:
        f.write(f"cancel {os.path.basename(d)} {time.time()}\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
with open(os.path.join(os.path.dirname(d), "events.log"), "a") as f:  # before "running": a cancel may follow at once
    f.write(f"start {os.path.basename(d)} {time.time()} resume={resume}\n")
rundir.write_status(d, state="running", pid=os.getpid(), started_at=time.time(), resumed=resume)
print("training", d, "OMP_WAIT_POLICY=" + os.environ.get("OMP_WAIT_POLICY", "-"), flush=True)
time.sleep(seconds)
until = os.environ.get("FAKE_UNTIL")  # a file the test creates when the run may end (no race with a slow machine)
deadline = time.time() + 120
while until and not os.path.exists(until) and time.time() < deadline:
    time.sleep(0.02)
with open(os.path.join(os.path.dirname(d), "events.log"), "a") as f:
    f.write(f"end {os.path.basename(d)} {time.time()}\n")
rundir.write_status(d, state="done", finished_at=time.time())
"""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    script = tmp_path / "fake_trainer.py"
    script.write_text(FAKE_TRAINER)
    monkeypatch.setenv("REPO", str(Path(__file__).resolve().parents[2]))

    def launch(run_dir: Path, resume: bool) -> list[str]:
        return [sys.executable, str(script), str(run_dir)] + (["--resume"] if resume else [])

    return launch


def make_run(root: Path, name: str, created: float) -> Path:
    d = root / name
    d.mkdir(parents=True)
    cfg = default_config()
    cfg["name"] = name
    write_yaml(d / "config.yaml", cfg)
    rundir.write_status(d, state="queued", created_at=created)
    return d


def events(root: Path) -> list[list[str]]:
    p = root / "events.log"
    return [line.split() for line in p.read_text().splitlines()] if p.exists() else []


def test_oldest_first_one_at_a_time(isolated_runs_dir, fake):
    root = isolated_runs_dir
    make_run(root, "b-newer", 200.0)
    make_run(root, "a-older", 100.0)
    make_run(root, "c-newest", 300.0)
    assert jobs.run_worker(root, max_concurrent=1, poll_s=0.05, launch=fake) == 0
    ev = events(root)
    assert [e[1] for e in ev if e[0] == "start"] == ["a-older", "b-newer", "c-newest"]
    # one at a time: every start comes after the previous end
    seq = [(e[0], e[1]) for e in ev]
    assert seq == [(k, n) for n in ("a-older", "b-newer", "c-newest") for k in ("start", "end")]
    for n in ("a-older", "b-newer", "c-newest"):
        st = rundir.read_status(root / n)
        assert st["state"] == "done" and st["launched_pid"]
        assert "training" in (root / n / "train.log").read_text()  # output went to the run's file
    assert not (root / jobs.LOCK_NAME).read_text().strip()  # the worker said it was gone


@pytest.mark.parametrize(("user", "seen"), [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_a_queued_trainer_gives_its_core_back_while_it_waits(isolated_runs_dir, fake, monkeypatch, user, seen):
    """A queued run shares its cores (the app, its users, other runs): its OpenMP threads sleep at barriers instead of
    spinning (a spinning trainer kept 2% of its rate under 20 users), unless the user chose a wait policy."""
    if user is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", user)
    make_run(isolated_runs_dir, "r", 100.0)
    assert jobs.run_worker(isolated_runs_dir, max_concurrent=1, poll_s=0.05, launch=fake) == 0
    assert f"OMP_WAIT_POLICY={seen}" in (isolated_runs_dir / "r" / "train.log").read_text()


def test_two_at_a_time(isolated_runs_dir, fake, monkeypatch):
    monkeypatch.setenv("FAKE_SECONDS", "1.0")
    root = isolated_runs_dir
    for i in range(3):
        make_run(root, f"r{i}", float(i))
    jobs.run_worker(root, max_concurrent=2, poll_s=0.05, launch=fake)
    ev = events(root)
    t = {(e[0], e[1]): float(e[2]) for e in ev}
    assert t[("start", "r1")] < t[("end", "r0")]  # r0 and r1 overlapped
    assert t[("start", "r2")] >= min(t[("end", "r0")], t[("end", "r1")])  # r2 waited for a slot


def test_crash_before_status_is_marked_failed(isolated_runs_dir, fake):
    root = isolated_runs_dir
    d = make_run(root, "crashy", 1.0)
    (d / "crash").write_text("")
    jobs.run_worker(root, poll_s=0.05, launch=fake)
    st = rundir.read_status(d)
    assert st["state"] == "failed" and "code 3" in st["error"]


def test_cancel_queued_and_running_then_resume(isolated_runs_dir, fake, monkeypatch):
    monkeypatch.setenv("FAKE_SECONDS", "30")
    root = isolated_runs_dir
    a = make_run(root, "a", 1.0)
    b = make_run(root, "b", 2.0)
    assert "removed from the queue" in jobs.cancel(b)
    t = threading.Thread(target=jobs.run_worker, args=(root,), kwargs=dict(poll_s=0.05, launch=fake))
    t.start()
    deadline = time.time() + 20
    while rundir.read_status(a).get("state") != "running" and time.time() < deadline:
        time.sleep(0.05)
    assert rundir.read_status(a)["state"] == "running"
    assert "SIGTERM" in jobs.cancel(a)
    t.join(timeout=20)
    assert not t.is_alive()
    assert rundir.read_status(a)["state"] == "cancelled"
    assert rundir.read_status(b)["state"] == "cancelled"
    assert [e[1] for e in events(root) if e[0] == "start"] == ["a"]  # b never started
    with pytest.raises(jobs.JobError, match="only queued or running"):
        jobs.cancel(a)

    # resume: re-queued with the flag; the worker passes --resume
    monkeypatch.setenv("FAKE_SECONDS", "0.1")
    monkeypatch.setattr(jobs, "ensure_worker", lambda *a, **k: None)  # run the worker in-process below
    assert "queued to resume" in jobs.resume(a)
    st = rundir.read_status(a)
    assert st["state"] == "queued" and st["resume_requested"] is True
    jobs.run_worker(root, poll_s=0.05, launch=fake)
    assert rundir.read_status(a)["state"] == "done"
    assert events(root)[-2][:2] == ["start", "a"] and events(root)[-2][3] == "resume=True"
    with pytest.raises(jobs.JobError, match="only cancelled or failed"):
        jobs.resume(a)


def test_a_cancel_while_the_trainer_starts_reads_cancelled_not_failed(isolated_runs_dir, fake, monkeypatch):
    """Cancel on a run whose trainer was still starting (a sweep cancelled right after its launch): SIGTERM killed it
    before its handler was set, and the worker marked it failed, "exited with code -15 without finishing"."""
    monkeypatch.setenv("FAKE_START_S", "30")
    d = make_run(isolated_runs_dir, "early", 1.0)
    t = threading.Thread(target=jobs.run_worker, args=(isolated_runs_dir,), kwargs=dict(poll_s=0.05, launch=fake))
    t.start()
    deadline = time.time() + 20
    while not rundir.runs_process(rundir.read_status(d), "launched_pid") and time.time() < deadline:
        time.sleep(0.05)
    assert "SIGTERM" in jobs.cancel(d)
    t.join(timeout=20)
    assert not t.is_alive()
    st = rundir.read_status(d)
    assert st["state"] == "cancelled" and not st.get("error"), st
    monkeypatch.setenv("FAKE_START_S", "0")
    monkeypatch.setattr(jobs, "ensure_worker", lambda *a, **k: None)  # run the worker in-process below
    jobs.resume(d)
    assert not rundir.read_status(d).get("cancel_requested")  # a later failure is a failure again
    jobs.run_worker(isolated_runs_dir, poll_s=0.05, launch=fake)
    assert rundir.read_status(d)["state"] == "done"


def test_lock_keeps_a_second_worker_out(isolated_runs_dir, fake, monkeypatch, tmp_path):
    # the run lasts until the second worker has answered: on a loaded machine its import alone took longer than a
    # fixed run time, the first worker had finished and released the lock, and the second one became the worker
    release = tmp_path / "release"
    monkeypatch.setenv("FAKE_SECONDS", "0")
    monkeypatch.setenv("FAKE_UNTIL", str(release))
    root = isolated_runs_dir
    make_run(root, "only", 1.0)
    t = threading.Thread(target=jobs.run_worker, args=(root,), kwargs=dict(poll_s=0.05, launch=fake))
    t.start()
    deadline = time.time() + 10
    while not (root / jobs.LOCK_NAME).exists() or not (root / jobs.LOCK_NAME).read_text().strip():
        assert time.time() < deadline
        time.sleep(0.02)
    # our own pid holds the lock here: a second worker (a real process) exits at once
    out = subprocess.run(
        [sys.executable, "-m", "backend", "queue", "--root", str(root)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
    )
    release.touch()
    assert out.returncode == 0 and "another worker holds" in out.stdout
    t.join(timeout=20)
    assert [e[1] for e in events(root) if e[0] == "start"] == ["only"]


def test_ensure_worker_starts_detached_process_that_exits_when_idle(isolated_runs_dir):
    root = isolated_runs_dir
    root.mkdir(parents=True, exist_ok=True)
    pid = jobs.ensure_worker(root)
    assert pid
    deadline = time.time() + 60
    while rundir.pid_alive(pid) and time.time() < deadline:
        time.sleep(0.1)
    assert not rundir.pid_alive(pid)
    log = (root / jobs.WORKER_LOG).read_text()
    assert "queue empty; exiting" in log
    assert os.getsid(0) != pid  # it had its own session (detached)
    assert jobs.worker_pid(root) is None


def _proc_state(pid: int) -> str | None:
    """The state letter in /proc/<pid>/stat ('Z' = a defunct child nobody waited for), None once reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except FileNotFoundError:
        return None


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_finished_worker_is_reaped_not_left_defunct(isolated_runs_dir):
    """The app starts a worker and may start nothing else for hours: the worker must not stay a zombie child."""
    isolated_runs_dir.mkdir(parents=True, exist_ok=True)
    pid = jobs.ensure_worker(isolated_runs_dir)  # nothing queued: it starts, looks, exits
    deadline = time.time() + 60
    while _proc_state(pid) is not None and time.time() < deadline:
        time.sleep(0.1)
    assert _proc_state(pid) is None, f"worker {pid} is still in /proc as state {_proc_state(pid)!r}"


def test_command_preview_and_seeds():
    cfg = load_config({"name": "exp1", "recipe": "clm_detour", "train": {"lr": 1e-4, "precision": "bf16"}})
    prev = jobs.command_preview(cfg)
    assert prev["python"].startswith("python -m backend train --set recipe=clm_detour")
    assert "--set train.lr=0.0001" in prev["python"] and prev["python"].endswith("--name exp1")
    assert prev["accelerate"].startswith("accelerate launch --num_processes 1 --mixed_precision bf16 -m backend train")
    assert jobs.command_preview(cfg, config_path="my cfg.yaml")["python"] == "python -m backend train 'my cfg.yaml'"
    # precision auto is resolved by the trainer where it runs: the launcher gets no --mixed_precision (never "auto")
    auto = jobs.command_preview(load_config({"name": "exp2"}))["accelerate"]
    assert "--mixed_precision" not in auto and auto.startswith("accelerate launch --num_processes 1 -m backend train")
    cfgs = jobs.expand_seeds(cfg, [0, 1])
    assert [c["name"] for c in cfgs] == ["exp1-s0", "exp1-s1"] and [c["train"]["seed"] for c in cfgs] == [0, 1]
    assert jobs.expand_seeds(cfg, [7])[0]["name"] == "exp1"


# --- a pid is proven before it is trusted (status records its start time and the boot) ---------------------


@pytest.fixture
def stranger():
    """An unrelated process (``sleep``) whose pid a stale status could name after a reboot or pid reuse."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_running_status_whose_pid_is_another_process_reads_gone_and_is_never_signalled(tmp_path, stranger):
    run = make_run(tmp_path / "runs", "reused", 1.0)
    theirs = process.identity(stranger.pid)
    rundir.write_status(run, state="running", pid=stranger.pid, started_at=time.time())  # no identity: unproven
    st = rundir.read_status(run)
    assert st["state"] == "failed" and st["resumable"] is True
    assert "belongs to another process" in st["error"] and f"--run-dir {run} --resume" in st["error"]
    assert rundir.list_runs(run.parent)[0].state == "failed"

    # the identity of the trainer that once had this pid: same pid, another start (pid reuse)
    old = {**theirs, "since_boot": theirs["since_boot"] - 50, "started": theirs["started"] - 50}
    rundir.write_status(run, state="running", pid=stranger.pid, pid_identity=old)
    assert rundir.read_status(run)["state"] == "failed"
    msg = jobs.cancel(run)
    assert "nothing was signalled" in msg
    time.sleep(0.2)
    assert stranger.poll() is None, "Cancel killed a process that is not the run's trainer"
    assert rundir.read_status(run)["state"] == "failed" and rundir.read_status(run)["finished_at"]

    # another boot: the same pid and start time name nobody
    rundir.write_status(run, state="running", pid=stranger.pid, pid_identity={**theirs, "boot": "another-boot"})
    assert rundir.read_status(run)["state"] == "failed"

    # a queued run whose launched pid is a stranger is not counted as launched: the worker would start it
    rundir.write_status(run, state="queued", launched_pid=stranger.pid, finished_at=None)
    assert jobs.cancel(run).endswith("removed from the queue (cancelled)")
    assert stranger.poll() is None


def test_the_recorded_process_itself_reads_running_and_is_proven(tmp_path):
    run = make_run(tmp_path / "runs", "mine", 1.0)
    rundir.write_status(run, state="running", pid=os.getpid())
    st = rundir.read_status(run)
    assert st["state"] == "running" and st["pid_identity"]["boot"] == process.boot_id()
    assert rundir.runs_process(st)
    rundir.write_status(run, pid=None)  # clearing the pid clears its identity: none is left to vouch for another
    assert atomic.read_json(run / "status.json")["pid_identity"] is None


WORKER = r"""
import os, sys
sys.path.insert(0, os.environ["REPO"])
from pathlib import Path
from backend.runs import jobs
root, script = Path(sys.argv[1]), sys.argv[2]
launch = lambda d, resume: [sys.executable, script, str(d)] + (["--resume"] if resume else [])
jobs.run_worker(root, max_concurrent=1, poll_s=0.05, launch=launch)
"""


def test_a_new_worker_counts_the_trainer_a_killed_worker_left_running(tmp_path, monkeypatch):
    monkeypatch.setenv("REPO", str(Path(__file__).resolve().parents[2]))
    monkeypatch.setenv("FAKE_SECONDS", "2.5")
    root = tmp_path / "runs"
    make_run(root, "a", 1.0)
    make_run(root, "b", 2.0)
    script, worker = tmp_path / "fake_trainer.py", tmp_path / "worker.py"
    script.write_text(FAKE_TRAINER)
    worker.write_text(WORKER)
    first = subprocess.Popen([sys.executable, str(worker), str(root), str(script)], start_new_session=True)
    deadline = time.time() + 60
    while rundir.read_status(root / "a").get("launched_pid") is None:
        assert time.time() < deadline and first.poll() is None
        time.sleep(0.02)
    os.kill(first.pid, signal.SIGKILL)  # the worker dies; its trainer (own session) trains on, an orphan
    first.wait()
    orphan = rundir.read_status(root / "a")["launched_pid"]
    assert process.pid_alive(orphan)

    launch = lambda d, resume: [sys.executable, str(script), str(d)]  # noqa: E731
    jobs.run_worker(root, max_concurrent=1, poll_s=0.05, launch=launch)
    while process.pid_alive(orphan) and time.time() < deadline:
        time.sleep(0.05)
    ev = events(root)
    t = {(e[0], e[1]): float(e[2]) for e in ev}
    assert [e[1] for e in ev if e[0] == "start"] == ["a", "b"]  # the orphan was not started twice
    assert t[("start", "b")] >= t[("end", "a")], f"two trainers at once under --max-concurrent 1: {ev}"
    assert rundir.read_status(root / "b")["state"] == "done"


@pytest.mark.parametrize(
    "args", [["--max-concurrent", "-1"], ["--max-concurrent", "0"], ["--poll", "-1"], ["--poll", "0"]]
)
def test_a_queue_worker_with_an_impossible_count_or_poll_is_one_line(isolated_runs_dir, args, capsys):
    """--max-concurrent -1 made a worker that served forever and started nothing, 0 was silently 1, and --poll -1 was
    a ValueError traceback at the first wait: each is refused in one line, before anything is served."""
    from backend.__main__ import main

    root = isolated_runs_dir
    make_run(root, "a", 1.0)
    assert main(["queue", "--root", str(root), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and args[0] in err and "Traceback" not in err, err
    assert rundir.read_status(root / "a")["state"] == "queued" and not (root / "a" / "train.log").exists()
    with pytest.raises(jobs.JobError):
        jobs.ensure_worker(root, max_concurrent=0)

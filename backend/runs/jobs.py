"""Job queue and detached launcher: the app and the CLI submit runs here; training never runs in the app.

* ``submit(cfg)`` prepares the run directories (``backend.runs.train.prepare_runs``: state ``queued``) and makes sure a
  queue worker runs.
* The worker is ``python -m backend queue --root ROOT`` started detached (new session, output to
  ``ROOT/.queue.log``, stdin from /dev/null): closing the browser or restarting the app never stops it.
* The worker takes queued runs oldest first, at most ``max_concurrent`` at once (``DETOUR_MAX_CONCURRENT``,
  default 1), launching each as ``python -m backend train --run-dir DIR [--resume]`` -- an argv list, never a
  shell -- detached, with stdout+stderr appended to ``DIR/train.log``. It exits when nothing is queued and none of
  its own children runs. Started with ``--pin-gpus`` (sweeps on a GPU box), it runs one run per GPU, each launched
  with ``CUDA_VISIBLE_DEVICES`` set to a GPU no other running run holds (``backend.runs.gpus``).
* ``ROOT/.queue.lock`` holds the worker's pid under an ``flock``: a second worker exits at once. Before exiting, a
  worker clears the pid, releases the lock and looks at the queue once more, so a run submitted at that moment
  is never stranded (``ensure_worker`` starts a new worker whenever the lock file names no live worker).
* The worker takes each run's ``.train.lock`` before it spawns the trainer and hands it over (the trainer inherits
  and adopts it): a run's lock is held from the trainer's first instant, so a worker killed before it wrote the pid
  down leaves an orphan that the next worker counts (``is_held``) instead of starting the run twice.
* ``cancel(run_dir)`` sends SIGTERM to a running run (the trainer checkpoints and writes ``cancelled``) or marks
  a queued one cancelled; ``resume(run_dir)`` re-queues a stopped run with ``resume_requested: true`` and the
  worker passes ``--resume``.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from backend.core import faults
from backend.core.errors import DetourError
from backend.core.paths import runs_dir
from backend.core.process import Busy, FileLock, holder_pid, is_held, pid_alive, spawn_detached
from backend.core.process import identity as process_identity
from backend.engine import rundir
from backend.engine.compile_abort import aborted_call, died
from backend.engine.config import default_config
from backend.runs.gpus import pick_gpu, slots

LOCK_NAME = ".queue.lock"
WORKER_LOG = ".queue.log"
MAX_CONCURRENT_ENV = "DETOUR_MAX_CONCURRENT"
TRAIN_LOCK = ".train.lock"  # held by a run's trainer while it trains (backend.runs.train.train_run)

_spawn_lock = threading.Lock()


class JobError(DetourError):
    pass


# --- helpers ----------------------------------------------------------------------------------


def sharing_env() -> dict[str, str]:
    """How a queued trainer's threads wait: ``OMP_WAIT_POLICY=PASSIVE`` unless the user chose one. A queued run
    shares its cores (with the app that queued it and its users, with other runs): torch's OpenMP threads spin at
    every barrier by default, so when the app took one of two cores the trainer's other thread spun waiting for it,
    and a run kept 2% of its rate under 20 users (bench/results/app_load-20-2026-11-26.md). Waiting threads that
    sleep give their core to whoever needs it."""
    return {} if os.environ.get("OMP_WAIT_POLICY") else {"OMP_WAIT_POLICY": "PASSIVE"}


def _root(root: str | Path | None) -> Path:
    return Path(root).resolve() if root else runs_dir()


def check_max_concurrent(n: object, what: str = "--max-concurrent") -> int:
    """A count of training jobs at once: a whole number >= 1 (0 was silently the default, and a negative one made a
    worker that serves forever and starts nothing)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise JobError(f"{what} {n!r}: expected a whole number >= 1 (training jobs at once)")
    return n


def default_max_concurrent() -> int:
    raw = os.environ.get(MAX_CONCURRENT_ENV, "1")
    try:
        n = int(raw)
    except ValueError as exc:
        raise JobError(f"{MAX_CONCURRENT_ENV}={raw!r}: expected a whole number >= 1") from exc
    if n < 1:
        raise JobError(f"{MAX_CONCURRENT_ENV}={raw!r}: expected a whole number >= 1")
    return n


def _is_worker_pid(pid: int) -> bool:
    if not pid_alive(pid):
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.exists():  # guard against a recycled pid
        try:
            parts = cmdline.read_bytes().split(b"\0")
        except OSError:
            return True
        return b"queue" in parts and b"backend" in parts
    return True


def worker_pid(root: str | Path | None = None) -> int | None:
    """The pid of the live queue worker for ``root``, or None."""
    pid = holder_pid(_root(root) / LOCK_NAME)
    return pid if pid is not None and _is_worker_pid(pid) else None


def ensure_worker(
    root: str | Path | None = None, max_concurrent: int | None = None, pin_gpus: bool = False
) -> int | None:
    """Start a detached queue worker unless one is alive. Returns the pid started, or None if one was running.
    ``pin_gpus``: one run per GPU, each launched with its own ``CUDA_VISIBLE_DEVICES`` (backend.runs.gpus)."""
    root = _root(root)
    with _spawn_lock:
        if worker_pid(root) is not None:
            return None
        n = default_max_concurrent() if max_concurrent is None else check_max_concurrent(max_concurrent)
        argv = [sys.executable, "-m", "backend", "queue", "--root", str(root), "--max-concurrent", str(n)]
        argv += ["--pin-gpus"] if pin_gpus else []
        return spawn_detached(argv, root / WORKER_LOG).pid


# --- submit / cancel / resume ---------------------------------------------------------------


def expand_seeds(cfg: dict, seeds: list[int] | None) -> list[dict]:
    """One config per seed; with several seeds each name gets ``-s<seed>``."""
    import copy

    if not seeds:
        return [cfg]
    if len(seeds) == 1:
        out = copy.deepcopy(cfg)
        out["train"]["seed"] = int(seeds[0])
        return [out]
    outs = []
    for s in seeds:
        c = copy.deepcopy(cfg)
        c["train"]["seed"] = int(s)
        c["name"] = f"{cfg['name']}-s{int(s)}"
        outs.append(c)
    return outs


def check_names_free(cfg: dict, root: str | Path | None = None, seeds: list[int] | None = None) -> None:
    """What ``submit`` would refuse for a taken name (a pair's and every seed variant's), without preparing anything."""
    from backend.runs.train import check_names_free as check_free

    for c in expand_seeds(cfg, seeds):
        check_free(c, _root(root))


def submit(
    cfg: dict,
    root: str | Path | None = None,
    seeds: list[int] | None = None,
    max_concurrent: int | None = None,
    start_worker: bool = True,
) -> list[Path]:
    """Prepare the run(s) (validation + preflight, state ``queued``) and make sure a worker will train them.

    Every config is prepared before any worker starts, so an invalid seed variant queues nothing of its own.
    """
    from backend.runs.train import prepare_runs

    root = _root(root)
    cfgs = expand_seeds(cfg, seeds)
    dirs: list[Path] = []
    for c in cfgs:
        dirs.extend(prepare_runs(c, root=root, command=command_argv(c)))
    if start_worker:
        ensure_worker(root, max_concurrent)
    return dirs


def cancel(run_dir: str | Path) -> str:
    """Stop a run: SIGTERM to its trainer (it checkpoints and writes ``cancelled``) -- only to a process proven to be
    it (the pid and the start time and boot recorded beside it), never to whoever holds that pid now -- or mark a
    queued run cancelled. Returns a one-line message. A run that is not there is "no run named R" (``NoSuchRun``)."""
    run_dir = rundir.find_run(run_dir)
    st = rundir.read_status(run_dir)  # a 'running' whose process is not the recorded one reads 'failed' here
    state = st.get("state")
    field = "pid" if state == "running" else "launched_pid"
    if rundir.runs_process(st, field):
        pid = int(st[field])
        # a trainer still starting (importing, checking) has no SIGTERM handler yet and dies without a word: the
        # worker reads this mark and records the end as the cancel it was, not as a failure
        rundir.write_status(run_dir, cancel_requested=True)
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        return f"{run_dir.name}: sent SIGTERM to pid {pid}; it saves a checkpoint and stops"
    if state == "queued":
        rundir.write_status(run_dir, state="cancelled", finished_at=rundir.now(), error=None)
        return f"{run_dir.name}: removed from the queue (cancelled)"
    if state == "failed" and not st.get("finished_at"):  # a gone process's 'running', as read_status reports it
        rundir.write_status(run_dir, state="failed", finished_at=rundir.now(), error=st.get("error"), resumable=True)
        return f"{run_dir.name}: its process is gone (nothing was signalled); marked failed, resumable"
    raise JobError(f"{run_dir.name}: is {state}; only queued or running runs can be cancelled")


def resume(run_dir: str | Path, root: str | Path | None = None, max_concurrent: int | None = None) -> str:
    """Re-queue a cancelled or failed run; the worker passes ``--resume``. The message names the checkpoint the
    trainer will start from: the newest of this folder that passes its check (``checkpoint.latest_good``; a damaged
    newer one is skipped and said; every one damaged is refused here, before anything is queued)."""
    from backend.engine.checkpoint import latest_good

    run_dir = rundir.find_run(run_dir)
    info = rundir.RunInfo(run_dir.name, run_dir, rundir.read_status(run_dir))
    state = info.state
    if state not in ("cancelled", "failed"):
        raise JobError(f"{run_dir.name}: is {state}; only cancelled or failed runs can be resumed")
    skipped: list[str] = []
    found = latest_good(run_dir, log=skipped.append)
    if found is None:
        note = " (no complete checkpoint yet: it starts from the beginning)"
    else:
        note = f" from {found[0].name} (step {found[1]['step']})"
        if skipped:
            first = skipped[0].removeprefix("warning: ")
            note += f"; {len(skipped)} newer checkpoint(s) failed their check and are skipped ({first})"
    rundir.write_status(
        run_dir,
        state="queued",
        resume_requested=True,
        error=None,
        queued_at=rundir.now(),
        launched_pid=None,
        cancel_requested=None,
    )
    ensure_worker(root or run_dir.parent, max_concurrent)
    return f"{run_dir.name}: queued to resume{note}"


# --- command preview ----------------------------------------------------------------------------


def _diff(base: dict, cfg: dict, prefix: str = "") -> list[tuple[str, object]]:
    out = []
    for k, v in cfg.items():
        if k == "_meta":
            continue
        key = f"{prefix}{k}"
        if isinstance(v, dict) and isinstance(base.get(k), dict) and k != "from_scratch":
            out.extend(_diff(base[k], v, key + "."))
        elif k not in base or base[k] != v:
            out.append((key, v))
    return out


def _yaml_scalar(v) -> str:
    import yaml

    return yaml.safe_dump(v, default_flow_style=True).strip().removesuffix("...").strip()


def command_argv(cfg: dict, config_path: str | None = None) -> list[str]:
    """``python -m backend train [CONFIG] --set key=value ... --name NAME`` reproducing ``cfg``."""
    argv = ["python", "-m", "backend", "train"]
    base = default_config()
    if config_path:
        argv.append(str(config_path))
        return argv
    for key, v in _diff(base, cfg):
        if key == "name":
            continue
        argv += ["--set", f"{key}={_yaml_scalar(v)}"]
    argv += ["--name", str(cfg.get("name", base["name"]))]
    return argv


def command_preview(cfg: dict, config_path: str | None = None, num_processes: int = 1) -> dict:
    """The exact CLI command for ``cfg``: plain python and its ``accelerate launch`` form."""
    argv = command_argv(cfg, config_path)
    acc = ["accelerate", "launch", "--num_processes", str(num_processes)]
    if num_processes > 1:  # without it accelerate starts one process (backend.runs.launch)
        acc.insert(2, "--multi_gpu")
    precision = (cfg.get("train") or {}).get("precision", "auto")
    if precision != "auto":  # auto is resolved by the trainer on the machine that trains (no launcher flag)
        acc += ["--mixed_precision", {"fp32": "no"}.get(precision, precision)]
    acc += ["-m", *argv[2:]]
    return {"python": shlex.join(argv), "accelerate": shlex.join(acc), "argv": argv}


# --- the worker -----------------------------------------------------------------------------


def train_argv(run_dir: Path, resume: bool) -> list[str]:
    argv = [sys.executable, "-m", "backend", "train", "--run-dir", str(run_dir)]
    return argv + ["--resume"] if resume else argv


def _training(info: rundir.RunInfo) -> bool:
    """A trainer holds the run's ``.train.lock`` (the kernel says so, whoever started it: this worker, one killed
    since -- even before it could write the pid down, as the worker hands the lock to the trainer at birth -- or
    a terminal). The probe is for queued or running runs only: a finished one holds no slot."""
    return info.status.get("state") in ("queued", "running", "failed") and is_held(info.path / TRAIN_LOCK)


def _occupied(info: rundir.RunInfo) -> bool:
    """A run that holds a training slot: running with its recorded process, launched (by this worker or one that
    died since: its trainer is an orphan that still trains) and not yet reporting, or held by a trainer."""
    st = info.status
    if st.get("state") == "running" and rundir.runs_process(st):
        return True
    if st.get("state") == "queued" and rundir.runs_process(st, "launched_pid"):
        return True
    return _training(info)


def queued_runs(root: Path) -> list[rundir.RunInfo]:
    runs = [r for r in rundir.list_runs(root) if r.status.get("state") == "queued"]
    runs = [r for r in runs if not rundir.runs_process(r.status, "launched_pid") and not _training(r)]
    # runs prepared by `python -m backend train CONFIG` are trained by that process itself
    runs = [r for r in runs if not rundir.runs_process(r.status, "claimed_by")]
    runs = [r for r in runs if r.status.get("executor") != "slurm"]  # a Slurm job trains it (train --executor slurm)
    return sorted(runs, key=lambda r: (r.status.get("queued_at") or r.status.get("created_at") or 0, r.name))


def _log(msg: str) -> None:
    print(f"[queue {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _finish_child(run_dir: Path, proc: subprocess.Popen) -> None:
    """After a trainer exits: a run still marked queued/running ended without saying so -> failed, or cancelled when
    a cancel was sent to it (one that came while it started killed it before its handler was set). A status that
    cannot be written (a full disk, a read-only folder) is one line in the worker's log, and the worker serves on:
    readers already see a dead pid's ``running`` as failed. A folder moved or deleted while it trained is left to
    its trainer, which recorded its end where the folder went (``run_home.py``): nothing is written at the old name."""
    if not run_dir.is_dir():
        _log(f"{run_dir.name}: exit code {proc.returncode}; its folder was moved or deleted while it trained")
        return
    st = rundir.read_status(run_dir)
    unfinished = st.get("state") in ("queued", "running") or (st.get("state") == "failed" and not st.get("finished_at"))
    if unfinished and st.get("cancel_requested"):  # cancelled before its trainer could say so (``cancel``)
        _write_status(run_dir, state="cancelled", finished_at=rundir.now(), error=None)
        _log(f"{run_dir.name}: cancelled while it started (exit code {proc.returncode})")
    elif unfinished:
        error = (
            st.get("error")
            or f"the training process exited with code {proc.returncode} without finishing; see train.log"
        )
        if proc.returncode and (mark := aborted_call(run_dir)):  # died in a compiled call: resumed without compile
            error = (f"{died(mark, proc.returncode)} (torch.compile's kernels on this machine); resume to continue "
                     "without compile")  # fmt: skip
        _write_status(run_dir, state="failed", finished_at=rundir.now(), error=error)
        _log(f"{run_dir.name}: exited with code {proc.returncode} (marked failed)")
    else:
        _log(f"{run_dir.name}: {st.get('state')} (exit code {proc.returncode})")


def _write_status(run_dir: Path, **fields) -> None:
    """``rundir.write_status`` for the worker: a fault of the machine is one logged line, never the worker's end."""
    try:
        rundir.write_status(run_dir, **fields)
    except (OSError, DetourError) as exc:  # a full disk; a run folder moved away meanwhile
        _log(
            f"{run_dir.name}: could not record {fields.get('state') or 'its status'}: {faults.user_message(exc) or exc}"
        )


def run_worker(
    root: str | Path | None = None,
    max_concurrent: int | None = None,
    poll_s: float = 1.0,
    launch: Callable[[Path, bool], list[str]] = train_argv,
    gpus: list[str] | None = None,
) -> int:
    """Serve the queue of ``root`` until it is empty (returns 0 at once when another worker holds the lock).
    ``gpus``: pin each run to one of these GPU ids (one run per GPU); None or [] launches runs unpinned."""
    root = _root(root)
    if problem := rundir.root_problem(root):  # mkdir raised FileExistsError, a traceback
        raise JobError(problem)
    root.mkdir(parents=True, exist_ok=True)
    gpus = list(gpus or [])
    n = slots(default_max_concurrent() if max_concurrent is None else check_max_concurrent(max_concurrent), gpus)
    if not poll_s > 0:  # time.sleep of a negative number is a traceback at the first wait; 0 a busy loop
        raise JobError(f"--poll {poll_s!r}: expected seconds > 0 between looks at the queue")
    lock = FileLock(root / LOCK_NAME, f"queue {root}")
    while True:
        try:
            lock.acquire()
        except Busy:
            _log(f"another worker holds {lock.path}; exiting")
            return 0
        try:
            _log(f"worker {os.getpid()} serving {root} (max {n} at once{', GPUs ' + ','.join(gpus) if gpus else ''})")
            _serve(root, n, poll_s, launch, gpus)
        finally:
            lock.release()  # clears the pid first: an ensure_worker from now on starts a new worker
        if not queued_runs(root):  # nothing queued and no child of ours runs; look once more after releasing
            _log("queue empty; exiting")
            return 0


def _serve(
    root: Path, n: int, poll_s: float, launch: Callable[[Path, bool], list[str]], gpus: list[str] | None = None
) -> None:
    mine: dict[Path, subprocess.Popen] = {}
    while True:
        for d, proc in list(mine.items()):
            if proc.poll() is not None:
                _finish_child(d, proc)
                del mine[d]
        all_runs = rundir.list_runs(root)
        busy = sum(1 for r in all_runs if _occupied(r) or r.path in mine)
        waiting = queued_runs(root)
        waiting = [r for r in waiting if r.path not in mine]
        held = [r.status.get("gpu") for r in all_runs if _occupied(r) or r.path in mine]
        while waiting and busy < n:
            gpu = pick_gpu(gpus, held) if gpus else None
            if gpus and gpu is None:
                break
            info = waiting.pop(0)
            st = rundir.read_status(info.path)
            if st.get("state") != "queued":  # cancelled meanwhile
                continue
            resume_flag = bool(st.get("resume_requested"))
            argv = launch(info.path, resume_flag)
            env = {"DETOUR_STDOUT_IS_LOG": "1", **sharing_env()}  # stdout already is train.log: no tee into it
            if gpu is not None:
                env["CUDA_VISIBLE_DEVICES"] = gpu
            claim = FileLock(info.path / TRAIN_LOCK, f"run {info.name}")
            try:  # the trainer gets the run's lock at birth: a worker killed before the next line leaves no doubt
                claim.acquire()
            except Busy:  # a trainer nobody recorded holds it (started by hand, or by a worker killed meanwhile)
                continue
            except OSError as exc:
                why = faults.user_message(exc) or exc
                _write_status(info.path, state="failed", error=f"could not lock the run: {why}")
                continue
            try:
                proc = spawn_detached(argv, info.path / "train.log", env, keep_lock=claim)
            except OSError as exc:
                claim.release()
                _write_status(
                    info.path, state="failed", error=f"could not start training: {faults.user_message(exc) or exc}"
                )
                continue
            ident = process_identity(proc.pid)  # who it is, so a reused pid is never taken for it
            _write_status(
                info.path, launched_pid=proc.pid, launched_pid_identity=ident, launched_at=rundir.now(), gpu=gpu
            )
            held.append(gpu)
            mine[info.path] = proc
            busy += 1
            _log(f"{info.name}: started pid {proc.pid}: {shlex.join(argv)}")
        if not mine and not waiting:
            return
        time.sleep(poll_s)

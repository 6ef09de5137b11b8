"""Run management around the loop: prepare run directories, train one, record its fate.

``prepare_runs`` is what the app's Launch button and ``python -m backend train`` both call;
``train_run`` is what the queue worker (and the CLI) run for one prepared directory.
"""

from __future__ import annotations

import copy
import os
import shlex
import shutil
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from backend import __version__
from backend.core import atomic, faults
from backend.core.errors import ConfigError, DetourError, RunStartedError
from backend.core.paths import runs_dir
from backend.core.process import LOCK_FD_ENV, FileLock
from backend.detour.recipe import split_pair
from backend.engine import resume_guard
from backend.engine.config import check_run_name, validate_config
from backend.engine.run_home import RunHome
from backend.engine.rundir import read_config, read_status, suggest_name, time_spent, trained_so_far, write_status


def check_names_free(cfg: dict, root: Path) -> None:
    """Every run folder ``cfg`` would make (a pair makes two) is free under ``root``; else the error names a free one.
    Cheap (a few stat calls): the Launch form runs it as you type."""
    for _, c in split_pair(cfg):
        check_run_name(c["name"])
        if (root / c["name"]).exists():
            raise _name_taken(root, c["name"], cfg["name"])


def _name_taken(root: Path, name: str, asked: str) -> ConfigError:
    return ConfigError("name", asked, f"a run named '{name}' already exists; try '{suggest_name(asked, root)}'")


def prepare_runs(
    cfg: dict,
    root: Path | None = None,
    command: list[str] | None = None,
    claim: bool = False,
    warn: Callable[[str], None] = lambda _: None,
) -> list[Path]:
    """Validate, preflight and create run directories (state ``queued``). Never overwrites.

    ``claim=True`` (the CLI, which trains the runs itself) records this pid so the app's queue worker
    leaves them alone while this process lives. ``warn`` receives preflight's warnings (the run still starts).
    """
    from backend.runs.preflight import check

    cfg = validate_config(copy.deepcopy(cfg))
    root = Path(root) if root else runs_dir()
    runs = split_pair(cfg)
    check_names_free(cfg, root)
    facts = check(cfg)
    for w in facts.get("warnings", []):
        warn(w)
    out = _claim_names(root, [c["name"] for _, c in runs], cfg["name"])
    try:
        _write_prepared(runs, out, cfg["name"], command, claim)
    except BaseException:  # a full disk (or a kill) mid-write: no half-made folder keeps the name taken
        for d in out:
            shutil.rmtree(d, ignore_errors=True)
        raise
    return out


def _write_prepared(runs: list, out: list[Path], pair: str, command: list[str] | None, claim: bool) -> None:
    """config.yaml and a ``queued`` status.json in each claimed folder."""
    for (role, c), d in zip(runs, out, strict=True):
        c["_meta"] = {
            **c.get("_meta", {}),
            "command": command or [sys.executable, "-m", "backend", "train", "--run-dir", str(d)],
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "pair": pair if role else None,
            "role": role,
            "version": __version__,
            "host": socket.gethostname(),
        }
        atomic.write_yaml(d / "config.yaml", c)
        queued, sha = resume_guard.fixed_config(c)  # what it must train when it starts (checked then)
        write_status(d, state="queued", error=None, created_at=time.time(), pid=None,
                     claimed_by=os.getpid() if claim else None, queued_config=queued,
                     queued_config_sha256=sha)  # fmt: skip


def _claim_names(root: Path, names: list[str], asked: str) -> list[Path]:
    """Create the run folders, all or none: ``mkdir`` is the atomic claim on a name, so of two launches of one
    new name at once the second gets the "already exists" error here (the check before preflight is only early)."""
    made: list[Path] = []
    try:
        for name in names:
            d = root / name
            try:
                d.mkdir(parents=True)
            except FileExistsError:
                raise _name_taken(root, name, asked) from None
            made.append(d)
    except BaseException:
        for d in made:  # empty folders this call made (the pair's first run): the name stays free
            shutil.rmtree(d, ignore_errors=True)
        raise
    return made


class _StopFlag:
    """SIGTERM/SIGINT ask the loop to stop at the next step boundary (with a checkpoint); so do SIGUSR1/SIGUSR2,
    what a Slurm job's ``--signal`` sends before its time limit (their default action would kill the trainer with
    nothing saved); and so does the run folder moved out of its runs folder (``RunHome.left``)."""

    def __init__(self, home: RunHome | None = None):
        self.signal: str | None = None
        self.home = home

    def install(self):
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(s, self._handle)

    def _handle(self, signum, frame):
        if self.signal is not None and signum == signal.SIGINT:  # second Ctrl-C: give up now
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum).name

    def __call__(self) -> bool:
        if self.signal is None and self.home is not None:
            self.home.here()  # a rename is followed; gone: RunFolderGone, the run fails saying so
            return self.home.left
        return self.signal is not None

    def why(self) -> str:
        """What stopped the run, for its status."""
        if self.signal is None and self.home is not None and (moved := self.home.stop_reason()):
            return moved
        return f"stopped by {self.signal}; resume to continue"


def _load_model(cfg: dict):
    from backend.engine.models import build_from_scratch, load_masked_lm, resolve_model
    from backend.runs.preflight import tokenizer_for

    m = cfg["model"]
    tok = tokenizer_for(cfg)
    if m["name"] == "from_scratch":
        import torch

        torch.manual_seed(cfg["train"]["seed"])
        model = build_from_scratch(m["from_scratch"], tok, attn_implementation=m["attn_implementation"])
    else:
        model = load_masked_lm(
            resolve_model(m["name"]),
            attn_implementation=m["attn_implementation"],
            trust_remote_code=m["trust_remote_code"],
        )
    return model, tok


def _config_to_train(run_dir: Path, resume: bool, rank0: bool) -> dict:
    """The run's config, or a DetourError before training touches anything: an unreadable config.yaml (the run is
    marked failed with the error: a killed run's 'running' too), or a run that has trained already and was not
    asked to resume, or a finished run (final/ written) asked to resume: left as they are (retraining in place would
    truncate the metrics, lose checkpoints or replace a finished model)."""
    try:
        cfg = read_config(run_dir)
    except ConfigError as exc:
        if rank0:
            write_status(run_dir, state="failed", error=str(exc), finished_at=time.time())
        raise

    def again() -> str:  # only for a refusal: suggest_name looks for a free name
        return (
            f"to train its config again as a new run: python -m backend train {run_dir / 'config.yaml'} "
            f"--name {suggest_name(run_dir.name, run_dir.parent)}"
        )

    if resume:  # resuming a finished run would retrain its last steps and replace final/
        if not (run_dir / "final").exists():
            resume_guard.check_config(run_dir, cfg)  # the config that trained, or refused naming the keys
            return cfg
        raise RunStartedError(
            f"run '{run_dir.name}' has finished (final/ is written): there is nothing to resume, and runs are "
            f"never retrained in place; {again()}"
        )
    trained = trained_so_far(run_dir)
    if trained is None:
        try:
            resume_guard.check_queued(run_dir, cfg, read_status(run_dir))  # the config it was queued with
        except ConfigError as exc:
            if rank0:
                write_status(run_dir, state="failed", error=str(exc), finished_at=time.time())
            raise
        return cfg
    if trained["finished"]:
        raise RunStartedError(
            f"run '{run_dir.name}' has finished (final/ is written) and runs are never retrained in place; {again()}"
        )
    raise RunStartedError(
        f"run '{run_dir.name}' has already trained to step {trained['step']} ({trained['state']}, newest "
        f"checkpoint {trained['checkpoint']}) and runs are never retrained in place; to continue it: "
        f"python -m backend train --run-dir {run_dir} --resume; {again()}"
    )


def _write_card(run_dir: Path, log) -> None:
    """final/README.md, the model card, once the run is done (its wall time is then known). A card that cannot be
    written never fails a finished run: the warning says so, and ``export`` writes it again."""
    from backend.cards.run_card import write_run_card

    try:
        log(f"model card: {write_run_card(run_dir)}")
    except Exception as exc:  # noqa: BLE001 - the model is whole and sealed; only its card is missing
        log(traceback.format_exc(), terminal=False)
        log(f"warning: the model card was not written ({type(exc).__name__}: {exc}); python -m backend export "
            f"{run_dir.name} --out DIR writes it")  # fmt: skip


def train_run(run_dir: str | Path, resume: bool = False) -> dict:
    """Train one prepared run directory; status.json records running/done/failed/cancelled."""
    from backend.detour.trainer import run_training
    from backend.engine.compiling import aborted_call, resolve_compile
    from backend.engine.models import model_config_of, quiet_transformers
    from backend.engine.precision import bf16_warning, resolve_precision
    from backend.runs import launch
    from backend.runs.preflight import check_positions, resolve_run_attention

    run_dir = Path(run_dir)
    world = launch.cpu_processes()  # before any Accelerator: N CPU processes are one DDP group, or refused
    rank0 = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))) == 0
    lock = (
        FileLock(run_dir / ".train.lock", f"run {run_dir.name}", "{what}: already being trained by pid {pid}")
        if rank0
        else None
    )
    if lock is not None:  # one trainer per run directory, whoever launched it
        inherited = os.environ.pop(LOCK_FD_ENV, None)  # the queue worker took it for us before we existed
        lock.adopt(int(inherited)) if inherited else lock.acquire()
    try:
        cfg = _config_to_train(run_dir, resume, rank0)
        home = RunHome(run_dir)  # held open: renamed, it is followed; gone, it is never recreated
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    meta = cfg.pop("_meta", {})
    stop = _StopFlag(home)
    stop.install()
    # The queue worker already points stdout at train.log (DETOUR_STDOUT_IS_LOG=1); from a terminal we tee.
    tee = rank0 and os.environ.get("DETOUR_STDOUT_IS_LOG") != "1"
    log_f = open(run_dir / "train.log", "a", buffering=1) if tee else None

    def log(msg: str, terminal: bool = True) -> None:
        """To train.log and (``terminal``) stdout; a full disk loses the line, never the run's end."""
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        try:
            if terminal or not log_f:
                print(line, flush=True)
            if log_f:
                log_f.write(line + "\n")
        except OSError:
            pass

    home.on_move = lambda old, new: log(f"the run folder was moved from {old} to {new}: its files go there now")
    reserve = faults.SpaceReserve(home.anchor() / ".failure-reserve")  # released where the folder is then

    if rank0:
        write_status(
            home.here(),
            state="running",
            error=None,
            pid=os.getpid(),
            started_at=time.time(),
            finished_at=None,
            resumed=resume,
            trained_before_s=time_spent(read_status(run_dir)) if resume else 0.0,  # the Runs table's time: all of it
        )
        reserve.hold()  # the blocks recording a failure needs, should the disk fill up while it trains
        log(f"run {run_dir.name}: {shlex.join(map(str, meta.get('command', [])))}")
    bug = False
    try:
        cfg = validate_config(cfg)
        asked = copy.deepcopy(cfg)
        requested = cfg["train"]["precision"]
        cfg["train"]["precision"], why = resolve_precision(requested)
        log(f"precision: {cfg['train']['precision']} ({why})")
        if warning := bf16_warning(cfg["train"]["precision"]):
            log(f"warning: {warning}")
        attn = cfg["model"]["attn_implementation"]
        resolved_attn, attn_why = resolve_run_attention(cfg, model_config_of(cfg["model"]))
        cfg["model"]["attn_implementation"] = resolved_attn
        log(f"attention: {resolved_attn} ({attn_why})")
        asked_compile = cfg["train"]["compile"]
        cfg["train"]["compile"], why_compile = resolve_compile(
            asked_compile, fsdp=cfg["train"]["fsdp"], aborted=aborted_call(run_dir)
        )  # off for good in a run whose process a compiled call ended
        log(f"compile: {'on' if cfg['train']['compile'] else 'off'} ({why_compile})")
        log(launch.describe(cfg, world))
        if rank0:  # config.yaml keeps what was asked (a queued run may train elsewhere) and what this machine chose
            meta["precision"] = {"requested": requested, "resolved": cfg["train"]["precision"], "why": why}
            meta["attn_implementation"] = {"requested": attn, "resolved": resolved_attn, "why": attn_why}
            meta["compile"] = {"requested": asked_compile, "resolved": cfg["train"]["compile"], "why": why_compile}
            resume_guard.record(meta, asked, run_dir)  # what a resume must still match
            atomic.write_yaml(home.here() / "config.yaml", {**asked, "_meta": meta}, make_parents=False)
        with quiet_transformers():
            model, tok = _load_model(cfg)
            if warning := check_positions(model.config, cfg["train"]["seq_len"], model.config.pad_token_id):
                log(f"warning: {warning}")
            state = run_training(cfg, home, model, tok, resume=resume, should_stop=stop, log=log)
        error = None if state == "done" else stop.why()
    except (Exception, KeyboardInterrupt) as exc:
        state = "failed" if not isinstance(exc, KeyboardInterrupt) else "cancelled"
        bug = not isinstance(exc, KeyboardInterrupt | MemoryError) and faults.is_bug(exc)
        fault = None if isinstance(exc, DetourError) else faults.user_message(exc)  # a full disk: path and what to do
        error = fault or f"{type(exc).__name__}: {exc}"
        if not fault and (number := faults.machine_fault(exc)):  # wrapped by a library: still say what to do
            error += f" (on the disk holding {run_dir}: {faults.hint(number)})"
        if rank0 or bug:  # the traceback goes to train.log (rank 0's); every terminal gets one line
            log(traceback.format_exc(), terminal=False)
        if world > 1 and (peer := launch.peer_failure()) and not isinstance(exc, DetourError):
            error, bug = f"another process of this launch failed: {peer}", False  # its break is ours, not a bug
        elif world > 1:
            launch.tell_peers(error)  # the others' next collective breaks: they say why, not "closed by peer"
        if bug:
            error += " (a bug: see train.log for the traceback)"
    end = dict(state=state, error=error, finished_at=time.time(), resumable=state != "done")
    if rank0:
        try:  # on a full disk, with the reserved blocks released; where the folder is now, never recreated
            st = reserve.write(lambda: write_status(home.here(), **end))
        except (OSError, DetourError) as exc:
            st = {**end, "error": f"{error}; and status.json could not record it: {faults.user_message(exc) or exc}"}
        log(f"run {home.path.name}: {state}" + (f" ({error})" if error else ""))
        if state == "done":
            _write_card(home.path, log)  # where the folder is now (a rename is followed)
    else:
        st = end
    reserve.release()
    st = {**st, "bug": bug}
    if log_f:
        try:
            log_f.close()
        except OSError:
            pass
    if lock is not None:
        lock.release()
    home.close()
    return st

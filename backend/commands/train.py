"""``python -m backend train CONFIG.yaml [--set k=v ...]`` or ``train --run-dir DIR [--resume]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from backend.commands import add_overrides, add_slurm_arguments, slurm_overrides
from backend.core.errors import ConfigError
from backend.engine.config import load_config


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", help="YAML config (omit to use the defaults: a pair on the bundled demo)")
    add_overrides(p, "override a config key, e.g. --set train.lr=1e-4 --set phases.main.tokens=500000")
    p.add_argument("--name", help="run name (same as --set name=...)")
    p.add_argument("--runs-dir", help="root of run directories (default: ./runs or $DETOUR_RUNS_DIR)")
    p.add_argument("--run-dir", help="train an already prepared run directory (what the app's queue launches)")
    p.add_argument("--resume", action="store_true", help="with --run-dir: continue from the last good checkpoint")
    p.add_argument("--executor", choices=["here", "slurm"], default="here", help="here (default: this process "
                   "trains) or slurm (one sbatch job per run through submitit, with the config's slurm.* settings; "
                   "a time limit or a requeue checkpoints and resumes)")  # fmt: skip
    add_slurm_arguments(p)


def run(args) -> int:
    from backend.runs import launch
    from backend.runs.train import prepare_runs, train_run

    if args.run_dir:
        if args.config:
            raise ConfigError("--run-dir", args.run_dir, "give either a CONFIG file or --run-dir, not both")
        if args.overrides or args.name:  # were silently ignored: a prepared run trains its own config.yaml
            given = list(args.overrides) + ([f"name={args.name}"] if args.name else [])
            raise ConfigError(
                "--set" if args.overrides else "--name",
                " ".join(given),
                "not applied to a prepared run (it trains, or resumes, the config it was made with); to train with "
                f"other values make a new run: python -m backend train {Path(args.run_dir) / 'config.yaml'} "
                "--set KEY=VALUE --name NEW",
            )
        from backend.engine.rundir import find_run

        find_run(Path(args.run_dir))  # "no run named R", with the close names: a run renamed meanwhile among them
        if args.executor == "slurm":  # the job resumes the run where it has trained
            from backend.engine.rundir import read_config
            from backend.sweeps.cluster import submit_run

            job = submit_run(Path(args.run_dir), read_config(Path(args.run_dir)).get("slurm"))
            print(f"== {args.run_dir}: Slurm job {job}")
            return 0
        return _exit_code(Path(args.run_dir), train_run(args.run_dir, resume=args.resume))
    if args.resume:
        raise ConfigError("--resume", True, "use it with --run-dir runs/NAME")
    if args.executor == "here":
        launch.cpu_processes()  # a launch that would be refused is refused before any run folder exists
    overrides = list(args.overrides) + ([f"name={args.name}"] if args.name else []) + slurm_overrides(args)
    cfg = load_config(args.config, overrides)
    if args.executor == "slurm":
        return _submit_to_slurm(cfg, args)
    command = [sys.executable, "-m", "backend", "train"] + sys.argv[2:] if sys.argv[1:2] == ["train"] else None
    root = Path(args.runs_dir) if args.runs_dir else None
    # under a launcher only the global main process makes the run folders; the others train in them
    dirs = launch.main_decides(
        lambda: prepare_runs(
            cfg, root=root, command=command, claim=True, warn=lambda w: print(f"warning: {w}", file=sys.stderr)
        )
    )
    worst = 0
    for d in dirs:
        print(f"== {d}", flush=True)
        st = train_run(d)
        if st["state"] != "done":
            worst = max(worst, _exit_code(d, st), 1)
            if st["state"] == "cancelled":
                print(f"{d.name}: cancelled; resume with: python -m backend train --run-dir {d} --resume")
                break
    return worst


def _submit_to_slurm(cfg: dict, args) -> int:
    """Prepare the run(s) here and hand each to Slurm as one job (what the Launch tab's Slurm target does)."""
    from backend.sweeps.cluster import submit_config

    root = Path(args.runs_dir) if args.runs_dir else None
    for d, job in submit_config(cfg, root=root, warn=lambda w: print(f"warning: {w}", file=sys.stderr)):
        print(f"== {d}: Slurm job {job} (squeue -j {job}; the run's status.json and train.log follow it)")
    return 0


def _exit_code(run_dir: Path, st: dict) -> int:
    """The top-level rule for a run that ended: a refusal or a fault of the machine is one line and exit 2, a bug
    exit 1 (the traceback is in train.log either way)."""
    if st["state"] != "failed":
        return 0
    print(f"error: run {run_dir.name} failed: {st.get('error')}", file=sys.stderr, flush=True)
    if st.get("bug"):
        print(f"internal error (a bug in Detour Lab, please report it): see {run_dir / 'train.log'}", file=sys.stderr)
        return 1
    return 2

"""``python -m backend queue``: serve the run queue (the app starts this detached; safe to run by hand)."""

from __future__ import annotations


def add_arguments(parser) -> None:
    parser.add_argument("--root", default=None, help="runs folder (default: DETOUR_RUNS_DIR or ./runs)")
    parser.add_argument(
        "--max-concurrent", type=int, default=None, help="training jobs at once (default: DETOUR_MAX_CONCURRENT or 1)"
    )
    parser.add_argument(
        "--pin-gpus", action="store_true", help="one run per GPU, each pinned with CUDA_VISIBLE_DEVICES (sweeps)"
    )
    parser.add_argument("--poll", type=float, default=1.0, help="seconds between looks at the queue")


def run(args) -> int:
    from backend.engine.rundir import root_problem
    from backend.runs.gpus import visible_gpus
    from backend.runs.jobs import JobError, run_worker

    if problem := root_problem(args.root, "--root" if args.root else None):
        raise JobError(problem)
    gpus = visible_gpus() if args.pin_gpus else None
    return run_worker(args.root, max_concurrent=args.max_concurrent, poll_s=args.poll, gpus=gpus)

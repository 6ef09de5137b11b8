"""One module per CLI command, each with ``add_arguments(parser)`` and ``run(args) -> int``; argument helpers
that several commands share live here."""

from __future__ import annotations

import argparse


def add_overrides(p: argparse.ArgumentParser, help: str) -> None:
    """``--set KEY=VALUE`` (repeatable) into ``args.overrides``: train, validate and replicate take config overrides
    with the same flag and the same ``key=value`` syntax."""
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=help)


def add_slurm_arguments(p: argparse.ArgumentParser) -> None:
    """``--executor slurm``'s settings as flags; each is the config key ``slurm.*`` (the flags override the config)."""
    g = p.add_argument_group("Slurm (--executor slurm; the config's slurm.* keys)")
    g.add_argument("--slurm-partition", help="slurm.partition")
    g.add_argument("--slurm-time", "--timeout-min", dest="slurm_time", type=int, help="slurm.time_min: minutes")
    g.add_argument("--slurm-cpus", type=int, help="slurm.cpus_per_task")
    g.add_argument("--slurm-gpus", "--gpus-per-cell", dest="slurm_gpus", type=int, help="slurm.gpus_per_task")
    g.add_argument("--slurm-account", help="slurm.account")
    g.add_argument("--sbatch", action="append", default=[], metavar="--KEY=VALUE",
                   help="an extra #SBATCH option (repeatable), e.g. --sbatch=--qos=high")  # fmt: skip
    g.add_argument("--slurm-signal-s", type=int, help="slurm.signal_delay_s: checkpoint this long before the limit")


def slurm_overrides(args: argparse.Namespace) -> list[str]:
    """The Slurm flags given, as ``slurm.KEY=VALUE`` overrides."""
    pairs = {
        "partition": args.slurm_partition,
        "time_min": args.slurm_time,
        "cpus_per_task": args.slurm_cpus,
        "gpus_per_task": args.slurm_gpus,
        "account": args.slurm_account,
        "sbatch": " ".join(args.sbatch) if args.sbatch else None,
        "signal_delay_s": args.slurm_signal_s,
    }
    return [f"slurm.{k}={v}" for k, v in pairs.items() if v is not None]

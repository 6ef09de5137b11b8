"""``python -m backend validate CONFIG.yaml`` — every check training would make, without training."""

from __future__ import annotations

import argparse
import sys

from backend.commands import add_overrides


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?")
    add_overrides(p, "override a config key, e.g. --set train.lr=1e-4 (repeatable)")
    p.add_argument("--print", action="store_true", help="print the resolved config, each key with what it means")


def run(args) -> int:
    from backend.engine.config import config_to_yaml, load_config
    from backend.runs.preflight import check

    cfg = load_config(args.config, args.overrides)
    facts = check(cfg)
    warnings = facts.pop("warnings", [])
    if args.print:
        print(config_to_yaml(cfg, annotated=True))
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(f"ok: {cfg['recipe']} on {cfg['data']['corpus']} ({facts})")
    return 0

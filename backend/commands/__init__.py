"""One module per CLI command, each with ``add_arguments(parser)`` and ``run(args) -> int``; argument helpers
that several commands share live here."""

from __future__ import annotations

import argparse


def add_overrides(p: argparse.ArgumentParser, help: str) -> None:
    """``--set KEY=VALUE`` (repeatable) into ``args.overrides``: train, validate and replicate take config overrides
    with the same flag and the same ``key=value`` syntax."""
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=help)

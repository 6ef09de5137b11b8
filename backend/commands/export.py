"""``python -m backend export NAME --out DIR [--push-to-hub REPO]``: a finished run (its sealed ``final/``) or a kept
fine-tuned model as a self-contained folder with its model card (``backend/cards/export.py``), the same function as
the Runs tab's Export button; ``--push-to-hub`` uploads it in one commit through ``huggingface_hub``."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "name",
        metavar="NAME",
        help="a finished run (its name, SWEEP/RUN or its folder) or a kept fine-tuned model folder "
        "(OUT/models/<label>/seed-<s>)",
    )
    p.add_argument("--out", metavar="DIR", help="a new (or empty) folder to write the export into")
    p.add_argument(
        "--push-to-hub",
        metavar="REPO",
        help="also upload it to this Hub repository (org/name) in one commit; needs a network and a token "
        "(hf auth login); refused offline before anything is written",
    )
    p.add_argument("--private", action="store_true", help="with --push-to-hub: create the repository private")


def run(args) -> int:
    from backend.cards.export import export_model

    res = export_model(args.name, args.out, args.push_to_hub, private=args.private)
    if res["out"]:
        print(f"exported {args.name} to {res['out']}: {', '.join(res['files'])}")
        print(f"load it: transformers.{res['auto_class']}.from_pretrained({res['out']!r}); its card: {res['card']}")
    if res["url"]:
        print(f"pushed to {res['repo']}: {res['url']}")
    return 0

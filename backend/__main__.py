"""``python -m backend COMMAND ...`` — the CLI. Each command lives in ``backend/commands/<name>.py``
with ``add_arguments(parser)`` and ``run(args) -> int``; the app calls the same backend functions."""

from __future__ import annotations

import argparse
import importlib
import sys

from backend.core import faults

COMMANDS = {
    "train": "Run one experiment (or a pair) from a YAML config.",
    "validate": "Validate a YAML config without training.",
    "prepare-data": "Tokenize and pack a config's corpus into the token store ahead of training.",
    "cka": "Layer x layer similarity (debiased CKA by default) and weight change between two models or runs.",
    "evaluate": "Fine-tune and evaluate models on NER / classification across seeds.",
    "fill-mask": "Top-k predictions for a masked sentence, one or more models.",
    "tag": "Named entities in a text, for one or more token-classification models (fine-tuned here or released).",
    "explain": "What the objectives do: attention masks, per-token loss, a run's checkpoints.",
    "doctor": "Where a run's time goes: tokens/s, MFU, the time split, ETA and findings with their fixes.",
    "export": "A finished run or fine-tuned model as a folder with its model card; optionally pushed to the Hub.",
    "queue": "Run queued runs one after another (started detached by the app).",
    "sweep": "A grid of matched runs over config keys x seeds, with a report (CIs, paired verdicts).",
    "replicate": "Mini replication of the paper's three findings, with a report.",
    "build-assets": "Rebuild the bundled tokenizer and tiny base model.",
}


def build_parser() -> argparse.ArgumentParser:
    """The whole CLI's parser, every command's arguments on it (the guide's CLI reference is generated from it)."""
    parser = argparse.ArgumentParser(prog="python -m backend", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in COMMANDS.items():
        mod_name = f"backend.commands.{name.replace('-', '_')}"
        try:
            mod = importlib.import_module(mod_name)
        except ModuleNotFoundError as exc:
            if exc.name != mod_name:
                raise
            continue
        p = sub.add_parser(name, help=help_text, description=help_text)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except Exception as exc:  # the one rule: a line the user can act on (exit 2), or a bug's traceback (exit 1)
        return faults.report(exc)


if __name__ == "__main__":
    sys.exit(main())

"""``python -m backend prepare-data CONFIG.yaml [--set k=v ...]`` — build the token store ahead of training.

Tokenizes and packs the config's corpus with its model's tokenizer and ``train.seq_len`` into the cache that
training opens (``DETOUR_CACHE_DIR``, default ``~/.cache/detour-lab``); a second call finds it and returns at once.
"""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")


def run(args) -> int:
    from backend.engine.config import load_config
    from backend.engine.tokenstore import open_corpus
    from backend.runs.preflight import tokenizer_for

    cfg = load_config(args.config, args.overrides)
    tok = tokenizer_for(cfg)
    _, _, info = open_corpus(cfg["data"], tok, cfg["train"]["seq_len"], log=lambda m: print(m, flush=True))
    print(f"token store: {info['cache_path']} ({info['cache_bytes'] / 2**20:.1f} MiB, "
          f"{'already built' if info['cache_hit'] else 'built'} in {info['prepare_seconds']:.1f} s)")  # fmt: skip
    print(
        f"{info['documents']:,} documents: {info['train_sequences']:,} training sequences "
        f"({info['train_tokens']:,} tokens), {info['heldout_sequences']:,} held-out ({info['heldout_tokens']:,} "
        f"tokens) of {cfg['train']['seq_len']}; fingerprint {info['fingerprint']}"
    )
    return 0

"""``python -m backend build-assets`` — rebuild the bundled tokenizer and tiny base from public-domain text.

Steps (each skipped when its output exists, so an interrupted build resumes):
1. tokenizer: byte-level BPE on Project Gutenberg paragraphs (headers/footers stripped);
2. corpus: the same paragraphs written to ``runs/_build/gutenberg_clean/`` (never into the repo);
3. pretrain: ``configs/pretrain_tiny_en.yaml`` (from-scratch MLM + decay) as run ``pretrain-tiny-en``;
4. export: fp16 safetensors + tokenizer + model card into ``assets/models/detour-tiny-en``.
"""

from __future__ import annotations

import argparse

from backend.core.paths import BUNDLED_MODELS_DIR, BUNDLED_TOKENIZER_DIR, REPO_ROOT, runs_dir


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gutenberg", default=str(REPO_ROOT.parent / "shared" / "data" / "gutenberg_en"))
    p.add_argument("--config", default=str(REPO_ROOT / "configs" / "pretrain_tiny_en.yaml"))
    p.add_argument("--vocab-size", type=int, default=8192)
    p.add_argument("--retrain-tokenizer", action="store_true")
    p.add_argument("--only", choices=["tokenizer", "corpus", "pretrain", "export"], help="run a single step")


def run(args) -> int:
    from backend.bundle.tokenizer_build import build_tokenizer, gutenberg_paragraphs
    from backend.core import atomic
    from backend.engine.config import load_config
    from backend.runs.train import prepare_runs, train_run

    steps = [args.only] if args.only else ["tokenizer", "corpus", "pretrain", "export"]
    texts = None
    if "tokenizer" in steps and (args.retrain_tokenizer or not (BUNDLED_TOKENIZER_DIR / "tokenizer.json").exists()):
        texts = gutenberg_paragraphs(args.gutenberg)
        build_tokenizer(texts, BUNDLED_TOKENIZER_DIR, args.vocab_size)
        print(f"tokenizer: {args.vocab_size} tokens -> {BUNDLED_TOKENIZER_DIR}")
    corpus_dir = runs_dir() / "_build" / "gutenberg_clean"
    if "corpus" in steps and not corpus_dir.exists():
        texts = texts or gutenberg_paragraphs(args.gutenberg)
        atomic.write_text(corpus_dir / "paragraphs.txt", "\n\n".join(texts) + "\n")
        print(f"corpus: {len(texts)} paragraphs -> {corpus_dir}")
    cfg = load_config(args.config, [f"data.corpus={corpus_dir}"])
    run_dir = runs_dir() / cfg["name"]
    if "pretrain" in steps:
        if not run_dir.exists():
            prepare_runs(cfg)
            st = train_run(run_dir)
        else:
            st = (
                train_run(run_dir, resume=not (run_dir / "final").exists())
                if not (run_dir / "final").exists()
                else {"state": "done"}
            )
        if st["state"] != "done":
            print(f"pretrain: {st['state']} ({st.get('error')}); rerun build-assets to resume")
            return 1
    if "export" in steps:
        from backend.bundle.model_card import export_base

        out = export_base(run_dir, BUNDLED_MODELS_DIR / "detour-tiny-en", args)
        print(f"export: {out}")
    return 0

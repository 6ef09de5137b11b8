"""Export a finished pretraining run as a bundled model (fp16 safetensors + tokenizer + model card)."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from backend.core import atomic
from backend.core.machine import cpu_name
from backend.engine.rundir import read_config, read_metrics, read_status


def _hardware() -> str:
    return f"{cpu_name()}, {torch.get_num_threads()} torch threads, CPU only"


def export_base(run_dir: Path, out_dir: Path, args=None) -> Path:
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    run_dir, out_dir = Path(run_dir), Path(out_dir)
    model = AutoModelForMaskedLM.from_pretrained(run_dir / "final", dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(run_dir / "final")
    tmp = out_dir.with_name(f".{out_dir.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.half().save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)

    cfg, st, rows = read_config(run_dir), read_status(run_dir), read_metrics(run_dir)
    evals = [r for r in rows if r["type"] == "eval"]
    trains = [r for r in rows if r["type"] == "train"]
    last = evals[-1]
    import json

    data_info = json.loads((run_dir / "data_info.json").read_text())
    hours = (st.get("finished_at", 0) - st.get("started_at", 0)) / 3600
    arch = cfg["model"]["from_scratch"]
    n_params = sum(p.numel() for p in model.parameters())
    card = f"""---
license: cc0-1.0
language: en
library_name: transformers
pipeline_tag: fill-mask
---
# detour-tiny-en

A tiny ModernBERT encoder pretrained **from scratch** by Detour Lab's own MLM recipe
(`python -m backend build-assets`, config `configs/pretrain_tiny_en.yaml`), so that the app and every
demo work offline. It is a teaching/testing base, not a useful English model.

| | |
|---|---|
| architecture | ModernBERT, {arch["num_hidden_layers"]} layers, hidden {arch["hidden_size"]}, intermediate {arch["intermediate_size"]}, {arch["num_attention_heads"]} heads, local window {arch["local_attention"]} with a global layer every {arch["global_attn_every_n_layers"]}, max length {arch["max_position_embeddings"]} |
| parameters | {n_params / 1e6:.2f} M (weights stored in fp16) |
| tokenizer | byte-level BPE, {len(tok)} tokens, trained on the same text (`assets/tokenizer`) |
| data | 13 public-domain Project Gutenberg books (`../shared/data/gutenberg_en`, headers/footers stripped), {data_info["documents"]} paragraphs; held-out split of {data_info["heldout_documents"]} paragraphs ({data_info["heldout_tokens"]} tokens) |
| recipe | MLM 30% (seq {cfg["train"]["seq_len"]}, batch {cfg["train"]["batch_size"]}, peak lr {cfg["train"]["lr"]}, AdamW betas {cfg["train"]["betas"]}), then MLM 15% decay (1-sqrt to 10% of peak) for 10% of the tokens |
| training | {st.get("tokens_seen", trains[-1]["tokens_seen"]):,} tokens, {st.get("step")} optimizer steps, {hours:.2f} h wall |
| hardware | {_hardware()}, precision {cfg["train"]["precision"]} |
| final held-out MLM (15%, fixed masks) | loss {last["eval_mlm_loss"]:.3f}, accuracy {last["eval_mlm_accuracy"]:.3f} |
| final held-out next-token (causal) loss | {last["eval_clm_loss"]:.3f} |
| licence | CC0-1.0 (weights); training text is public domain |

Reproduce: `python -m backend build-assets --gutenberg ../shared/data/gutenberg_en` (steps: tokenizer,
corpus, pretrain, export; each resumes). The exact resolved config is in `pretrain_config.yaml`.
"""
    atomic.write_text(tmp / "README.md", card)
    atomic.write_yaml(tmp / "pretrain_config.yaml", cfg)
    atomic.replace_dir(tmp, out_dir)
    return out_dir

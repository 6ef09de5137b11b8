"""Corpus preparation: the token store vs the in-memory path, at 2M, 32M and >= 200M tokens.

    python bench/bench_data.py [--sizes 2,32,210] [--corpora bench/.corpora] [--old-max 40] [--steps 8]

Corpora are built by concatenating ``../shared/data`` texts (Gutenberg books, CRAFT articles) into a folder of
files until the size (in millions of tokens of the bundled tokenizer, estimated at 4.0 characters per token) is
reached; they live under ``--corpora`` (gitignored, never committed). Every measurement runs in its own child
process; its peak RSS is that child's ``ru_maxrss`` (``os.wait4``):

* ``prepare``: the token store built from a cold cache (``open_corpus``: count + tokenize on all cores + pack),
  then the same call again (cache hit): seconds in-process and the child's whole wall time;
* ``old``: ``load_corpus_in_memory`` (what training did before the store), up to ``--old-max`` M tokens;
* ``pair``: a pair run (``python -m backend train``, detour + MLM, ``detour-tiny-en``, seq_len 256, batch 16,
  ``--steps`` steps each) on the prepared store: peak RSS, time until training started, training tokens/s;
* ``train-old``: one MLM run at the smallest size with the trainer reading the in-memory path, for tokens/s and
  RSS against ``train-new`` (the same run on the store).

Results: bench/results/data.json + data.md
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

CHARS_PER_TOKEN = 4.0  # the bundled 8192-token tokenizer on Gutenberg + CRAFT text (measured: 1.79M tokens in 7.2 MB)
SEQ_LEN = 256


# ---------------------------------------------------------------------------------------------- corpora
def build_corpus(root: Path, mtokens: float) -> Path:
    """A folder of copies of the shared texts holding about ``mtokens`` M tokens (reused if already there)."""
    from backend.core.paths import SHARED_DATA_DIR

    out = root / f"{mtokens:g}M"
    done = out / ".complete"
    if done.exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    books = sorted((SHARED_DATA_DIR / "gutenberg_en").glob("*.txt"))
    craft = sorted((SHARED_DATA_DIR / "craft_pmc_oa_text" / "articles").glob("*.txt"))
    if not books or not craft:
        raise SystemExit(f"bench_data: ../shared/data texts not found under {SHARED_DATA_DIR}")
    sources = [(b.name, b.read_bytes()) for b in books]
    sources.append(("craft_articles.txt", b"\n\n".join(a.read_bytes().strip() for a in craft) + b"\n"))
    target = mtokens * 1e6 * CHARS_PER_TOKEN
    written, copy = 0, 0
    while written < target:
        for name, data in sources:
            if written >= target:
                break
            (out / f"{copy:03d}-{name}").write_bytes(data)
            written += len(data)
        copy += 1
    done.write_text(f"{written} bytes\n")
    return out


# ---------------------------------------------------------------------------------------------- children
def child(mode: str, corpus: str, extra: dict) -> dict:
    """Runs inside the measured child process; returns what it measured."""
    from backend.engine.config import load_config
    from backend.engine.models import load_tokenizer

    data = load_config(None, [f"data.corpus={corpus}"])["data"]
    if mode in ("prepare", "old"):
        tok = load_tokenizer("detour-tiny-en")
        t = time.perf_counter()
        if mode == "prepare":
            from backend.engine.tokenstore import open_corpus

            train, held, info = open_corpus(data, tok, SEQ_LEN, log=lambda m: print(m, file=sys.stderr, flush=True))
        else:
            from backend.engine.data import load_corpus_in_memory

            train, held, info = load_corpus_in_memory(data, tok, SEQ_LEN)
        return {"seconds": time.perf_counter() - t, "tokens": train.num_tokens + held.num_tokens, "info": info}
    # training: a pair (or one MLM run) of a few steps
    from backend.engine.rundir import read_metrics
    from backend.runs.train import prepare_runs, train_run

    if extra.get("old_path"):
        import backend.detour.trainer as trainer
        from backend.engine.data import load_corpus_in_memory

        trainer.open_corpus = lambda d, tok, seq_len, log=None: load_corpus_in_memory(d, tok, seq_len)
    steps = extra["steps"]
    cfg = load_config(
        None,
        [
            "name=bench",
            f"recipe={extra['recipe']}",
            "model.name=detour-tiny-en",
            f"data.corpus={corpus}",
            f"train.seq_len={SEQ_LEN}",
            "train.batch_size=16",
            "train.precision=fp32",
            f"phases.main.steps={steps}",
            "phases.decay.steps=0",
            "phases.decay.fraction=0",
            "logging.log_every=2",
            f"logging.eval_every={10 * steps}",
            f"logging.checkpoint_every={10 * steps}",
            "logging.eval_batches=1",
        ],
    )
    t0 = time.time()
    runs = prepare_runs(cfg, root=Path(extra["runs_root"]))
    out = []
    for r in runs:
        t = time.time()
        assert train_run(r)["state"] == "done"
        rows = [x for x in read_metrics(r) if x["type"] == "train"]
        first = min(x["time"] for x in read_metrics(r) if x["type"] in ("train", "phase", "eval"))
        info = json.loads((r / "data_info.json").read_text())
        out.append({
            "run": r.name,
            "started_training_after_s": first - t,
            "prepare_seconds": info.get("prepare_seconds"),
            "cache_hit": info.get("cache_hit"),
            "tokens_per_s": sum(x["tokens_per_s"] for x in rows[1:]) / max(len(rows) - 1, 1),
        })  # fmt: skip
    return {"seconds": time.time() - t0, "runs": out}


def measure(mode: str, corpus: Path, env: dict, **extra) -> dict:
    """Run ``child(mode, ...)`` in a fresh process; add its wall time and peak RSS (MB)."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        result = Path(f.name)
    argv = [sys.executable, __file__, "--child", mode, "--corpus", str(corpus), "--result", str(result)]
    argv += ["--extra", json.dumps(extra)]
    t = time.time()
    p = subprocess.Popen(argv, env={**os.environ, **env})
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.time() - t
    if status != 0:
        raise SystemExit(f"bench_data: child {mode} on {corpus} failed (status {status})")
    out = json.loads(result.read_text())
    result.unlink()
    out.update(wall_s=wall, peak_rss_mb=ru.ru_maxrss / 1024)
    print(f"  {mode:10s} {corpus.name:6s} {wall:7.1f} s wall, peak RSS {out['peak_rss_mb']:7.0f} MB", flush=True)
    return out


# ---------------------------------------------------------------------------------------------- main
def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="2,32,210", help="corpus sizes in M tokens (estimated)")
    p.add_argument("--corpora", default=str(HERE / ".corpora"), help="where the corpora are built (gitignored)")
    p.add_argument("--old-max", type=float, default=40, help="measure the in-memory path only up to this size")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--child")
    p.add_argument("--corpus")
    p.add_argument("--result")
    p.add_argument("--extra", default="{}")
    a = p.parse_args()
    if a.child:
        Path(a.result).write_text(json.dumps(child(a.child, a.corpus, json.loads(a.extra)), default=str))
        return

    from common import save

    sizes = [float(s) for s in a.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bench-data-"))
    results = []
    try:
        for i, size in enumerate(sizes):
            corpus = build_corpus(Path(a.corpora), size)
            print(f"corpus {corpus} ({sum(f.stat().st_size for f in corpus.iterdir()) / 1e6:.0f} MB)", flush=True)
            env = {"DETOUR_CACHE_DIR": str(work / f"cache-{size:g}"), "DETOUR_RUNS_DIR": str(work / "runs")}
            row: dict = {"size_m": size}
            row["prepare"] = measure("prepare", corpus, env)
            row["hit"] = measure("prepare", corpus, env)
            if size <= a.old_max:
                row["old"] = measure("old", corpus, env)
            row["pair"] = measure("train", corpus, env, recipe="pair", steps=a.steps, runs_root=str(work / f"r{i}"))
            if i == 0:  # training on the store vs the in-memory path, one MLM run each
                for key, old in (("train_new", False), ("train_old", True)):
                    row[key] = measure("train", corpus, env, recipe="mlm", steps=a.steps, old_path=old,
                                       runs_root=str(work / f"{key}{i}"))  # fmt: skip
            shutil.rmtree(work / f"cache-{size:g}", ignore_errors=True)
            results.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    save("data", {"seq_len": SEQ_LEN, "cores": os.cpu_count(), "results": results}, table(results))


def table(results: list[dict]) -> str:
    lines = [
        "| corpus (tokens) | store: prepare s | prepare tokens/s | prepare peak RSS "
        "| cache hit s (in-process / process) "
        "| old path s | old path peak RSS | pair: peak RSS | pair: training started after (run 1 / run 2) "
        "| pair: training tokens/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        pr, hit, old, pair = r["prepare"], r["hit"], r.get("old"), r["pair"]
        runs = pair["runs"]
        old_s = f"{old['seconds']:.1f}" if old else "skipped (~80 B/token)"
        old_rss = f"{old['peak_rss_mb']:.0f} MB" if old else "-"
        started = " / ".join(f"{x['started_training_after_s']:.1f} s" for x in runs)
        tps = " / ".join(f"{x['tokens_per_s']:,.0f}" for x in runs)
        lines.append(
            f"| {pr['tokens'] / 1e6:.1f}M | {pr['seconds']:.1f} | {pr['tokens'] / pr['seconds']:,.0f} "
            f"| {pr['peak_rss_mb']:.0f} MB | {hit['info']['prepare_seconds']:.3f} / {hit['wall_s']:.1f} "
            f"| {old_s} | {old_rss} | {pair['peak_rss_mb']:.0f} MB | {started} | {tps} |"
        )
    first = results[0]
    if "train_new" in first:
        new, old = first["train_new"], first["train_old"]
        lines += [
            "",
            f"Training one MLM run on the {first['prepare']['tokens'] / 1e6:.1f}M corpus ({SEQ_LEN} x 16): "
            f"store {new['runs'][0]['tokens_per_s']:,.0f} tokens/s, peak RSS {new['peak_rss_mb']:.0f} MB; "
            f"in-memory path {old['runs'][0]['tokens_per_s']:,.0f} tokens/s, peak RSS {old['peak_rss_mb']:.0f} MB.",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()

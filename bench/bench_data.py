"""Corpus preparation: the token store vs the in-memory path, at 2M, 32M and >= 200M tokens; one big file.

    python bench/bench_data.py [--sizes 2,32,210] [--corpora bench/.corpora] [--old-max 40] [--steps 8]
                               [--single-mb 100,500,2000] [--single-kinds txt,jsonl,one-line]
                               [--old-single-max-mb 100]

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

The single-file case (``--single-mb``, ``--sizes ''`` to run it alone): ONE ``.txt`` (the shared texts, blank-line
separated paragraphs) or ONE ``.jsonl`` (the same text, records of consecutive paragraphs of >= 2,000 characters) of
each size in MB, under ``--corpora``; ``one-line``: the same text as ONE ``.txt`` line with no line break at all (the
reader cuts it into documents of at most ``readers.MAX_DOC_CHARS`` characters):

* ``prepare``: the token store built from a cold cache with the streaming readers (what ``prepare-data`` does);
* ``prepare-whole``: the same build as the store did it before: the file read whole (``data.iter_documents(...,
  whole_files=True)``) and tokenizer batches of up to 4M characters; up to ``--old-single-max-mb``.

A run that measures only one case keeps the other case's rows of ``data.json`` (with the date they were measured).

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
    from backend.core.paths import shared_data_dir

    out = root / f"{mtokens:g}M"
    done = out / ".complete"
    if done.exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    books = sorted((shared_data_dir() / "gutenberg_en").glob("*.txt"))
    craft = sorted((shared_data_dir() / "craft_pmc_oa_text" / "articles").glob("*.txt"))
    if not books or not craft:
        raise SystemExit(f"bench_data: ../shared/data texts not found under {shared_data_dir()}")
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


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in text.replace("\r\n", "\n").split("\n\n") if p.strip()]


SINGLE_KINDS = ("txt", "jsonl", "one-line")
KIND_LABEL = {"txt": ".txt", "jsonl": ".jsonl", "one-line": ".txt, one line (no line break)"}


def single_file_name(mb: float, kind: str) -> str:
    return f"single-{mb:g}MB-one-line.txt" if kind == "one-line" else f"single-{mb:g}MB.{kind}"


def build_single_file(root: Path, mb: float, kind: str) -> Path:
    """ONE ``.txt`` or ``.jsonl`` file of about ``mb`` MB made of copies of the shared texts (reused if there)."""
    from backend.core.paths import shared_data_dir

    out = root / single_file_name(mb, kind)
    done = root / f"{out.name}.complete"
    if done.exists() and out.exists():
        return out
    root.mkdir(parents=True, exist_ok=True)
    books = sorted((shared_data_dir() / "gutenberg_en").glob("*.txt"))
    craft = sorted((shared_data_dir() / "craft_pmc_oa_text" / "articles").glob("*.txt"))
    if not books or not craft:
        raise SystemExit(f"bench_data: ../shared/data texts not found under {shared_data_dir()}")
    texts = [f.read_text() for f in books + craft]
    if kind == "txt":
        pieces = [(t.strip() + "\n\n").encode() for t in texts]
    elif kind == "one-line":
        pieces = [(" ".join(t.split()) + " ").encode() for t in texts]
    else:
        pieces, cur = [], []
        for para in (p for t in texts for p in _paragraphs(t)):
            cur.append(para)
            if sum(map(len, cur)) >= 2000:
                pieces.append((json.dumps({"text": "\n\n".join(cur)}, ensure_ascii=False) + "\n").encode())
                cur = []
    target, written = mb * 1e6, 0
    with open(out, "wb") as f:
        while written < target:
            for piece in pieces:
                if written >= target:
                    break
                f.write(piece)
                written += len(piece)
    done.write_text(f"{written} bytes\n")
    return out


# ---------------------------------------------------------------------------------------------- children
def child(mode: str, corpus: str, extra: dict) -> dict:
    """Runs inside the measured child process; returns what it measured."""
    from backend.engine.config import load_config
    from backend.engine.models import load_tokenizer

    data = load_config(None, [f"data.corpus={corpus}"])["data"]
    if mode in ("prepare", "prepare-whole", "old"):
        tok = load_tokenizer("detour-tiny-en")
        t = time.perf_counter()
        if mode.startswith("prepare"):
            from backend.engine import tokenstore

            if mode == "prepare-whole":  # the store as it read files before the streaming readers
                import functools

                from backend.engine.data import iter_documents

                tokenstore.iter_documents = functools.partial(iter_documents, whole_files=True)
                tokenstore.BATCH_CHARS = 4_000_000
            log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
            train, held, info = tokenstore.open_corpus(data, tok, SEQ_LEN, log=log)
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
    if "error" in out:
        print(f"  {mode:13s} {corpus.name:6s} refused: {out['error']}", flush=True)
    print(f"  {mode:13s} {corpus.name:6s} {wall:7.1f} s wall, peak RSS {out['peak_rss_mb']:7.0f} MB", flush=True)
    return out


# ---------------------------------------------------------------------------------------------- main
def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="2,32,210", help="corpus sizes in M tokens (estimated)")
    p.add_argument("--corpora", default=str(HERE / ".corpora"), help="where the corpora are built (gitignored)")
    p.add_argument("--old-max", type=float, default=40, help="measure the in-memory path only up to this size")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--single-mb", default="", help="the single-file case: file sizes in MB, e.g. 100,500,2000")
    p.add_argument("--single-kinds", default="txt,jsonl")
    p.add_argument("--old-single-max-mb", type=float, default=100, help="measure the whole-file reading up to this")
    p.add_argument("--keep-corpora", action="store_true", help="keep the single files (default: deleted after)")
    p.add_argument("--child")
    p.add_argument("--corpus")
    p.add_argument("--result")
    p.add_argument("--extra", default="{}")
    a = p.parse_args()
    if a.child:
        from backend.core.errors import DetourError

        try:
            out = child(a.child, a.corpus, json.loads(a.extra))
        except DetourError as exc:  # what a user would be told (the whole-file reading of a one-line file)
            out = {"error": str(exc)}
        Path(a.result).write_text(json.dumps(out, default=str))
        return

    from common import save

    sizes = [float(s) for s in a.sizes.split(",") if s]
    work = Path(tempfile.mkdtemp(prefix="bench-data-"))
    results, single = [], []
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
        for kind in [k for k in a.single_kinds.split(",") if k]:
            for mb in [float(x) for x in a.single_mb.split(",") if x]:
                single.append(measure_single_file(Path(a.corpora), mb, kind, work, a.old_single_max_mb))
                if not a.keep_corpora:
                    for name in (single_file_name(mb, kind), f"{single_file_name(mb, kind)}.complete"):
                        (Path(a.corpora) / name).unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    payload = {"seq_len": SEQ_LEN, "cores": os.cpu_count(), "results": results, "single_file": single}
    previous = HERE / "results" / "data.json"
    earlier = json.loads(previous.read_text()) if previous.exists() else {}
    if not results and earlier.get("results"):  # the folder case not run this time: its earlier rows, with their date
        payload["results"] = earlier["results"]
        payload["results_measured"] = earlier.get("results_measured") or earlier.get("machine")
    new = {(r["kind"], r["target_mb"]) for r in single}  # single files: rows not measured again are kept
    kept = [r for r in earlier.get("single_file", []) if (r["kind"], r["target_mb"]) not in new]
    payload["single_file"] = sorted(kept + single, key=lambda r: (SINGLE_KINDS.index(r["kind"]), r["target_mb"]))
    save("data", payload, table(payload))


def measure_single_file(root: Path, mb: float, kind: str, work: Path, old_max_mb: float) -> dict:
    """Prepare ONE file of ``mb`` MB: streaming readers vs the whole-file reading (where it fits)."""
    import subprocess as sp

    df = sp.run(["df", "-h", str(root.resolve().parent)], capture_output=True, text=True).stdout.splitlines()[-1]
    print(f"disk before writing {mb:g} MB: {df}", flush=True)
    corpus = build_single_file(root, mb, kind)
    print(f"corpus {corpus} ({corpus.stat().st_size / 1e6:.0f} MB)", flush=True)
    row: dict = {"kind": kind, "target_mb": mb, "mb": corpus.stat().st_size / 1e6}
    row["date"] = time.strftime("%Y-%m-%d %H:%M")
    for mode in ("prepare", "prepare-whole"):
        if mode == "prepare-whole" and mb > old_max_mb:
            continue
        env = {"DETOUR_CACHE_DIR": str(work / f"cache-{kind}-{mb:g}-{mode}"), "DETOUR_RUNS_DIR": str(work / "runs")}
        row[mode] = measure(mode, corpus, env)
        shutil.rmtree(work / f"cache-{kind}-{mb:g}-{mode}", ignore_errors=True)
    return row


def table(payload: dict) -> str:
    from common import machine

    now = machine()
    results, single = payload["results"], payload["single_file"]
    lines = [
        f"{now['cpu']}, {payload['cores']} cores shared with other jobs (other builds and test runs at the "
        f"same time), torch {now['torch']}, seq_len {payload['seq_len']}, bundled 8,192-token tokenizer.",
        "",
    ]
    if single:
        lines += [
            f"ONE file (measured {', '.join(sorted({r['date'] for r in single}))}): peak RSS of the child that "
            "builds the token store from a cold cache; tokens/s over the whole build (count + tokenize)",
            "",
            "| file | tokens | documents | prepare s | tokens/s | peak RSS "
            "| whole-file reading (before): s | tokens/s | peak RSS |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in single:
            pr, old = r["prepare"], r.get("prepare-whole")
            if not old:
                old_cells = "not run (needs ~10x the file) | - | -"
            elif "error" in old:
                old_cells = f"refused: {old['error'].split(': ', 1)[-1]} | - | {old['peak_rss_mb']:,.0f} MB"
            else:
                old_cells = (
                    f"{old['seconds']:.1f} | {old['tokens'] / old['seconds']:,.0f} | {old['peak_rss_mb']:,.0f} MB"
                )
            lines.append(
                f"| {r['mb']:,.0f} MB {KIND_LABEL[r['kind']]} | {pr['tokens'] / 1e6:.1f}M "
                f"| {pr['info']['documents']:,} "
                f"| {pr['seconds']:.1f} | {pr['tokens'] / pr['seconds']:,.0f} | {pr['peak_rss_mb']:,.0f} MB "
                f"| {old_cells} |"
            )
        lines.append("")
    if not results:
        return "\n".join(lines)
    measured = payload.get("results_measured")
    lines += [
        f"A folder of files (measured {(measured or now)['date']}):",
        "",
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

"""A small study of the first phase's objective: CLM, MNTP, mixed batches (1:15), prefix LM or MLM (the baseline),
each followed by the same MLM decay, from the bundled model on the shared biomedical corpus, same seed, data order
and budgets. Records the held-out losses of every objective each run measured and the wall time per run.

    python bench/objectives_study.py [--steps 24 --decay 8 --out bench/results/objectives_study]
        [--cka-texts 64 --keep DIR]

Writes ``<out>.json`` and ``<out>.md``. Runs train under a temporary folder (nothing is kept), or ``--keep DIR``.
``--cka-texts N``: the CKA profile of each run's final model against the MLM baseline's, layer by layer (``python -m
backend cka``, debiased CKA, N texts of the corpus, mean-pooled), the command recorded beside the numbers."""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.engine.config import load_config  # noqa: E402
from backend.engine.rundir import read_metrics  # noqa: E402
from backend.runs.train import prepare_runs, train_run  # noqa: E402

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "craft_pmc_oa_text"
FIRST = {  # the first phase of each run: its objective and settings
    "mlm (baseline)": {"objective": "mlm", "mlm_probability": 0.3},
    "clm": {"objective": "clm"},
    "mntp": {"objective": "mntp", "mlm_probability": 0.2},
    "mixed 1:15": {"objective": "mixed", "causal_share": 1 / 16, "mlm_probability": 0.15},
    "prefix 50%": {"objective": "prefix", "prefix_share": 0.5},
}


def run_one(label: str, first: dict, args, root: Path) -> dict:
    phases = [
        {"name": "main", **first, "steps": args.steps, "shape": "warmup_constant", "warmup_steps": 2},
        {"name": "decay", "objective": "mlm", "mlm_probability": 0.15, "steps": args.decay, "shape": "1-sqrt"},
    ]
    name = "s-" + label.split()[0]
    sets = [f"name={name}", "recipe=custom", "model.name=detour-tiny-en", f"data.corpus={CORPUS}",
            "data.heldout_fraction=0.05", f"train.seq_len={args.seq_len}", f"train.batch_size={args.batch}",
            "train.lr=5e-4", "model.attn_implementation=sdpa", "logging.log_every=4", "logging.eval_every=100000",
            f"logging.eval_batches={args.eval_batches}", "logging.checkpoint_every=100000"]  # fmt: skip
    [run] = prepare_runs(load_config({"phases": phases}, sets), root=root)
    t0 = time.time()
    state = train_run(run)["state"]
    wall = time.time() - t0
    assert state == "done", (run / "train.log").read_text()[-3000:]
    evals = [r for r in read_metrics(run) if r["type"] == "eval"]
    losses = lambda r: {k: r[k] for k in r if k.startswith("eval_")}  # noqa: E731
    return {"label": label, "run": run.name, "first": first, "wall_s": round(wall, 1), "start": losses(evals[0]),
            "end_main": losses(evals[-2]), "final": losses(evals[-1])}  # fmt: skip


def cka_texts(path: Path, n: int) -> Path:
    """``n`` paragraphs of the corpus (the last articles, at least 200 characters each), one per line."""
    out = []
    for f in sorted(CORPUS.glob("articles/*.txt"), reverse=True):
        out += [p.strip() for p in f.read_text(encoding="utf-8").split("\n") if len(p.strip()) >= 200]
        if len(out) >= n:
            break
    path.write_text("\n".join(out[:n]) + "\n", encoding="utf-8")
    return path


def cka_profile(run: Path, baseline: Path, texts: Path, n: int) -> dict:
    """Each layer of ``run`` against the same layer of ``baseline`` (the CLI's diagonal), and the command."""
    out = run / "cka_vs_baseline.json"
    cmd = [sys.executable, "-m", "backend", "cka", "--a", str(baseline), "--b", str(run), "--texts", str(texts),
           "--n-texts", str(n), "--max-len", "128", "--out", str(out)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    res = json.loads(out.read_text())
    shown = "python -m backend cka --a <baseline run> --b <run> " + " ".join(cmd[cmd.index("--texts") :])
    return {"diagonal": res["cka_diagonal"], "measure": res.get("measure"), "command": shown}


def markdown(info: dict) -> str:
    """The results as a table: held-out losses at the start, after the first phase and after the MLM decay."""
    objs = ["mlm", "clm", "mntp", "prefix", "mixed"]
    head = "| first phase | wall s | " + " | ".join(f"{o} after main / final" for o in objs) + " |"
    rows = [head, "|" + "---|" * (len(objs) + 2)]
    for r in info["results"]:
        cells = []
        for o in objs:
            a, b = r["end_main"].get(f"eval_{o}_loss"), r["final"].get(f"eval_{o}_loss")
            cells.append("–" if a is None else f"{a:.3f} / {b:.3f}")
        rows.append(f"| {r['label']} | {r['wall_s']:.0f} | " + " | ".join(cells) + " |")
    start = info["results"][0]["start"]
    cka = [r for r in info["results"] if r.get("cka")]
    if cka:
        n = len(cka[0]["cka"]["diagonal"])
        rows += [
            "",
            f"CKA of each final model against the MLM baseline's, layer by layer ({cka[0]['cka']['measure']}; "
            "layer 0: the embeddings; 1.0: the same representation up to rotation and scale):",
            "",
            "| first phase | " + " | ".join(f"L{i}" for i in range(n)) + " |",
            "|" + "---|" * (n + 1),
        ]
        rows += [f"| {r['label']} | " + " | ".join(f"{v:.3f}" for v in r["cka"]["diagonal"]) + " |" for r in cka]
        rows += ["", f"CKA command (per run): `{cka[0]['cka']['command']}`"]
    return "\n".join([
        "# First-phase objective before the same MLM decay (bench/objectives_study.py)", "",
        f"Settings: {info['args']}. Bundled model `detour-tiny-en`, corpus `../shared/data/craft_pmc_oa_text`, "
        "seed 0 for every run (same data order, same decay: MLM 15%, 1-sqrt). Held-out losses in nats: MLM at 15% "
        "with fixed masks and next-token (CLM) in every run, each other objective where the run trains it.", "",
        f"At the start (the bundled model): held-out MLM {start['eval_mlm_loss']:.3f}, "
        f"CLM {start['eval_clm_loss']:.3f}.",
        "", *rows, "", f"CPU: {info['cpu']}; {info.get('load', '')}", ""])  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--decay", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--eval-batches", type=int, default=8)
    ap.add_argument("--out", default="bench/results/objectives_study")
    ap.add_argument("--cka-texts", type=int, default=0, help="CKA profile against the baseline on this many texts")
    ap.add_argument("--keep", help="train the runs under this folder and keep them (default: a temporary one)")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp)
        root.mkdir(parents=True, exist_ok=True)
        for label, first in FIRST.items():
            results.append(run_one(label, first, args, root))
            print(json.dumps(results[-1]), flush=True)
        if args.cka_texts:
            texts, baseline = cka_texts(root / "cka_texts.txt", args.cka_texts), root / results[0]["run"]
            for r in results[1:]:
                r["cka"] = cka_profile(root / r["run"], baseline, texts, args.cka_texts)
                print(json.dumps({r["label"]: r["cka"]["diagonal"]}), flush=True)
    cpu = subprocess.run(["bash", "-c", "lscpu | grep -i 'model name'"], capture_output=True, text=True).stdout
    info = {"args": vars(args), "cpu": cpu.strip(), "python": platform.python_version(),
            "load_before_after": None, "results": results}  # fmt: skip
    Path(f"{args.out}.json").write_text(json.dumps(info, indent=1) + "\n")
    Path(f"{args.out}.md").write_text(markdown(info))
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()

"""``python -m backend cka``: layer x layer similarity between two models or runs (debiased linear CKA by default,
``--measure linear`` for the paper's biased CKA, ``--measure procrustes`` to cross-check), with the shuffled-texts
baseline, a seed-noise control, a trajectory over a run's checkpoints, and per-layer weight change. Writes one JSON
file (``--out``), checked before any model loads.

Examples::

    python -m backend cka --a runs/x-detour --b runs/x-mlm --texts held_out.txt --out cka.json
    python -m backend cka --a runs/x-detour --b runs/x-mlm --control runs/x-mlm runs/x-mlm-seed2 \\
        --texts held_out.txt --seeds 0 1 2 --out cka.json
    python -m backend cka --trajectory runs/x-detour --a runs/x-mlm --texts held_out.txt --out traj.json
    python -m backend cka --a detour-tiny-en --b runs/x-detour --weights-only --out weights.json
    python -m backend cka --a runs/x-detour --b runs/x-mlm --texts held_out.txt --measure linear --out paper.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from backend.analysis.measures import DEFAULT_MEASURE, MEASURES
from backend.core import atomic
from backend.core.errors import DataError, DetourError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--a", metavar="MODEL_OR_RUN", help="model A (rows of the matrix); with --trajectory: the reference")
    p.add_argument("--b", metavar="MODEL_OR_RUN", help="model B (columns of the matrix)")
    p.add_argument("--texts", metavar="FILE", help=".txt (one text per non-empty line) or .jsonl with a 'text' field")
    p.add_argument("--pooling", choices=["mean", "token"], default="mean", help="mean per text (paper) or per token")
    p.add_argument("--max-len", type=int, default=512, help="truncate each text to this many tokens (default 512)")
    p.add_argument("--n-texts", type=int, default=500, help="texts sampled from FILE per seed (default 500)")
    p.add_argument("--batch-size", type=int, default=8, help="texts per forward pass (default 8)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    p.add_argument("--seeds", type=int, nargs="+", metavar="S", help="several sampling seeds: mean and std per layer")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help="model dtype (statistics: float64)")
    p.add_argument(
        "--measure",
        choices=list(MEASURES),
        default=DEFAULT_MEASURE,
        help="debiased linear CKA (default; unbiased at small n), linear (the paper's biased CKA), procrustes",
    )
    p.add_argument("--no-baseline", action="store_true", help="skip the shuffled-texts baseline (it doubles the work)")
    p.add_argument(
        "--control",
        nargs=2,
        metavar=("MLM_SEED_A", "MLM_SEED_B"),
        help="seed-noise control pair: adds 1-CKA(B_l, A_l) and the ratio div(a, b) / div(control)",
    )
    p.add_argument("--trajectory", metavar="RUN_DIR", help="divergence of each checkpoint of RUN_DIR vs --a")
    p.add_argument("--weights-only", action="store_true", help="only the per-layer relative weight change of b vs a")
    p.add_argument("--no-weights", action="store_true", help="skip the weight change added when architectures match")
    p.add_argument("--out", default="cka.json", help="JSON output file (default cka.json)")


def _fmt(x, width: int = 8, digits: int = 4) -> str:
    if x is None:
        return "-".rjust(width)
    return f"{x if abs(x) >= 0.5 * 10**-digits else 0.0:{width}.{digits}f}"  # no "-0.0000"


def check_out(out: Path) -> Path:
    """Refuse an output path that cannot take the JSON file, before any model loads: a folder, a path under a file,
    and (``catalogue.check_out_file``) an existing file that is not a CKA result, a link, a path inside a run."""
    from backend.core.catalogue import check_out_file, first_free, kind_of, run_owning

    if out.is_dir() and not out.is_symlink():  # a folder another artifact owns takes no cka.json: one beside here
        owned = kind_of(out) is not None or run_owning(out) is not None
        alt = first_free(Path.cwd() / "cka.json") if owned else first_free(out / "cka.json")
        raise DataError(f"--out '{out}': is a folder; give a file name, e.g. --out {alt}")
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise DataError(f"--out '{out}': '{parent}' is a file, not a folder")
            break
    check_out_file(out, "cka")
    return out


def _describe(res: dict) -> str:
    """The measure, samples and hidden sizes a result names, in one line."""
    smp, hs = res["samples"], res["hidden_sizes"]
    n = smp["n"] if isinstance(smp["n"], int) else "/".join(map(str, smp["n"]))
    return f"{res['measure_description']}; n = {n} {smp['unit']}; hidden " + " / ".join(str(h) for h in hs.values())


def _print_cka(res: dict) -> None:
    names = res["layers_a"]
    inp = res["inputs"]
    print(
        f"{res['measure']} {inp['models']['a']['spec']} (A) vs {inp['models']['b']['spec']} (B): "
        f"pooling={inp['pooling']}, n={inp['n']} texts ({inp['n_rows'][0]} rows), "
        f"max_len={inp['max_len_effective']}, seeds={inp['seeds']}"
    )
    print(_describe(res))
    base = res.get("baseline")
    if base:
        print(
            f"shuffled baseline (same measure, {base['how']}): mean {_fmt(base['mean']).strip()}, "
            f"range {_fmt(base['min']).strip()} to {_fmt(base['max']).strip()}"
        )
    if res["divergence"] is None:
        print(f"depths differ: {len(res['layers_a'])} x {len(res['layers_b'])} matrix in the JSON")
        return
    wc = res.get("weight_change") or {}
    wl = dict(zip(wc.get("layer_names", []), wc.get("layers", [])))
    wl["embeddings"] = wc.get("embeddings")
    columns = {"sim": lambda i, _: _fmt(res["cka_diagonal"][i]), "1-sim": lambda i, _: _fmt(res["divergence"][i])}
    if base and base.get("diagonal"):
        columns["shuffled"] = lambda i, _: _fmt(base["diagonal"][i])
    if res["control_divergence"] is not None:
        columns["control"] = lambda i, _: _fmt(res["control_divergence"][i])
        columns["ratio"] = lambda i, _: _fmt(res["ratio"][i], 8, 2)
    if wc:
        columns["dW/W"] = lambda _, name: _fmt(wl.get(name))
    print(f"{'layer':<12} " + " ".join(f"{head:>8}" for head in columns))
    for i, name in enumerate(names):
        print(f"{name:<12} " + " ".join(cell(i, name) for cell in columns.values()))


def _print_trajectory(res: dict) -> None:
    names = res["layers"]
    print(f"trajectory of {res['run']} vs {res['inputs']['reference']['spec']} (1 - similarity per layer index)")
    print(_describe(res))
    print(f"{'checkpoint':<16} {'step':>8} " + " ".join(f"{i:>7}" for i in range(len(names))))
    for p in res["points"]:
        step = "-" if p["step"] is None else str(p["step"])
        print(f"{p['name']:<16} {step:>8} " + " ".join(_fmt(d, 7, 4) for d in p["divergence"]))


def _print_weights(res: dict) -> None:
    print(f"relative weight change ||W_b - W_a|| / ||W_a||: {res['models']['a']} -> {res['models']['b']}")
    print(f"{'embeddings':<12} {_fmt(res['embeddings'])}")
    for name, v in zip(res["layer_names"], res["layers"]):
        print(f"{name:<12} {_fmt(v)}")
    for k in ("other", "head", "total"):
        print(f"{k:<12} {_fmt(res[k])}")


def run(args: argparse.Namespace) -> int:
    from backend.analysis import api as analysis

    out = check_out(Path(args.out))
    # how texts are sampled, pooled, encoded and compared: the same for a pair and for a trajectory
    keys = ("pooling", "max_len", "n_texts", "batch_size", "seed", "seeds", "dtype", "measure")
    sampling = {k: getattr(args, k) for k in keys}
    if args.weights_only:
        if not (args.a and args.b):
            raise DataError("--weights-only needs --a and --b")
        res = analysis.weight_change_between(args.a, args.b)
        atomic.write_json(out, res)
        _print_weights(res)
    elif args.trajectory:
        if not (args.a and args.texts):
            raise DataError("--trajectory RUN_DIR needs --a (the reference model) and --texts")
        if args.b or args.control:
            raise DataError("--trajectory compares each checkpoint with --a: --b and --control are not used")
        res = analysis.cka_trajectory(args.trajectory, args.a, args.texts, **sampling, weights=not args.no_weights)
        atomic.write_json(out, res)
        _print_trajectory(res)
    else:
        if not (args.a and args.b and args.texts):
            raise DataError("cka needs --a, --b and --texts (or --weights-only, or --trajectory RUN_DIR --a REF)")
        control = tuple(args.control) if args.control else None
        res = analysis.cka_between(
            args.a, args.b, args.texts, **sampling, control=control, baseline=not args.no_baseline
        )
        if not args.no_weights:
            try:
                res["weight_change"] = analysis.weight_change_between(args.a, args.b)
            except DetourError as exc:
                res["weight_change"] = None
                res["notes"].append(f"no weight change: {exc}")
        atomic.write_json(out, res)
        _print_cka(res)
    for note in res.get("notes", []):
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {out}")
    return 0

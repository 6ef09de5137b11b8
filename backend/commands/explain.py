"""``python -m backend explain masks|surprise|checkpoints``: the app's Detour tab on the command line.

python -m backend explain masks --model detour-tiny-en --seq-len 24        # each layer kind, MLM vs CLM detour
python -m backend explain surprise "The cell divides." --model A --model B  # per-token loss under each objective
python -m backend explain checkpoints runs/x-detour                         # the saved models a scrub walks
"""

from __future__ import annotations

GRID_MAX = 48  # longer sequences print the summary only


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="view", required=True)
    m = sub.add_parser("masks", help="the attention pattern of each layer kind under MLM and under the CLM detour")
    m.add_argument("--model", default=None, help="model spec (default: bundled)")
    m.add_argument("--seq-len", type=int, default=24)
    m.add_argument("--no-measure", action="store_true", help="skip the perturbation check")
    m.add_argument("--json", action="store_true", help="print JSON (the 0/1 matrices included)")
    s = sub.add_parser("surprise", help="per-token loss of a text: next token (causal) and masked (bidirectional)")
    s.add_argument("text")
    s.add_argument("--model", action="append", default=None, help="model spec; repeat for several (default: bundled)")
    s.add_argument("--json", action="store_true")
    c = sub.add_parser("checkpoints", help="a run's saved models in order, with their phase and objective")
    c.add_argument("run", help="run directory")
    c.add_argument("--json", action="store_true")


def run(args) -> int:
    import json

    from backend.core.paths import DEFAULT_MODEL
    from backend.explain import attention_patterns, run_checkpoints, token_surprise

    if args.view == "masks":
        res = attention_patterns(args.model or DEFAULT_MODEL, args.seq_len, measure=not args.no_measure)
        print(json.dumps(res) if args.json else _masks_text(res))
    elif args.view == "surprise":
        res = token_surprise(args.model or [DEFAULT_MODEL], args.text)
        print(json.dumps(res, indent=2) if args.json else _surprise_text(res))
    else:
        res = run_checkpoints(args.run)
        print(json.dumps(res, indent=2) if args.json else _checkpoints_text(res))
    return 0


def _masks_text(res: dict) -> str:
    out = [f"{res['model']} ({res['model_type']}, {res['attn_implementation']}), {res['seq_len']} tokens; "
           "rows = queries, columns = keys, # = may attend"]  # fmt: skip
    for k in res["kinds"]:
        window = f", window {k['window']} (|q-k| <= {k['reach']})" if k["window"] else ""
        out.append(f"\n{k['name']} layers {k['layers']}{window}")
        for objective in (o["name"] for o in res["objectives"]):  # each objective of the registry
            m = k.get(f"{objective}_measured")
            check = (
                "" if m is None else ("; measured: agrees" if m["agrees"] else f"; measured: {m['mismatches']} differ")
            )
            s = k[f"{objective}_summary"]
            keys = str(s["keys_max"]) if s["keys_min"] == s["keys_max"] else f"{s['keys_min']}-{s['keys_max']}"
            out.append(f"  {objective.upper()}: {keys} keys per query, "
                       f"{'reads' if s['sees_future'] else 'never reads'} the right side{check}")  # fmt: skip
            if res["seq_len"] <= GRID_MAX:
                out += ["    " + "".join("#" if v else "." for v in row) for row in k[objective]]
    return "\n".join(out)


def _surprise_text(res: list[dict]) -> str:
    out = []
    for r in res:
        names = [v["objective"] for v in r["views"]]  # each per-token view, named by its objective
        means = ", ".join(f"{v['text']} {_nats(r[v['objective'] + '_mean'])}" for v in r["views"])
        out.append(f"== {r['model']}: {means} (mean nats)")
        out.append(f"  {'token':>20}  " + "  ".join(f"{n.upper():>7}" for n in names))
        for i, (gap, piece) in enumerate(r["pieces"]):
            out.append(f"  {(gap + piece)!r:>20}  " + "  ".join(f"{_nats(r[n][i]):>7}" for n in names))
    return "\n".join(out)


def _nats(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _checkpoints_text(res: dict) -> str:
    out = [f"{res['run']}: {len(res['points'])} saved models"]
    for i, p in enumerate(res["points"]):
        switch = "   <- phase switch" if i in res["switches"] else ""
        out.append(f"  {i:>3}  {p['label']}  ({p['tokens_seen']} tokens){switch}")
    if res["advice"]:
        out.append(f"note: {res['advice']}")
    return "\n".join(out)

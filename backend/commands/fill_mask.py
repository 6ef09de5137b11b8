"""``python -m backend fill-mask "The [MASK] binds the receptor." --model A --model B``."""

from __future__ import annotations


def add_arguments(parser) -> None:
    parser.add_argument("text", help="one sentence with exactly one [MASK] (or <mask>)")
    parser.add_argument(
        "--model", action="append", default=None, help="model spec; repeat for several (default: bundled)"
    )
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument(
        "--trust-remote-code", action="append", default=[], metavar="MODEL", help="allow remote code for this model"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args) -> int:
    import json

    from backend.analysis.fill_mask import fill_mask
    from backend.core.paths import DEFAULT_MODEL

    models = args.model or [DEFAULT_MODEL]
    results = fill_mask(models, args.text, top_k=args.top_k, trust_remote_code=set(args.trust_remote_code))
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for r in results:
        print(f"== {r['model']}  ({r['masked_text']})")
        for p in r["predictions"]:
            print(f"  {p['prob']:7.2%}  {p['label']!r:<16}  {p['sequence']}")
    return 0

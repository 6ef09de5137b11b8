"""``python -m backend tag "TEXT" --model A --model B``: the NER tab on the command line. Each model -- a model
fine-tuned here, or any released token-classification model (a hub id, a cached model, a folder) -- tags the text
with its own label set; the entities are printed with their character spans (``--json``: as data)."""

from __future__ import annotations


def add_arguments(parser) -> None:
    parser.add_argument("text", help="the text to tag (at most 5000 characters)")
    parser.add_argument(
        "--model",
        action="append",
        required=True,
        help="a token-classification model: a fine-tuned model's folder, a hub id, a cached model or a folder; "
        "repeat for several",
    )
    parser.add_argument("--json", action="store_true", help="print JSON: per model its labels and entities")


def run(args) -> int:
    import json

    from backend.core.errors import DataError
    from backend.engine.model_ref import resolve_model
    from backend.evaluation.predict import predict_entities_batch
    from backend.evaluation.tagger import NotATagger, load_tagger

    if not args.text.strip():
        raise DataError("tag: the text is empty")
    if len(args.text) > 5000:
        raise DataError(f"tag: the text has {len(args.text)} characters; at most 5000")
    out = []
    for spec in args.model:
        ref = resolve_model(spec)  # once: the tagger and its spans take the reference
        try:
            labels = load_tagger(ref).labels
        except NotATagger as exc:
            advice = f"fine-tune it first: python -m backend evaluate --task ner --models {spec}"
            raise NotATagger(f"{exc}; {advice}") from None
        pos, entities = 0, []
        for segment, typ in predict_entities_batch(ref, [args.text])[0]:
            if typ is not None:
                entities.append({"text": segment, "type": typ, "start": pos, "end": pos + len(segment)})
            pos += len(segment)
        out.append({"model": ref.spec, "labels": list(labels.labels), "types": list(labels.types),
                    "scheme": labels.scheme, "entities": entities})  # fmt: skip
    if args.json:
        print(json.dumps(out, indent=2, ensure_ascii=False))
        return 0
    for m in out:
        print(f"== {m['model']}  ({m['scheme']}: {', '.join(m['types']) or 'no entity type'})")
        for e in m["entities"]:
            print(f"  {e['start']:>5}-{e['end']:<5} {e['type']:<16} {e['text']}")
        if not m["entities"]:
            print("  (no entity)")
    return 0

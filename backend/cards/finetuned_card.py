"""A kept fine-tuned model's card (``OUT/models/<label>/seed-<s>/README.md``), from what the fine-tune recorded in
``metrics.json`` and ``label_map.json``: the encoder it started from, the task and its labels, the data and its
fingerprint, the settings, dev and test scores, precision, device and time. Written with the model (in the same
atomic rename) and again when its evaluation finishes, then with the mean over all its seeds and that interval."""

from __future__ import annotations

from pathlib import Path

from backend.cards import CARD, LIBRARY, TAG
from backend.cards.card_file import make_card, write_card
from backend.cards.lineage import UNKNOWN, base_of
from backend.cards.results import METRIC_WORDS, TASK_TYPES, dataset_name, is_hub_dataset, section, task_result

PIPELINE_WORDS = {"ner": "named entity recognition (token classification)", "classification": "text classification"}


def _pct(v) -> str:
    return "–" if v is None else f"{100 * v:.2f}"


def build_finetuned_card(metrics: dict, label_map: dict, source: str, summary: dict | None = None):
    """The card of one fine-tuned model. ``source``: its evaluation (``results.eval_id``); ``summary``: that
    evaluation's ``{mean, ci95, n, seeds}`` over this model's seeds, in points, once it has finished."""
    from huggingface_hub import ModelCardData

    task, metric, seed = metrics["task"], metrics["primary_metric"], metrics["seed"]
    base = base_of(metrics.get("spec"))
    data = str(metrics.get("data") or "")
    words = METRIC_WORDS.get(metric, metric)
    test, dev, hp = metrics.get("test") or {}, metrics.get("dev") or {}, metrics.get("hparams") or {}
    own_name = f"Test {words} (points) of this fine-tuned model (fine-tuning seed {seed})"
    value = 100 * (test.get(metric) or 0.0)
    own = task_result(source, task, data, metrics.get("data_fingerprint"), metric, value, None, 1, metric_name=own_name)
    name = f"{metrics.get('model', 'model')}-{dataset_name(data)}-seed{seed}"
    card_data = ModelCardData(
        base_model=base.name,
        library_name=LIBRARY,
        pipeline_tag=TASK_TYPES[task],
        license=base.license,
        language=base.extra.get("language"),
        tags=[TAG, task, dataset_name(data)],
        datasets=[data] if is_hub_dataset(data) else None,
        model_name=name,
        eval_results=[own] if test.get(metric) is not None else None,
        **{k: v for k, v in base.extra.items() if k in ("license_name", "license_link")},
    )
    labels = label_map.get("entity_types") or label_map.get("labels") or metrics.get("labels") or []
    prec = metrics.get("precision") or {}
    scores = ", ".join(f"{METRIC_WORDS.get(k, k)} {_pct(v)}" for k, v in test.items()
                       if k in METRIC_WORDS and isinstance(v, int | float))  # fmt: skip
    licence = base.license if base.license != UNKNOWN else f"unknown: {base.license_why}"
    lines = [
        f"# {name}",
        "",
        f"A {PIPELINE_WORDS[task]} model: the encoder {base.where} with a new head, fine-tuned by Detour Lab "
        f"(`python -m backend evaluate`, fine-tuning seed {seed}) on `{dataset_name(data)}`.",
        "",
        "| | |",
        "|---|---|",
        f"| encoder | {base.where} |",
        f"| labels | {', '.join(map(str, labels)) or '–'} |",
        f"| data | `{dataset_name(data)}`, fingerprint `{metrics.get('data_fingerprint') or '?'}`: "
        f"{metrics.get('n_train', '?')} training, {metrics.get('n_dev', '?')} dev, {metrics.get('n_test', '?')} test "
        "examples |",
        f"| fine-tuning | {metrics.get('epochs_run', '?')} epochs (best {metrics.get('best_epoch', '?')} by dev "
        f"{words}), "
        f"lr {hp.get('lr', '?')}, batch {hp.get('batch_size', '?')}, max length {hp.get('max_len', '?')}, weight decay "
        f"{hp.get('weight_decay', '?')}, warmup {hp.get('warmup_ratio', '?')} |",
        f"| test (points) | {scores or '–'} |",
        f"| dev at the best epoch | {words} {_pct(dev.get(metric))} |",
        f"| precision | {prec.get('resolved', '?')} ({prec.get('why', 'not recorded')}) |",
        f"| device and time | {metrics.get('device', '?')}, {metrics.get('train_time_s', '?')} s |",
        f"| skipped steps | {(metrics.get('skipped_steps') or {}).get('total', 0)} (non-finite loss or gradients) |",
        f"| licence | {licence} |",
        "",
    ]
    if summary:
        ci = summary.get("ci95")
        interval = f"95% t interval [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "no interval (one seed)"
        lines += [
            "## The evaluation it belongs to",
            "",
            f"This model is fine-tuning seed {seed} of {summary['n']} (seeds {', '.join(map(str, summary['seeds']))}) "
            f"in `{source}`: over them the test {words} is {summary['mean']:.2f} points, {interval}. One seed's score "
            "is one draw; the interval is what the seeds can tell.",
            "",
        ]
    lines += [
        *section(card_data.eval_results, "No test score was recorded."),
        "## Use it",
        "",
        "```python",
        "from transformers import pipeline",
        "",
        f'model = pipeline("{TASK_TYPES[task]}", model="path/to/this/folder"'
        + (', aggregation_strategy="simple")' if task == "ner" else ")"),
        "```",
    ]
    return make_card(card_data, "\n".join(lines))


def write_finetuned_card(model_dir: str | Path, metrics: dict, label_map: dict, source: str,
                         summary: dict | None = None) -> Path:  # fmt: skip
    return write_card(Path(model_dir) / CARD, build_finetuned_card(metrics, label_map, source, summary))

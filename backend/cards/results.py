"""The evaluations and suites that measured a model, as the Hub reads them: ``model-index`` results
(``huggingface_hub.EvalResult``), each with its interval, and the card's "Evaluations" section drawn from them.

One result per (evaluation, task, metric): the value is the mean test score in points over the fine-tuning seeds,
``metric_name`` says the seeds and the 95% t interval in words and ``metric_args`` holds them as numbers; a suite adds
its suite score with the leaderboard's interval, rank interval and tie group. ``metric_config`` names the evaluation
(``evaluation:<folder>`` or ``suite:<suite>/<folder>``): an evaluation that finishes again (resumed, more models)
replaces its own results and leaves every other evaluation's in place."""

from __future__ import annotations

from pathlib import Path

TASK_TYPES = {"ner": "token-classification", "classification": "text-classification"}
TASK_NAMES = {"ner": "Named entity recognition", "classification": "Text classification"}
METRIC_WORDS = {"f1": "F1", "macro_f1": "Macro-F1", "micro_f1": "Micro-F1", "accuracy": "Accuracy",
                "token_accuracy": "Token accuracy", "suite_score": "Suite score"}  # fmt: skip


def is_hub_dataset(data: str | None) -> bool:
    """A data spec that names a hub dataset (org/name, not a path on this disk)."""
    d = str(data or "")
    return bool(d) and not Path(d).exists() and not d.startswith(("/", ".", "~")) and d.count("/") == 1


def dataset_name(data: str | None) -> str:
    """What a result calls its data: a hub dataset by its id, a folder by its name (never a full local path)."""
    d = str(data or "")
    return d if is_hub_dataset(d) else (Path(d).name or d or "data")


def eval_id(out_dir: str | Path) -> str:
    """How a card names the evaluation in ``out_dir``: ``evaluation:<folder>``, or a suite's task
    ``suite:<folder>/<task>`` (a suite keeps each task's evaluation in ``tasks/<task>``)."""
    out = Path(out_dir)
    return f"suite:{out.parent.parent.name}/{out.name}" if out.parent.name == "tasks" else f"evaluation:{out.name}"


def _ci_words(ci) -> str:
    return f"95% CI [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "no interval (fewer than two seeds)"


def task_result(
    source: str,
    task: str,
    data: str | None,
    fingerprint: str | None,
    metric: str,
    mean: float,
    ci: list[float] | None,
    seeds: int,
    name: str | None = None,
    metric_name: str | None = None,
):
    """One ``EvalResult``: ``mean`` and ``ci`` in points over ``seeds`` fine-tuning seeds on ``data``'s test
    split, from the evaluation named ``source`` (``metric_name``: other words for it)."""
    from huggingface_hub import EvalResult

    words = METRIC_WORDS.get(metric, metric)
    args = {"seeds": int(seeds)}
    if ci:
        args.update(ci95_low=round(float(ci[0]), 4), ci95_high=round(float(ci[1]), 4))
    return EvalResult(
        task_type=TASK_TYPES[task],
        task_name=TASK_NAMES[task],
        dataset_type=dataset_name(data),
        dataset_name=name or dataset_name(data),
        dataset_split="test",
        dataset_revision=fingerprint,
        metric_type=metric,
        metric_value=round(float(mean), 4),
        metric_name=metric_name
        or f"Test {words} (points), mean of {seeds} fine-tuning seed{'s' * (seeds != 1)}, {_ci_words(ci)}",
        metric_config=source,
        metric_args=args,
    )


def suite_result(source: str, suite: str, tasks: list[dict], entry: dict, n_models: int):
    """The suite score of one model (the leaderboard's ``entry``): its interval, rank interval and tie group."""
    from huggingface_hub import EvalResult

    kinds = sorted({t.get("task") for t in tasks})
    task = kinds[0] if kinds and kinds[0] in TASK_TYPES else "ner"  # a mixed suite: its task name says so
    ranks = entry["rank_interval"]
    rank = f"{ranks[0]}" if ranks[0] == ranks[1] else f"{ranks[0]}-{ranks[1]}"
    args = {"units": int(entry["units"])}
    ranked = ""
    if n_models >= 2:  # one model alone has no rank to tell
        args.update(
            rank_low=int(ranks[0]), rank_high=int(ranks[1]), models=n_models, tie_group="".join(entry["groups"])
        )
        ranked = f"; rank {rank} of {n_models}, tie group {''.join(entry['groups'])}"
    if entry.get("ci95"):
        args.update(ci95_low=round(float(entry["ci95"][0]), 4), ci95_high=round(float(entry["ci95"][1]), 4))
    names = ", ".join(t["name"] for t in tasks)
    return EvalResult(
        task_type=TASK_TYPES.get(task, "token-classification"),
        task_name=f"{suite} suite" + (" (NER and classification)" if len(kinds) > 1 else ""),
        dataset_type=f"suite:{suite}",
        dataset_name=f"{suite} ({len(tasks)} tasks: {names})",
        dataset_split="test",
        metric_type="suite_score",
        metric_value=round(float(entry["score"]), 4),
        metric_name=(
            f"Suite score (mean over tasks of the mean test score, points), {_ci_words(entry.get('ci95'))}{ranked}"
        ),
        metric_config=source,
        metric_args=args,
    )


def merged(old: list | None, source: str, new: list) -> list:
    """``old`` results without those of ``source``, then ``new``: an evaluation replaces its own results only."""
    return [r for r in (old or []) if r.metric_config != source] + list(new)


def section(results: list | None, empty: str) -> list[str]:
    """The card body's "Evaluations" section from its results (``empty``: what to say when there are none)."""
    lines = ["## Evaluations", ""]
    if not results:
        return [*lines, empty, ""]
    lines += [
        "| evaluation | task | data (test split) | metric | value | 95% CI | seeds |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        a = r.metric_args or {}
        ci = f"[{a['ci95_low']:.2f}, {a['ci95_high']:.2f}]" if "ci95_low" in a else "–"
        extra = (
            f"; ranks {a['rank_low']}-{a['rank_high']} of {a['models']}, group {a['tie_group']}"
            if "models" in a
            else ""
        )
        seeds = a.get("seeds", a.get("units", "–"))
        metric = METRIC_WORDS.get(r.metric_type, r.metric_type)
        lines.append(
            f"| `{r.metric_config}` | {r.task_name} | {r.dataset_name} | {metric} | {r.metric_value:.2f} | "
            f"{ci}{extra} | {seeds} |"
        )
    lines += ["", "Scores in points (F1 and accuracy in percent), on each data set's test split; the interval is a "
              "Student t over fine-tuning seeds (a suite score's: over the units its leaderboard used). The same "
              "results are in this card's `model-index`.", ""]  # fmt: skip
    return lines

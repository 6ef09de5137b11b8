"""The evaluation sample of a NER task at a cap: how many test sentences a fine-tune is scored on and how many gold
entities each holds on average, read from the data itself (``power`` turns them into the evaluation sample's share
of the seed-to-seed variance). The subset is the evaluation's own (``datafiles.subsample``: fixed, seed 0)."""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=32)
def _entities_per_sentence(data: str) -> tuple[int, ...] | None:
    """Gold entities in each test sentence of the NER data at ``data`` (read once per process), or None."""
    from pathlib import Path

    from backend.core.errors import DetourError
    from backend.evaluation.datafiles import find_split_files
    from backend.evaluation.iob import NER_EXTENSIONS, load_ner_data, read_iob_file

    try:  # a local folder: its test file alone (the training split is the largest and not needed)
        test = (read_iob_file(find_split_files(data, NER_EXTENSIONS, "NER")["test"], "test") if Path(data).is_dir()
                else load_ner_data(data).test)  # fmt: skip
    except (DetourError, OSError, ValueError):
        return None
    return tuple(sum(1 for tag in tags if tag.startswith("B-")) for tags in test.tags)


def ner_test_sample(data: str, cap: int | None) -> tuple[int, float] | None:
    """(sentences scored, gold entities per sentence) of the test split of the NER data at ``data`` under ``cap``
    (``max_eval_examples``), or None where it cannot be read here (a hub id offline, a missing folder)."""
    from backend.evaluation.datafiles import subsample

    counts = _entities_per_sentence(data)
    if not counts:
        return None
    idx = subsample(len(counts), cap)
    return len(idx), sum(counts[i] for i in idx) / len(idx)


def task_samples(tasks: list[dict]) -> dict[str, tuple[int, float]]:
    """name -> (sentences, entities per sentence) for each NER task (``{name, task, data, max_eval_examples}``)."""
    out = {}
    for t in tasks:
        if t.get("task", "ner") == "ner" and t.get("data"):
            got = ner_test_sample(str(t["data"]), t.get("max_eval_examples"))
            if got:
                out[t["name"]] = got
    return out

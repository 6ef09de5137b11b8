"""Downstream evaluation: NER and text classification fine-tuning across seeds, paired comparisons.

Entry points: ``runner.evaluate_models`` (the loop), ``predict.list_finetuned`` / ``predict.predict_entities``
(the NER demo: any token-classification model, ``tagger``), ``python -m backend evaluate`` and ``tag`` (the CLI).
"""

from __future__ import annotations

TASKS = ("ner", "classification")

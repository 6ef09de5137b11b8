"""Representation analysis: hidden states, streaming linear CKA, weight change, fill-mask, figures.

The entry points (``cka_between``, ``cka_trajectory``, ``weight_change_between``) live in ``api`` and are what
the ``cka`` command, the app's Analyze tab and the replication call.
"""

from backend.analysis.api import cka_between, cka_trajectory, read_texts, texts_sha256, weight_change_between

__all__ = ["cka_between", "cka_trajectory", "read_texts", "texts_sha256", "weight_change_between"]

"""Representation analysis: hidden states, streaming similarity (debiased / linear CKA, Procrustes), weight change,
fill-mask, figures.

The entry points (``cka_between``, ``cka_trajectory``, ``weight_change_between``) live in ``api`` and are what
the ``cka`` command, the app's Analyze tab and the replication call. They load lazily, so that reading the measure
names (``backend.analysis.measures``, for the CLI's argument parser) does not import torch.
"""

__all__ = ["cka_between", "cka_trajectory", "read_texts", "texts_sha256", "weight_change_between"]


def __getattr__(name: str):
    if name in __all__:
        from backend.analysis import api

        return getattr(api, name)
    raise AttributeError(f"module 'backend.analysis' has no attribute {name!r}")

"""The objectives, one module each: every module of this package that defines ``OBJECTIVE`` (an ``Objective``,
``base.py``) is one, found here by walking the package. Nothing else in the project names an objective: the
trainer, the held-out evaluation, the config checks, the timeline and the Detour tab ask this registry.

Adding one: a module here with its ``OBJECTIVE`` and a test of what it promises (docs/objectives.md).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from backend.objectives.base import ATTENTIONS, Batch, Masking, Objective, Setting, next_token_labels
from backend.objectives.masking import IGNORE, mlm_mask, replacement_vocab, special_ids

__all__ = ["ATTENTIONS", "IGNORE", "Batch", "Masking", "Objective", "Setting", "all_objectives", "get", "masking_of",
           "mlm_mask", "names", "next_token_labels", "replacement_vocab", "setting_headings", "setting_names",
           "special_ids"]  # fmt: skip

clm_labels = next_token_labels  # the name older callers (tests, benches) import


@functools.cache
def _registry() -> dict[str, Objective]:
    found: dict[str, Objective] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        obj = getattr(module, "OBJECTIVE", None)
        if isinstance(obj, Objective):
            if obj.name in found:
                raise RuntimeError(f"two objectives named {obj.name!r}: {module.__name__} and another module")
            if obj.attention not in ATTENTIONS:
                raise RuntimeError(f"objective {obj.name!r}: attention {obj.attention!r}, allowed {ATTENTIONS}")
            found[obj.name] = obj
    return dict(sorted(found.items(), key=lambda kv: (kv[1].order, kv[0])))


def all_objectives() -> list[Objective]:
    return list(_registry().values())


def names() -> tuple[str, ...]:
    return tuple(_registry())


def get(name: str) -> Objective:
    try:
        return _registry()[name]
    except KeyError:
        raise KeyError(f"unknown objective {name!r}; known: {', '.join(names())}") from None


def setting_names() -> tuple[str, ...]:
    """Every setting any objective takes (the keys a phase may carry besides budget, LR and freezing)."""
    return tuple(dict.fromkeys(s.name for o in all_objectives() for s in o.settings))


def setting_headings() -> dict[str, str]:
    """Each setting name -> its heading (the first objective declaring it says it): the timeline editor's columns."""
    out: dict[str, str] = {}
    for s in (s for o in all_objectives() for s in o.settings):
        out.setdefault(s.name, s.heading)
    return out


def choices_text() -> str:
    """'mlm (bidirectional), clm (causal), ...': for error messages and help."""
    return ", ".join(f"{o.name} ({o.attention})" for o in all_objectives())


def masking_of(tokenizer) -> Masking:
    """What masking objectives need from ``tokenizer``."""
    return Masking(special_ids(tokenizer), tokenizer.mask_token_id, replacement_vocab(tokenizer))

"""The named recipes, as data: one YAML file per preset in this folder, saying which shape of timeline it is (the
shapes are code, in ``recipe.py``) and which objectives fill it. So the recipe code names no objective, and a preset
that only changes objectives is a new file here, nothing else.

Each file: ``help`` (the words after its name in the recipe's help, '' for none), ``order`` (its place among the
recipes), ``form`` (its place in the Launch form's list; absent: not offered there), ``shape`` and the shape's fields:

* ``detour``: ``objectives`` of ``warmup``, ``main`` and ``decay`` (budgets from the ``phases`` mapping);
* ``split``: ``objectives``, the first for ``<preset>.clm_share`` of the budget and the second for the rest;
* ``schedule``: ``objective``, trained at each of ``<preset>.rates`` in turn;
* ``blocks``: the objectives come from the config (``<preset>.blocks``);
* ``single``: ``objective``, one phase and its decay, its settings from the ``<preset>`` section;
* ``pair``: ``runs`` (role -> preset), ``baseline`` (the objective a listed pair's baseline trains) and ``detour``
  (the objective a listed pair must have: the one its baseline replaces).

And every file declares the config keys the recipe reads: ``budget`` (where its token budget is) and ``settings``
(its other keys); ``with_list``, the keys it reads besides a phase list. The Launch form shows those and no other
recipe's, so no field it shows is ignored (``form_keys``).
"""

from __future__ import annotations

import functools
from pathlib import Path

from backend.core import strict_yaml

HERE = Path(__file__).parent
CUSTOM = "custom"  # a recipe written as a phase list: no file, the list is the recipe
LIST_BUDGET = ("train.total_tokens",)  # a phase list's budget: what its fractions are shares of
SHAPES = ("detour", "split", "schedule", "blocks", "single", "pair")


@functools.cache
def _presets() -> dict[str, dict]:
    found = {}
    for path in sorted(HERE.glob("*.yaml")):
        p = strict_yaml.load(path.read_text(encoding="utf-8"))
        if p.get("shape") not in SHAPES:
            raise RuntimeError(f"preset {path.name}: shape {p.get('shape')!r}, allowed {SHAPES}")
        found[path.stem] = {"name": path.stem, **p}
    return dict(sorted(found.items(), key=lambda kv: kv[1]["order"]))


def get(name: str) -> dict:
    """What preset ``name`` declares (its file here)."""
    return _presets()[name]


def names() -> tuple[str, ...]:
    """Every recipe name, ``custom`` last."""
    return (*_presets(), CUSTOM)


def form_names() -> tuple[str, ...]:
    """The recipes the Launch form offers, in its order, ``custom`` last."""
    offered = sorted((p for p in _presets().values() if p.get("form") is not None), key=lambda p: p["form"])
    return (*(p["name"] for p in offered), CUSTOM)


def help_text(custom: str) -> str:
    """'clm_detour | mlm | pair (both, ...) | ... | custom (<custom>)': the recipe key's help."""
    return " | ".join(f"{p['name']} ({p['help']})" if p["help"] else p["name"] for p in [*_presets().values(),
                      {"name": CUSTOM, "help": custom}])  # fmt: skip


def form_keys(recipe: str, listed: bool = False) -> tuple[str, ...]:
    """The budget and settings keys ``recipe`` reads: its file's ``budget`` and ``settings``; with a phase list
    (``listed``, or ``custom``), ``train.total_tokens`` and its ``with_list``."""
    if listed or recipe == CUSTOM:
        return (*LIST_BUDGET, *(_presets()[recipe].get("with_list", []) if recipe in _presets() else []))
    p = _presets().get(recipe, {})
    return (*p.get("budget", []), *p.get("settings", []))


def recipe_keys() -> tuple[str, ...]:
    """Every key some recipe reads and another does not (the union of the declarations)."""
    keys = dict.fromkeys(LIST_BUDGET)
    for p in _presets().values():
        keys.update(dict.fromkeys([*p.get("budget", []), *p.get("settings", []), *p.get("with_list", [])]))
    return tuple(keys)

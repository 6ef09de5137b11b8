"""A sweep as data: the axes (any config key, a list of values each), the seeds, the cells they make and the
run configs of every (cell, seed); and the two promises a sweep makes, checked before anything is queued.

* Same data order: every run of seed ``s`` trains with ``train.seed = s`` and the data order that follows it, so
  cells differ only where their axis values differ (an axis on the data or the packing says so in the summary).
* Arms: an axis named ``arm`` takes named sets of overrides (``arms``) as its values, for comparisons a Cartesian
  grid cannot write (an MLM run with another seed on the same data order, the detour with a block of layers frozen):
  each arm is one value, every arm meets every value of the other axis and every seed.
* Same compute: the tokens a cell trains (sum of its phases' steps x tokens per step, both runs of a pair) may
  differ between cells only along an axis that *is* the budget, one whose value alone fixes the tokens. A grid in
  which a key changes the tokens of only some cells is refused unless ``allow_unmatched_budget``.
"""

from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass, field

from backend.core.errors import ConfigError
from backend.engine.config import apply_override, load_config, parse_override

# Keys along which the data order or packing itself changes: the summary says so instead of promising one order.
DATA_KEYS = ("data.", "train.data_seed", "train.seq_len", "train.batch_size", "train.grad_accum")


ARM_KEY = "arm"  # the axis of named override sets (planned by a study, never typed on --grid)


@dataclass
class Axis:
    key: str
    values: list

    @property
    def short(self) -> str:
        """The last part of the key, for names and column heads (``phases.main.tokens`` -> ``tokens``)."""
        return self.key.rsplit(".", 1)[-1]


@dataclass
class Cell:
    index: int
    values: dict  # axis key -> value
    label: str  # "clm_share=0.25, tokens=40000"
    slug: str  # plain name part: "c01-clm_share0.25-tokens40000"
    runs: dict = field(default_factory=dict)  # seed -> run name


def parse_axis(item: str) -> Axis:
    """``KEY=V1,V2,...`` -> Axis; each value is read as a YAML scalar (``0.25``, ``mlm``, ``null``, ``"0-3"``)."""
    if "=" not in item:
        raise ConfigError("--grid", item, "expected KEY=V1,V2,..., e.g. phases.main.tokens=40960,81920")
    key, raw = item.split("=", 1)
    if not raw.strip():
        raise ConfigError("--grid", item, "give at least one value after '='")
    if any(not v.strip() for v in raw.split(",")):  # 'a,,b' or 'a,': a value was meant there; never dropped
        raise ConfigError("--grid", item, "an empty value between commas; write each value (null for none)")
    values = [parse_override(f"{key}={v.strip()}")[1] for v in raw.split(",")]
    seen: dict = {}
    for v in values:  # 4096 and 4096.0 are one value: two identical cells
        if (k := _same(v)) in seen:
            raise ConfigError("--grid", item, f"a value appears twice ({seen[k]!r} and {v!r} are the same value)")
        seen[k] = v
    if key.strip() in ("train.seed", "name"):
        raise ConfigError("--grid", item, "seeds come from --seeds and names from the sweep; not a grid axis")
    return Axis(key.strip(), values)


def _same(v) -> tuple:
    """What makes two axis values the same cell: numbers by value (4096 == 4096.0; a bool is not a number here),
    anything else as written."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        return ("number", v)  # 4096 and 4096.0 hash and compare equal
    return ("as written", repr(v))


def _show(v) -> str:
    """A value as a label: a path by its last part (the run a cell starts from), anything else as written."""
    return v.rstrip("/").rsplit("/", 1)[-1] if isinstance(v, str) and "/" in v else str(v)


def _slug(v) -> str:
    shown = _show(v).replace("-s{seed}", "").replace("{seed}", "")
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", shown).strip("_.-")[-24:].strip("_.-") or "x"


def expand_cells(axes: list[Axis]) -> list[Cell]:
    """Every combination of axis values, the first axis varying slowest."""
    cells = []
    for i, combo in enumerate(itertools.product(*(a.values for a in axes))):
        values = {a.key: v for a, v in zip(axes, combo, strict=True)}
        label = ", ".join(f"{a.short}={_show(v)}" for a, v in zip(axes, combo, strict=True))
        slug = "-".join([f"c{i:02d}", *(f"{_slug(a.short)}{_slug(v)}" for a, v in zip(axes, combo, strict=True))])
        cells.append(Cell(i, values, label, slug[:80]))
    return cells


def seed_list(base_seed: int, n: int) -> list[int]:
    if n < 1:
        raise ConfigError("--seeds", n, "at least 1 seed")
    return [int(base_seed) + i for i in range(n)]


def per_seed(value, seed: int):
    """A string value holding ``{seed}`` or ``{seed+N}`` gets the seed's own value (the run a continued-pretraining
    cell starts from; a control arm's data order and seed); a value that is then a whole number becomes one."""
    if not isinstance(value, str) or "{seed" not in value:
        return value
    out = re.sub(r"\{seed(?:\+(\d+))?\}", lambda mt: str(seed + int(mt.group(1) or 0)), value)
    return int(out) if re.fullmatch(r"\d+", out) else out


def run_config(base: dict, cell: Cell, seed: int, sweep_name: str, arms: dict | None = None) -> dict:
    """The validated config of one (cell, seed): the base, the cell's axis values (an ``arm`` value: its named
    overrides from ``arms``), the seed and a unique name. Values may hold ``{seed}`` (``per_seed``); an arm that
    sets ``train.seed`` keeps its own (the seed-noise control: another seed on seed s's data order)."""
    raw = copy.deepcopy(base)
    seed_set = False
    for key, value in cell.values.items():
        if key == ARM_KEY:
            if value not in (arms or {}):
                raise ConfigError("arm", value, f"one of the planned arms: {', '.join(arms or {}) or 'none'}")
            for k, v in arms[value].items():
                apply_override(raw, k, per_seed(v, seed), scope="config")
                seed_set = seed_set or k == "train.seed"
            continue
        apply_override(raw, key, per_seed(value, seed), scope="config")
    if not seed_set:
        raw["train"]["seed"] = int(seed)
    raw["name"] = f"{sweep_name}-{cell.slug}-s{seed}"[:100]
    raw.pop("_meta", None)
    cfg = load_config(raw)
    cfg["_meta"] = {"sweep": sweep_name, "cell": cell.index, "cell_label": cell.label, "seed": int(seed)}
    return cfg


def compute_tokens(cfg: dict) -> int:
    """Tokens of compute one cell trains: every phase of every run the config makes (a pair makes two)."""
    from backend.detour.recipe import build_phases, split_pair, tokens_per_step

    total = 0
    for _, c in split_pair(cfg):
        total += sum(p.steps for p in build_phases(c)) * tokens_per_step(c)
    return total


PACKING_KEYS = ("train.batch_size", "train.seq_len", "train.grad_accum")  # they set the tokens of one step


def steps_budgets(cfg: dict) -> list[str]:
    """The phases of ``cfg`` whose budget is written in optimizer steps (their tokens follow the batch)."""
    ph = cfg["phases"]
    if isinstance(ph, list):
        return [f"phases[{i}].steps" for i, p in enumerate(ph) if p.get("steps") is not None]
    if cfg["recipe"] in ("hybrid", "mask_schedule"):
        return []
    return [f"phases.{n}.steps" for n in ("warmup", "main", "decay") if ph[n].get("steps") is not None]


def check_packing_axes(axes: list[Axis], cfgs: list[dict], allow_unmatched: bool) -> None:
    """A grid over the batch size (or the sequence length, the accumulation) while a phase is budgeted in steps:
    each value trains that phase on other tokens, so the cells are not matched; refused unless allowed."""
    packing = [a.key for a in axes if a.key in PACKING_KEYS]
    stepped = sorted({s for c in cfgs for s in steps_budgets(c)})
    if packing and stepped and not allow_unmatched:
        raise ConfigError(
            "--grid",
            packing[0],
            f"{stepped[0]} is budgeted in steps, so each {packing[0]} trains it on other tokens and the cells would "
            "not train the same compute; give that phase in tokens, or pass --allow-unmatched-budget",
        )


def budget_axes(axes: list[Axis], cells: list[Cell], tokens: dict[int, int]) -> list[str]:
    """Axes that *are* the budget: the tokens change along them and each of their values alone fixes the tokens."""
    out = []
    for a in axes:
        by_value: dict[str, set[int]] = {}
        for c in cells:
            by_value.setdefault(repr(c.values[a.key]), set()).add(tokens[c.index])
        if all(len(s) == 1 for s in by_value.values()) and len({next(iter(s)) for s in by_value.values()}) > 1:
            out.append(a.key)
    return out


def check_matched(axes: list[Axis], cells: list[Cell], tokens: dict[int, int], allow_unmatched: bool) -> dict:
    """Refuse cells that would be compared at different compute: cells that agree on every budget axis must train
    the same tokens. Returns what the summary says (budget axes, data-order axes, matched or not)."""
    b_axes = budget_axes(axes, cells, tokens)
    groups: dict[tuple, dict[int, list[str]]] = {}
    for c in cells:
        k = tuple(repr(c.values[a]) for a in b_axes)
        groups.setdefault(k, {}).setdefault(tokens[c.index], []).append(c.label)
    clashes = [g for g in groups.values() if len(g) > 1]
    if clashes and not allow_unmatched:
        g = clashes[0]
        detail = "; ".join(f"{t:,} tokens: {', '.join(labels[:3])}" for t, labels in sorted(g.items()))
        raise ConfigError(
            "--grid",
            " ".join(a.key for a in axes),
            f"the cells would not train the same compute ({detail}): a grid key changes the budget of only some "
            "cells. Fix the budget in tokens (phases.*.tokens rather than steps), make the budget its own axis, or "
            "pass --allow-unmatched-budget to compare them anyway",
        )
    data_axes = [a.key for a in axes if a.key.startswith(DATA_KEYS)]
    return {
        "matched_budget": not clashes,
        "budget_axes": b_axes,
        "data_order_axes": data_axes,
        "tokens": {c.label: tokens[c.index] for c in cells},
    }


def matched_sentence(info: dict, n_seeds: int) -> str:
    """What the summary promises about data order and compute, in one paragraph."""
    parts = []
    if info["data_order_axes"]:
        parts.append(
            "Data order: seed s gives every cell the same data order except along "
            f"{', '.join(info['data_order_axes'])}, which changes the data or its packing."
        )
    else:
        parts.append(
            f"Data order: for each of the {n_seeds} seed(s), every cell reads the same documents in the same order."
        )
    if info["matched_budget"]:
        if info["budget_axes"]:
            parts.append(
                f"Compute: cells with the same {', '.join(info['budget_axes'])} train the same number of tokens; "
                "compare cells within a budget."
            )
        else:
            tokens = sorted(set(info["tokens"].values()))
            parts.append(f"Compute: every cell trains the same {tokens[0]:,} tokens.")
    else:
        parts.append("Compute: NOT matched (--allow-unmatched-budget): some cells train more tokens than others.")
    return " ".join(parts)

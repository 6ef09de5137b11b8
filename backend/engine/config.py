"""Experiment config: YAML loading, ``--set key=value`` overrides and validation.

Every key, its default and its allowed values are in ``schema.SCHEMA``; this module applies them (and the few
rules that involve several keys). Validation runs before anything heavy (no model or data is loaded here except
to check that a path exists) and every error names the key, the bad value and what is allowed.
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Any

import yaml

import backend.presets as presets
from backend.core import strict_yaml
from backend.core.errors import ConfigError
from backend.core.paths import MAX_NAME_LEN, is_plain_name
from backend.engine import schema
from backend.engine.schema import BY_KEY, SCHEMA
from backend.engine.trackers import parse_report_to

PAIR_SUFFIX = "-detour"  # the longer of the two names a pair adds (recipe.split_pair): '-detour', '-mlm'


def check_run_name(name: str) -> str:
    """Run names become folder names: no '/', no '..', no hidden names."""
    if not is_plain_name(name):
        raise ConfigError(
            "name",
            name,
            f"use 1-{MAX_NAME_LEN} letters, digits, '_', '-' or '.', starting with a letter or digit (no '/' or '..')",
        )
    return name


def default_config() -> dict:
    return schema.defaults()


def with_defaults(saved: dict) -> dict:
    """A run's saved config over today's defaults: keys added since the run was made take their default (which
    keeps the old behaviour: ``train.data_seed`` None follows the seed), and a run made before ``train.compile``
    existed keeps training uncompiled (the default became ``auto``, on with a GPU)."""
    saved = copy.deepcopy(saved)
    if isinstance(saved.get("train"), dict):
        saved["train"].setdefault("compile", False)
    return _merge(default_config(), saved)


def _merge(base: dict, over: dict, prefix: str = "") -> dict:
    for k, v in over.items():
        key = f"{prefix}{k}"
        if k == "_meta":
            base[k] = v
            continue
        if k not in base:
            raise ConfigError(
                key, v, f"unknown key;{did_you_mean(k, base)} allowed here: {', '.join(sorted(base)) or '(none)'}"
            )
        if isinstance(base[k], dict) and isinstance(v, dict) and k != "from_scratch":
            _merge(base[k], v, key + ".")
        else:
            base[k] = v
    return base


def did_you_mean(name: str, known) -> str:
    """' did you mean 'x'?' for a misspelt key (a close match among ``known``), else ''."""
    import difflib

    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=1, cutoff=0.6)
    return f" did you mean '{close[0]}'?" if close else ""


def check_overrides_unique(overrides) -> None:
    """The same key given twice (two ``--set``, or ``--set name=`` with ``--name``): the last one silently won."""
    seen: dict[str, str] = {}
    for item in overrides:
        key = item.split("=", 1)[0].strip()
        if key in seen:
            raise ConfigError(key, [seen[key], item], "given twice on the command line; keep one")
        seen[key] = item


def parse_override(item: str) -> tuple[str, Any]:
    """``train.lr=1e-4`` -> ("train.lr", 0.0001); values are parsed as YAML scalars/lists."""
    if "=" not in item:
        raise ConfigError("--set", item, "expected key=value, e.g. train.lr=1e-4")
    key, raw = item.split("=", 1)
    key = key.strip()
    try:
        value = strict_yaml.load(raw) if raw.strip() else None
    except strict_yaml.YAMLBoundsError as exc:
        raise ConfigError(key, raw[:80], f"refused: {exc}") from exc
    except yaml.YAMLError:
        value = raw
    known = BY_KEY.get(key)
    if known is not None and known.kind in ("str", "path") and value is not None and not isinstance(value, str):
        return key, raw.strip()  # the schema decides: name=007 is the text 007, not the number 7
    if known is not None and known.kind not in ("int", "float"):  # name=1e5 stays the text
        return key, value
    return key, as_number(value)


_NUMBER = re.compile(r"[-+]?(\d[\d_]*(\.[\d_]*)?|\.\d[\d_]*)([eE][-+]?\d+)?")


def as_number(value: Any, integer: bool | None = None) -> Any:
    """A number written as text that YAML 1.1 leaves a string (``1e-4``, ``2.5e6``, ``1_000``): the number it means,
    decided once for a YAML file and ``--set`` alike. Exact: a whole number becomes an int (``1e23`` is 10**23, not
    the float nearest it); ``integer=False`` keeps a float. Anything else is returned unchanged (then refused)."""
    if not isinstance(value, str) or not _NUMBER.fullmatch(text := value.strip()):
        return value
    if integer is None and re.fullmatch(r"[-+]?[\d_]+", text):  # plain digits: YAML made them a string on purpose
        return value
    from decimal import Decimal, InvalidOperation

    try:
        d = Decimal(text.replace("_", ""))
    except InvalidOperation:
        return value
    if integer is not False and d == d.to_integral_value() and abs(d.adjusted()) < 100:
        return int(d)
    return float(d)


def apply_override(cfg: dict, key: str, value: Any, scope: str | None = None) -> None:
    """Set a dotted ``key`` in a nested dict; only existing keys (``scope`` names the dict in errors)."""
    node, in_phase = cfg, False
    parts = key.split(".")
    for i, p in enumerate(parts[:-1]):
        if isinstance(node, list):  # phases written as a list: phases.1.tokens=500
            if not (p.isdigit() and int(p) < len(node) and isinstance(node[int(p)], dict)):
                where = ".".join(parts[:i])
                raise ConfigError(key, value, f"'{where}' is a list: name a phase by its index 0-{len(node) - 1}")
            node, in_phase = node[int(p)], True
            continue
        if not isinstance(node.get(p), dict | list):
            where = f" of the {scope}" if scope else ""
            raise ConfigError(key, value, f"'{'.'.join(parts[: i + 1])}' is not a section{where}")
        node = node[p]
    if isinstance(node, list):
        raise ConfigError(key, value, "a list: set one phase's key by its index, e.g. phases.0.tokens=1000")
    if parts[-1] not in node and not (in_phase and parts[-1] in phase_keys()):
        raise ConfigError(
            key,
            value,
            f"unknown {scope + ' ' if scope else ''}key;{did_you_mean(parts[-1], node)} allowed here: "
            f"{', '.join(sorted(node))}",
        )
    node[parts[-1]] = value


def load_config(path: str | Path | dict | None = None, overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Defaults <- YAML file (or dict) <- ``--set`` overrides, then validated."""
    cfg = default_config()
    if isinstance(path, dict):
        _merge(cfg, copy.deepcopy(path))
    elif path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError("config", str(path), "is a folder; give a YAML file" if p.is_dir() else "no such file")
        try:
            raw = strict_yaml.load(p.read_text(encoding="utf-8"))  # a key written twice is refused, naming lines
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError("config", str(path), f"unreadable ({type(exc).__name__}: {exc})") from exc
        except strict_yaml.YAMLBoundsError as exc:
            raise ConfigError("config", str(path), f"refused before reading: {exc}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError("config", str(path), f"not valid YAML ({' '.join(str(exc).split())})") from exc
        if raw is None:  # an empty file would silently train the defaults
            raise ConfigError("config", str(path), "the file is empty; omit it to use the defaults")
        if not isinstance(raw, dict):
            raise ConfigError("config", str(path), "the top level must be a mapping")
        _merge(cfg, raw)
        _list_is_the_recipe(cfg, raw)
    if isinstance(path, dict):
        _list_is_the_recipe(cfg, path)
    check_overrides_unique(overrides)
    for item in overrides:
        apply_override(cfg, *parse_override(item))
    return validate_config(cfg)


def _list_is_the_recipe(cfg: dict, given: dict) -> None:
    """Phases written as a list with no recipe named: the list is the recipe (not the default ``pair``)."""
    if isinstance(given.get("phases"), list) and "recipe" not in given:
        cfg["recipe"] = "custom"


# --- validation -------------------------------------------------------------------------------


def check_key(k: schema.Key, v):
    """Check one value against its schema entry; returns it normalised (ints as int). Raises ConfigError."""
    if v is None:
        if k.optional:
            return None
        if k.kind not in ("str", "mapping", "trackers"):  # trackers: none = []
            raise ConfigError(k.key, v, "a value is required here")
    if k.kind in ("int", "float"):
        integer = k.kind == "int"
        v = as_number(v, integer)  # '1e-4' from YAML means what --set train.lr=1e-4 means
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ConfigError(k.key, v, f"expected {'an integer' if integer else 'a number'}")
        if isinstance(v, float) and not math.isfinite(v):  # NaN fails every comparison: the range check misses it
            raise ConfigError(k.key, v, f"expected a finite number {k.range_text()}")
        if integer and isinstance(v, float) and not v.is_integer():
            raise ConfigError(k.key, v, "expected an integer")
        if (k.lo is not None and (v < k.lo or (k.lo_open and v == k.lo))) or (
            k.hi is not None and (v > k.hi or (k.hi_open and v == k.hi))
        ):
            raise ConfigError(k.key, v, f"must be {k.range_text()}")
        if integer and isinstance(v, float) and abs(v) > 2**53:  # beyond this a float is not exactly the integer
            raise ConfigError(k.key, v, f"too large to be exact as written: write the integer, {k.range_text()}")
        return int(v) if integer else float(v)
    if k.kind == "str" and isinstance(v, int | float) and not isinstance(v, bool):  # YAML's 'name: 2024' is text
        v = str(v)
    if k.kind == "bool" and not isinstance(v, bool):
        raise ConfigError(k.key, v, "expected true or false")
    if k.kind == "autobool":  # the form's radio sends text: 'true' -> True
        v = {"auto": "auto", "true": True, "false": False}.get(v.lower(), v) if isinstance(v, str) else v
        if v != "auto" and not isinstance(v, bool):
            raise ConfigError(k.key, v, "expected auto, true or false")
    if k.kind == "choice" and v not in k.choices:
        raise ConfigError(k.key, v, f"allowed: {', '.join(k.choices)}")
    if k.kind == "layers":
        parse_layer_range(v, k.key)
    if k.kind == "trackers":
        return parse_report_to(v, k.key)
    if k.kind == "rates":
        if not isinstance(v, list) or not v:
            raise ConfigError(k.key, v, "expected a list of numbers in (0, 1), e.g. [0.3, 0.15, 0.05]")
        v = [as_number(x, False) for x in v]
        for i, x in enumerate(v):
            if isinstance(x, bool) or not isinstance(x, int | float) or not 0 < x < 1:
                raise ConfigError(f"{k.key}[{i}]", x, "expected a number in (0, 1)")
        return [float(x) for x in v]
    if k.kind == "betas" and isinstance(v, list):
        v = [as_number(b, False) for b in v]
    if k.kind == "betas" and not (
        isinstance(v, list) and len(v) == 2 and all(isinstance(b, (int, float)) and 0 <= b < 1 for b in v)
    ):
        raise ConfigError(k.key, v, "expected two numbers in [0, 1), e.g. [0.9, 0.98]")
    if k.kind == "path" and v is not None and not Path(v).exists():
        raise ConfigError(k.key, v, "no such file")
    if k.kind == "mapping" and v is not None:
        if not isinstance(v, dict):
            raise ConfigError(k.key, v, "expected a mapping of architecture keys, e.g. {num_hidden_layers: 4}")
        for sub, x in _non_finite(v, k.key):
            raise ConfigError(sub, x, "expected a finite number")
    return v


def _non_finite(node, key: str):
    """(dotted key, value) of every NaN or infinity inside a nested mapping or list."""
    if isinstance(node, float) and not math.isfinite(node):
        yield key, node
    elif isinstance(node, dict):
        for name, x in node.items():
            yield from _non_finite(x, f"{key}.{name}")
    elif isinstance(node, list):
        for i, x in enumerate(node):
            yield from _non_finite(x, f"{key}[{i}]")


def parse_layer_range(value, key: str, num_layers: int | None = None) -> list[int]:
    """'0-7' -> [0..7]; '8-14' ; '3' ; [0, 1, 2]; None/'' -> []."""
    if value is None or value == "" or value == []:
        return []
    if isinstance(value, int) and not isinstance(value, bool):
        layers = [value]
    elif isinstance(value, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        layers = list(value)
    elif isinstance(value, str) and re.fullmatch(r"\s*\d+\s*(-\s*\d+\s*)?(,\s*\d+\s*(-\s*\d+\s*)?)*", value):
        layers = []
        for part in value.split(","):
            a, _, b = part.partition("-")
            lo, hi = int(a), int(b) if b.strip() else int(a)
            if hi < lo:
                raise ConfigError(key, value, "a range must go low-high, e.g. '0-7'")
            layers.extend(range(lo, hi + 1))
    else:
        raise ConfigError(key, value, "expected a layer range like '0-7', '8-14', '0-3,6' or a list of indices")
    if num_layers is not None:
        bad = [i for i in layers if i < 0 or i >= num_layers]
        if bad:
            raise ConfigError(key, value, f"the model has {num_layers} layers (0-{num_layers - 1}); {bad} outside it")
    return sorted(set(layers))


def validate_config(cfg: dict) -> dict:
    """Check every key against the schema, then the rules that involve several keys. Returns the same dict."""
    listed = isinstance(cfg.get("phases"), list)
    for k in SCHEMA:
        if listed and k.key.startswith("phases."):
            continue  # the list form: checked phase by phase below
        *parents, leaf = k.key.split(".")
        node = cfg
        for i, p in enumerate(parents):
            if not isinstance(node.get(p), dict):  # the key the user wrote: 'phases: 5' is phases, not phases.warmup
                what = "a mapping or a list of phases" if parents[: i + 1] == ["phases"] else "a mapping"
                raise ConfigError(".".join(parents[: i + 1]), node.get(p), f"expected {what}")
            node = node[p]
        node[leaf] = check_key(k, node.get(leaf, k.default))
    check_run_name(cfg["name"])
    if cfg["recipe"] == "pair" and len(cfg["name"]) + len(PAIR_SUFFIX) > MAX_NAME_LEN:
        raise ConfigError(
            "name",
            cfg["name"],
            f"a pair trains '<name>-detour' and '<name>-mlm', and a run name has at most {MAX_NAME_LEN} characters: "
            f"this one has {len(cfg['name'])}, use at most {MAX_NAME_LEN - len(PAIR_SUFFIX)}",
        )
    m, d, t, ph = cfg["model"], cfg["data"], cfg["train"], cfg["phases"]
    if not isinstance(m["name"], str) or not m["name"].strip():
        raise ConfigError("model.name", m["name"], BY_KEY["model.name"].help)
    if m["name"] == "from_scratch":
        if not isinstance(m["from_scratch"], dict) or not m["from_scratch"]:
            raise ConfigError(
                "model.from_scratch",
                m["from_scratch"],
                "with model.name: from_scratch, give an architecture mapping (e.g. num_hidden_layers, hidden_size)",
            )
        if m["tokenizer"] is None:
            raise ConfigError(
                "model.tokenizer", None, "from_scratch needs a tokenizer (a folder, a hub id, or a bundled model name)"
            )
    elif cfg["recipe"] == "pretrain":
        raise ConfigError(
            "recipe", "pretrain", "pretrain trains from scratch: set model.name: from_scratch and model.from_scratch"
        )
    if not isinstance(d["corpus"], str) or not d["corpus"].strip():
        raise ConfigError("data.corpus", d["corpus"], "give " + BY_KEY["data.corpus"].help.replace(" | ", ", "))
    if d["heldout_file"] is None and d["heldout_fraction"] == 0:
        raise ConfigError(
            "data.heldout_fraction", 0, "needs a held-out split: a fraction in (0, 0.5) or data.heldout_file"
        )
    if t["fsdp"] and t["compile"] is True:  # auto resolves to off with FSDP
        raise ConfigError("train.compile", True, "not supported together with train.fsdp here; set one of them false")
    if listed:
        if cfg["recipe"] not in ("custom", "pair"):
            raise ConfigError(
                "recipe",
                cfg["recipe"],
                "phases is written as a list, which is the recipe: use recipe: custom (or leave it out), or pair to "
                "also train its MLM baseline",
            )
        check_phase_list(cfg)
        pair = presets.get(cfg["recipe"]) if cfg["recipe"] != presets.CUSTOM else {}
        if pair and not any(p["objective"] == pair["detour"] for p in cfg["phases"]):
            base, detour = pair["baseline"].upper(), pair["detour"].upper()  # the preset's objectives (its file)
            raise ConfigError(
                "recipe", cfg["recipe"], f"a pair trains the list and its {base} baseline (each {detour} phase made "
                f"{base}), but this list has no {detour} phase: both runs would be the same; add a {detour} phase or "
                "use recipe: custom"
            )  # fmt: skip
    elif cfg["recipe"] == "custom":
        raise ConfigError("phases", ph, "recipe custom needs phases written as a list (see docs/configs.md)")
    elif cfg["recipe"] == "mask_schedule":
        shares = cfg["mask_schedule"]["shares"]
        rates = cfg["mask_schedule"]["rates"]
        if shares is not None and (len(shares) != len(rates) or not math.isclose(sum(shares), 1.0)):
            raise ConfigError(
                "mask_schedule.shares", shares, f"one share per rate ({len(rates)}), adding up to 1 (null = equal)"
            )
    elif cfg["recipe"] == "alternate":
        check_alternate_blocks(cfg["alternate"]["blocks"])
    elif presets.get(cfg["recipe"])["shape"] in ("detour", "pair") and not (
        ph["main"]["tokens"] or ph["main"]["steps"]
    ):
        raise ConfigError(
            "phases.main.tokens", ph["main"]["tokens"], "the main phase needs a budget > 0 (tokens or steps)"
        )
    return cfg


# --- phases written as a list --------------------------------------------------------------------

BASE_PHASE_KEYS = ("name", "objective", "tokens", "steps", "fraction", "shape", "warmup_tokens", "warmup_steps",
                   "final_lr_ratio", "freeze")  # fmt: skip


def phase_keys() -> tuple[str, ...]:
    """What a phase may carry: budget, LR and freezing, and the settings of every objective (each declares its own)."""
    import backend.objectives as objectives  # the registry (below the config: declarations, torch only)

    return (*BASE_PHASE_KEYS[:5], *objectives.setting_names(), *BASE_PHASE_KEYS[5:])


BUDGETS = ("tokens", "steps", "fraction")
FREEZE_KEYS = ("layers", "embeddings", "head")


def check_phase_list(cfg: dict) -> None:
    """Every phase of a list is complete and means one thing; the budgets add up to ``train.total_tokens``.

    Errors name the phase by its index, e.g. ``phases[1].mlm_probability``. Phases are normalised in place (numbers
    as int/float); defaults (shape ``constant``, ``final_lr_ratio`` 0.1, no freezing, the objective's own settings)
    are left to the recipe."""
    import backend.objectives as objectives

    phases, t = cfg["phases"], cfg["train"]
    keys = phase_keys()
    if not phases:
        raise ConfigError("phases", phases, "an empty list: give at least one phase")
    tps = t["batch_size"] * t["grad_accum"] * t["seq_len"]
    names: set[str] = set()
    spent, fractions = 0.0, []
    for i, p in enumerate(phases):
        key = f"phases[{i}]"
        if not isinstance(p, dict):
            raise ConfigError(key, p, f"expected a mapping with objective ({' | '.join(objectives.names())}) and "
                              "tokens, steps or fraction")  # fmt: skip
        if unknown := [k for k in p if k not in keys]:
            raise ConfigError(f"{key}.{unknown[0]}", p[unknown[0]], f"unknown key; allowed: {', '.join(keys)}")
        if p.get("objective") not in objectives.names():
            raise ConfigError(f"{key}.objective", p.get("objective"), f"allowed: {objectives.choices_text()}")
        budgets = [b for b in BUDGETS if p.get(b) is not None]
        if not budgets:
            raise ConfigError(key, p, "an empty phase: give it tokens, steps or fraction (of train.total_tokens)")
        if len(budgets) > 1:
            raise ConfigError(f"{key}.{budgets[1]}", p[budgets[1]], f"{key} has {budgets[0]} already: give one budget")
        b = budgets[0]
        hi = (1, False) if b == "fraction" else (None, False)
        p[b] = _number(p[b], f"{key}.{b}", integer=b != "fraction", lo=0, lo_open=True, hi=hi[0])
        if b == "fraction":
            fractions.append((key, p[b]))
        else:
            spent += p[b] * (tps if b == "steps" else 1)
        _check_objective_settings(p, key, objectives.get(p["objective"]), objectives.setting_names())
        shape = p.get("shape", "constant")
        if shape not in schema.LR_SHAPES:
            raise ConfigError(f"{key}.shape", shape, f"allowed: {', '.join(schema.LR_SHAPES)}")
        warm = [w for w in ("warmup_tokens", "warmup_steps") if p.get(w) is not None]
        if warm and shape != "warmup_constant":
            raise ConfigError(f"{key}.{warm[0]}", p[warm[0]], "an LR warm-up belongs to shape: warmup_constant")
        if len(warm) > 1:
            raise ConfigError(f"{key}.warmup_steps", p["warmup_steps"], "give warmup_tokens or warmup_steps")
        for w in warm:
            p[w] = _number(p[w], f"{key}.{w}", integer=True, lo=0)
        _check_phase_warmup(p, key, shape, warm, tps, t["total_tokens"])
        if p.get("final_lr_ratio") is not None:
            if shape not in schema.DECAY_SHAPES:
                raise ConfigError(f"{key}.final_lr_ratio", p["final_lr_ratio"], "only a 1-sqrt or linear shape ends")
            p["final_lr_ratio"] = _number(p["final_lr_ratio"], f"{key}.final_lr_ratio", lo=0, hi=1)
        _check_freeze(p.get("freeze"), f"{key}.freeze")
        name = p.get("name")
        if name is not None and (not isinstance(name, str) or not is_plain_name(name)):
            raise ConfigError(f"{key}.name", name, "letters, digits, '_', '-' or '.' (it names checkpoints)")
        name = name or default_phase_name(i, p["objective"])
        if name in names:
            raise ConfigError(f"{key}.name", name, "another phase has this name; names tag each phase's checkpoint")
        names.add(name)
    total = t["total_tokens"]
    if fractions and total is None:
        raise ConfigError(f"{fractions[0][0]}.fraction", fractions[0][1], "a fraction of train.total_tokens: set it")
    if total is not None:
        planned = spent + sum(f for _, f in fractions) * total
        if not math.isclose(planned, total, rel_tol=1e-9):
            raise ConfigError(
                "train.total_tokens",
                total,
                f"the phases add up to {planned:,.0f} tokens ({len(phases)} phases: tokens, steps x {tps} tokens per "
                "step, fractions of this total); make them add up to it or leave train.total_tokens out",
            )


def _check_phase_warmup(p: dict, key: str, shape: str, warm: list[str], tps: int, total: int | None) -> None:
    """Refused rather than silently changed: ``warmup_constant`` with no warm-up (it would train constant) and a
    warm-up longer than its phase (it would be cut to the phase), compared in optimizer steps as the trainer does."""
    if shape == "warmup_constant" and not any(p[w] for w in warm):
        raise ConfigError(
            f"{key}.shape", shape, "a warm-up shape needs warmup_tokens or warmup_steps > 0; or use shape: constant"
        )
    if not warm or not p[warm[0]]:
        return
    if p.get("steps") is not None:
        steps = p["steps"]
    elif p.get("tokens") is not None:
        steps = math.ceil(p["tokens"] / tps)
    elif total is not None:
        steps = math.ceil(round(p["fraction"] * total) / tps)
    else:
        return  # a fraction without train.total_tokens: refused below, naming it
    w = warm[0]
    warm_steps = p[w] if w == "warmup_steps" else math.ceil(p[w] / tps)
    if warm_steps > steps:
        raise ConfigError(
            f"{key}.{w}", p[w], f"the warm-up ({warm_steps} steps of {tps} tokens) is longer than its phase "
            f"({steps} steps); shorten it to at most the phase"
        )  # fmt: skip


def check_alternate_blocks(text) -> None:
    """``alternate.blocks``: 'objective:weight' items, comma-separated, each a known objective and a weight > 0."""
    import backend.objectives as objectives

    key = "alternate.blocks"
    items = [x.strip() for x in text.split(",")] if isinstance(text, str) else []
    if not items or not all(items):
        raise ConfigError(key, text, "objective:weight blocks separated by commas, e.g. 'clm:4, mlm:16, clm:4'")
    for item in items:
        name, colon, weight = (x.strip() for x in item.partition(":"))
        if name not in objectives.names():
            allowed = objectives.choices_text()
            raise ConfigError(key, text, f"block '{item}': {name!r} is no objective; allowed: {allowed}")
        try:
            ok = colon and math.isfinite(float(weight)) and float(weight) > 0
        except ValueError:
            ok = False
        if not ok:
            raise ConfigError(key, text, f"block '{item}': give its weight after a colon, a number > 0 (e.g. {name}:4)")
        if any(s.default is None and s.name != "mlm_probability" for s in objectives.get(name).settings):
            raise ConfigError(key, text, f"block '{item}': objective {name} needs settings a block cannot give; "
                                         "write the phases as a list")  # fmt: skip


def _check_objective_settings(p: dict, key: str, spec, every: tuple[str, ...]) -> None:
    """The phase's objective declares its settings (``backend/objectives/``): each is a number in its range,
    one without a default must be given, and another objective's setting is refused."""
    own = {s.name: s for s in spec.settings}
    for name in every:
        if name not in own and p.get(name) is not None:
            takes = f"its settings: {', '.join(own)}" if own else "it takes no settings"
            why = f"objective {spec.name} ({spec.title}) has no {name}: leave it out ({takes})"
            raise ConfigError(f"{key}.{name}", p[name], why)
    for s in own.values():
        value = p.get(s.name)
        if value is None:
            if s.default is None:
                why = f"objective {spec.name} ({spec.title}) needs {s.help}, in {s.range_text()}"
                raise ConfigError(f"{key}.{s.name}", None, why)
            continue
        p[s.name] = _number(value, f"{key}.{s.name}", lo=s.lo, lo_open=s.lo_open, hi=s.hi, hi_open=s.hi_open)


def default_phase_name(index: int, objective: str) -> str:
    """An unnamed phase of a list: ``p1-clm``, ``p2-mlm``..."""
    return f"p{index + 1}-{objective}"


def _check_freeze(fr, key: str) -> None:
    if fr is None:
        return
    if not isinstance(fr, dict):
        raise ConfigError(key, fr, "expected a mapping: {layers: '0-7', embeddings: false, head: false}")
    if unknown := [k for k in fr if k not in FREEZE_KEYS]:
        raise ConfigError(f"{key}.{unknown[0]}", fr[unknown[0]], f"unknown key; allowed: {', '.join(FREEZE_KEYS)}")
    parse_layer_range(fr.get("layers"), f"{key}.layers")
    for b in ("embeddings", "head"):
        if not isinstance(fr.get(b, False), bool):
            raise ConfigError(f"{key}.{b}", fr[b], "expected true or false")


def _number(v, key: str, integer: bool = False, **bounds):
    """``v`` checked like a schema number (kind, finite, range), for keys inside a phase list."""
    return check_key(schema.Key(key, None, "int" if integer else "float", "", **bounds), v)


def config_to_yaml(cfg: dict, annotated: bool = False) -> str:
    """The config as YAML; ``annotated`` adds each key's help as a comment (``validate --print``)."""
    if annotated:
        return schema.annotated_yaml(cfg)
    return yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True)

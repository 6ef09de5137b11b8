"""The Launch form <-> the experiment config: the fields (from the config schema), the values a config shows as,
the config a form's values make, which field an error belongs to, and the settings of a loaded config the form does
not show."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field

import yaml

import backend.presets as presets
from app import check_corpus_spec, check_model_spec, md_escape
from backend.core.errors import ConfigError, DetourError
from backend.core.paths import runs_dir
from backend.engine import schema
from backend.engine.config import default_config, load_config


@dataclass
class Field:
    key: str  # config key (dotted), or the pseudo key "seeds"
    label: str
    kind: str  # text | sci | int | optint | float | check | radio | multi | model | corpus | layers
    choices: list[str] = field(default_factory=list)
    info: str | None = None
    advanced: bool = False


def _field(k: schema.Key) -> Field:
    """A form field from the config schema: label, widget, choices and help all come from there."""
    if k.widget:
        kind = k.widget
    elif k.kind == "int":
        kind = "optint" if k.optional else "int"
    else:
        kind = {"str": "text", "float": "float", "bool": "check", "autobool": "radio", "choice": "radio",
                "layers": "layers", "trackers": "multi", "rates": "rates"}[k.kind]  # fmt: skip
    return Field(k.key, k.label, kind, list(k.form_choices or k.choices), _form_help(k), k.advanced)


def _form_help(k: schema.Key) -> str:
    """The key's help, limited to the choices the form offers (``recipe`` offers no ``pretrain``: that one needs a
    from-scratch architecture, a CLI config), in the form's order."""
    if not k.form_choices:
        return k.help
    parts = {p.split(" ", 1)[0]: p for p in k.help.split(" | ")}
    return " | ".join(parts.get(c, c) for c in k.form_choices)


SEEDS_FIELD = Field("seeds", "Seeds", "text", info="one run per seed: '0' or '0,1,2'")
SEEDS_FORM = 20  # the form place of the seeds field (not a config key: one run is made per seed)
FIELDS: list[Field] = [_field(k) for k in schema.form_keys() if k.form < SEEDS_FORM]
FIELDS += [SEEDS_FIELD] + [_field(k) for k in schema.form_keys() if k.form > SEEDS_FORM]
KEYS = [f.key for f in FIELDS]
FIELD_BY_KEY = {f.key: f for f in FIELDS}


def _get(cfg: dict, key: str):
    node = cfg
    for p in key.split("."):
        node = node[p]
    return node


def _set(cfg: dict, key: str, value) -> None:
    parts = key.split(".")
    node = cfg
    for p in parts[:-1]:
        node = node[p]
    node[parts[-1]] = value


def unread_keys(recipe: str | None, listed: bool) -> set[str]:
    """The recipe keys ``recipe`` does not read (another recipe's budget and settings; with a phase list, the phase
    fields): hidden in the form and never applied from it. Each preset declares what it reads
    (``backend.presets.form_keys``)."""
    if recipe not in presets.names():
        return set()  # an unknown recipe: the config check names it
    return set(presets.recipe_keys()) - set(presets.form_keys(recipe, listed))


RECIPE_KEYS = set(presets.recipe_keys())
RECIPE_GROUP = "recipe"  # the form's group of the recipe keys


def recipe_title(recipe: str | None, listed: bool) -> str:
    """The recipe group's heading: which recipe the fields under it are the budget and settings of."""
    if listed or recipe == presets.CUSTOM:
        extra = " (and its baseline's masking rate)" if recipe != presets.CUSTOM else ""
        return f"**Recipe `{recipe}` with a timeline list**: its total{extra}; the phases are the list's"
    return f"**Recipe `{recipe}`: its budget and settings**"


def recipe_fields(recipe: str | None, loaded: dict | None) -> dict[str, bool]:
    """Which recipe fields the form shows for ``recipe`` and the loaded config's state (a phase list or not): key ->
    shown. The Launch form and the timeline editor follow it."""
    hide = unread_keys(recipe, listed(loaded))
    return {f.key: f.key not in hide for f in FIELDS if f.key in RECIPE_KEYS}


def listed(loaded: dict | None) -> bool:
    """The loaded-config state holds a timeline list (the editor's, or a loaded config's)."""
    return bool(loaded) and isinstance(loaded.get("phases"), list)


def config_to_values(cfg: dict, seeds: str | None = None) -> list:
    """Config -> one value per FIELDS entry (what the form shows)."""
    out = []
    for f in FIELDS:
        if f.key == "seeds":
            out.append(seeds if seeds is not None else str(cfg["train"]["seed"]))
            continue
        listed = f.key.startswith("phases.") and isinstance(cfg["phases"], list)  # the timeline editor shows a list
        v = _get(default_config() if listed else cfg, f.key)
        if f.kind in ("text", "sci", "layers", "optint", "rates"):
            v = "" if v is None else (",".join(map(str, v)) if isinstance(v, list) else str(v))
        elif f.kind == "radio" and isinstance(v, bool):  # auto | true | false: the radio shows text
            v = str(v).lower()
        out.append(v)
    return out


def default_values() -> list:
    cfg = default_config()
    cfg["name"] = free_name(cfg["name"])
    return config_to_values(cfg)


def proposed_name(name: str | None) -> str:
    """The name the form proposes when a page opens: the one it shows, or the next free one when runs took it."""
    name = (name or "").strip() or default_config()["name"]
    try:
        return free_name(name)
    except (DetourError, OSError):  # a name that is no folder name: the form's check says why
        return name


def free_name(name: str) -> str:
    from backend.engine.rundir import suggest_name

    root = runs_dir()
    if (root / name).exists() or (root / f"{name}-detour").exists():
        return suggest_name(name, root)
    return name


def _scalar(key: str, raw):
    """Text typed in a box -> a YAML scalar (``2e-4`` -> 0.0002), as ``--set`` does."""
    from backend.engine.config import parse_override

    return parse_override(f"{key}={raw}")[1]


def parse_seeds(raw) -> list[int]:
    text = str(raw if raw is not None else "").strip()
    if not text:
        return []
    if not re.fullmatch(r"\d+(\s*[, ]\s*\d+)*", text):
        raise ConfigError("seeds", raw, "expected whole numbers separated by commas, e.g. '0' or '0,1,2'")
    seeds = [int(s) for s in re.split(r"[,\s]+", text)]
    if len(set(seeds)) != len(seeds):
        raise ConfigError("seeds", raw, "each seed once")
    if len(seeds) > 8:
        raise ConfigError("seeds", raw, "at most 8 seeds per launch")
    return seeds


def values_to_config(values: list, base: dict | None = None) -> tuple[dict, list[int]]:
    """Form values over ``base`` (a loaded config: the keys the form does not show come from it; else the defaults)
    -> (validated config, seeds). Raises ConfigError / PathNotAllowed naming the field."""
    cfg = copy.deepcopy(base) if base else default_config()
    seeds: list[int] = []
    unread = unread_keys(values[KEYS.index("recipe")], isinstance(cfg["phases"], list))
    for f, v in zip(FIELDS, values, strict=True):
        if f.key == "seeds":
            seeds = parse_seeds(v)
            continue
        if f.key in unread:
            continue  # a field the recipe does not read is hidden, and never applied
        if f.kind == "sci":  # a number typed as text: 2e-4
            v = _scalar(f.key, v) if str(v or "").strip() else None
        elif f.kind == "text":  # an optional key left blank is null, as in the YAML: not '', a second "unset"
            v = (v or "").strip() or (None if schema.BY_KEY[f.key].optional else "")  # (seeds: read above)
        elif f.kind == "layers":
            v = (v or "").strip() or None
        elif f.kind == "rates":  # '0.3, 0.15, 0.05' -> a list (the config checks each rate)
            v = [_scalar(f.key, x) for x in re.split(r"[,\s]+", str(v or "").strip()) if x] or None
        elif f.kind in ("int", "optint"):
            if v is None or (isinstance(v, str) and not v.strip()):
                v = None
            else:
                v = _scalar(f.key, v) if isinstance(v, str) else v
                if isinstance(v, float) and v.is_integer():
                    v = int(v)
        elif f.kind == "float" and isinstance(v, str):
            v = _scalar(f.key, v) if v.strip() else None
        elif f.kind == "multi":
            v = list(v or [])
        elif f.kind == "model":
            v = check_model_spec(v or "", "model.name")
        elif f.kind == "corpus":
            v = check_corpus_spec(v or "", "data.corpus")
        _set(cfg, f.key, v)
    if seeds:
        cfg["train"]["seed"] = seeds[0]
    cfg = load_config(cfg)
    return cfg, seeds


def error_key(exc: Exception) -> str | None:
    """Which form field an error belongs to."""
    key = getattr(exc, "key", None)
    if key:
        if key in FIELD_BY_KEY:
            return key
        for k in KEYS:  # phases.main.freeze -> its layers field, train.betas -> none
            if key.startswith(k) or k.startswith(key + "."):
                return k
        return None
    msg = str(exc)
    if msg.startswith("data.corpus") or "corpus" in msg.split(":")[0]:
        return "data.corpus"
    if msg.startswith(("model '", "model:")):
        return "model.name"
    return None


def kept_note(cfg: dict) -> str:
    kept = hidden_settings(cfg)
    if not kept:
        return ""
    shown = ", ".join(_setting_text(k, cfg["phases"] if k == "phases" else v) for k, v in kept.items())
    return f" (with {len(kept)} setting(s) of the loaded config the form does not show: {shown})"


def _setting_text(key: str, value) -> str:
    """A kept setting as the status line shows it: a phase list as the timeline it is, a value as YAML writes it
    (never a Python dict or list)."""
    if key == "phases" and isinstance(value, list):
        names = " → ".join(f"{p.get('name') or p.get('objective', '?')}" for p in value if isinstance(p, dict))
        return f"a timeline of {len(value)} phases ({md_escape(names)}: see the Timeline accordion)"
    if isinstance(value, str):  # flattened already (a list shows as YAML would write it)
        return f"`{key}={value}`"
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()
    return f"`{key}={text}`"


def hidden_settings(cfg: dict) -> dict:
    """The keys of ``cfg`` that differ from the defaults and have no field in the form."""
    from backend.engine.trackers import flatten

    default = flatten(default_config())
    return {k: v for k, v in flatten(cfg).items() if k not in FIELD_BY_KEY and default.get(k) != v}

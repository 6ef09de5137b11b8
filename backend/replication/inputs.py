"""What a study reads before it plans anything: its corpus and base model resolved (a clear error when one is
missing), the base's lower and middle thirds (the freeze interventions) and its CKA settings checked.

The bottom of ``backend.replication``: both studies read it and it imports none of their modules.
"""

from __future__ import annotations

import math
from pathlib import Path

from backend.core.errors import ConfigError, DetourError
from backend.core.paths import BUNDLED_MODELS_DIR, DEFAULT_MODEL, DEMO_CORPUS, DEMO_NER_DIR, shared_data


class ReplicationError(DetourError):
    pass


def layer_thirds(n_layers: int) -> tuple[list[int], list[int]]:
    """Lower and middle thirds of ``n_layers`` blocks: 0-1 / 2-3 for 6, 0-7 / 8-14 for 22 (the paper's split)."""
    if n_layers < 3:
        raise ReplicationError(f"the model has {n_layers} layer(s); the freeze interventions need at least 3")
    a, b = math.ceil(n_layers / 3), math.ceil(2 * n_layers / 3)
    return list(range(0, a)), list(range(a, b))


def layer_range(layers: list[int]) -> str:
    return f"{layers[0]}-{layers[-1]}" if len(layers) > 1 else str(layers[0])


def resolve_data(spec: str, what: str, flag: str) -> Path:
    """``shared:NAME`` (a ``../shared/data`` set), ``demo`` (the bundled demo corpus / NER set) or a path."""
    if spec.startswith("shared:"):
        name = spec.split(":", 1)[1]
        p = shared_data(name)
        if p is None:
            raise ReplicationError(f"{what}: ../shared/data/{name} is absent; pass {flag} PATH")
        return p.resolve()
    if spec == "demo":
        return (DEMO_CORPUS if what == "corpus" else DEMO_NER_DIR).resolve()
    p = Path(spec).expanduser()
    if not p.exists():
        raise ReplicationError(f"{what}: '{spec}' does not exist (pass {flag} PATH)")
    return p.resolve()


def resolve_base(spec: str) -> tuple[str, int]:
    """(model spec the run configs use, number of transformer blocks); a clear error when it is not there."""
    from backend.engine.models import load_config, resolve_model

    if spec == DEFAULT_MODEL and not (BUNDLED_MODELS_DIR / spec / "config.json").exists():
        raise ReplicationError(
            f"model: the bundled base '{DEFAULT_MODEL}' is not installed yet ({BUNDLED_MODELS_DIR / spec}); build it "
            "with `python -m backend build-assets`, or pass --model PATH (a model folder or a run directory)"
        )
    src = resolve_model(spec)
    n = int(load_config(src).num_hidden_layers)
    return (spec if src.kind in ("bundled", "hub") else src.path), n


def check_cka(c: dict) -> None:
    """A CKA measure and text count, refused at planning rather than after the runs have trained."""
    from backend.analysis.cka_guard import check_n_texts
    from backend.analysis.measures import MEASURES

    c.setdefault("measure", "debiased")
    if c["measure"] not in MEASURES:
        raise ConfigError("cka.measure", c["measure"], f"use one of {', '.join(MEASURES)} (linear: the paper's CKA)")
    check_n_texts(c.get("n_texts"), c["measure"], "mean", what="cka.n_texts")


STEP_IN_DECAY = "one optimizer step in the decay phase, which trains decay_fraction of the budget"


def check_budgets(budgets, least: int, flag: str = "--budgets", why: str = STEP_IN_DECAY) -> list[int]:
    """Sorted distinct whole token counts, each at least ``least`` (one optimizer step in the shortest phase) and
    at most the config's bound on a token count; ``flag`` is what the user typed them with."""
    from backend.engine.schema import MAX_INT

    if not isinstance(budgets, list | tuple) or not budgets:
        raise ConfigError(flag, budgets, "a list of token counts, e.g. [16384, 32768]")
    out = []
    for b in budgets:
        v = _number(b)
        if v is None or not math.isfinite(v) or v != int(v) or not least <= v <= MAX_INT:
            raise ConfigError(flag, b, f"whole token counts from {least:,} ({why}) to {MAX_INT:,}")
        out.append(int(v))
    if len(set(out)) != len(out):
        raise ConfigError(flag, budgets, "each budget once")
    return sorted(out)


def _number(b) -> int | float | None:
    """A token count as typed (an int kept exact, a float, or a string of either), or None."""
    if isinstance(b, bool):
        return None
    if isinstance(b, int | float):
        return b
    if isinstance(b, str):
        text = b.strip().replace("_", "")
        try:
            return int(text)  # exact: 9007199254740993 is not read as the float ...992
        except ValueError:
            pass
        try:
            return float(text)
        except ValueError:
            return None
    return None


def parse_budgets(text: list[str]) -> list[int]:
    """``['1e6', '1e7']`` or ``['1e6,1e7']`` -> ints; a clear error for anything else."""
    from backend.engine.schema import MAX_INT

    out = []
    for part in ",".join(text).split(","):
        part = part.strip().replace("_", "")
        if not part:
            continue
        v = _number(part)
        if v is None:
            raise ConfigError("--budgets", part, "token counts such as 1e6 10000000 (or 1e6,1e7)")
        if not math.isfinite(v) or v != int(v) or not 0 < v <= MAX_INT:  # nan, inf and 1e400 were tracebacks
            raise ConfigError("--budgets", part, f"whole positive token counts, at most {MAX_INT:,}")
        out.append(int(v))
    if not out:
        raise ConfigError("--budgets", text, "at least one token count")
    return out

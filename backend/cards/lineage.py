"""What a model derives from, as its card says it: the base model by the name the Hub (or this lab) knows it by, and
the licence that the base's own card gives, else "unknown" said plainly. Read from local files only: a bundled
model's card, a run's ``final/README.md``, a folder's README.md, a hub model's cached snapshot; never the network."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from backend.cards import CARD
from backend.cards.card_file import read_card
from backend.core.catalogue import run_owning
from backend.core.errors import DetourError

UNKNOWN = "unknown"  # the Hub's own licence identifier for a licence that is not known


@dataclass
class Base:
    """``name``: what ``base_model`` says (a hub id, the bundled model's name, a run's name, a folder's name; None
    for a model trained from scratch). ``where``: the same in words, for the body. ``license`` and ``license_why``:
    the base card's licence, or ``unknown`` and why. ``extra``: license_name / license_link / language it gives."""

    name: str | None
    kind: str
    where: str
    license: str = UNKNOWN
    license_why: str = ""
    extra: dict = field(default_factory=dict)


def base_of(spec: str | None) -> Base:
    """The base of a model started from ``spec`` (a run's ``model.name``, an evaluation's model), resolved by the
    one resolver (``engine.model_ref``); a base that no longer resolves is named as written, licence unknown."""
    from backend.engine.model_ref import resolve_model

    spec = str(spec or "").strip()
    if not spec or spec == "from_scratch":
        return Base(None, "scratch", "trained from scratch (random initialisation)", UNKNOWN,
                    "trained from scratch: no base model whose licence it inherits")  # fmt: skip
    try:
        ref = resolve_model(spec)
    except (DetourError, OSError) as exc:
        return Base(spec, "missing", f"`{spec}` (not found on this machine now)", UNKNOWN,
                    f"the base model cannot be read here ({' '.join(str(exc).split())[:160]})")  # fmt: skip
    card_dir: Path | None = Path(ref.folder) if ref.local else None
    if ref.kind == "hub":
        name, where = ref.spec, f"[{ref.spec}](https://huggingface.co/{ref.spec}) (Hugging Face Hub)"
    elif ref.kind == "bundled":
        name, where = ref.spec, f"`{ref.spec}` (the model bundled with Detour Lab)"
    elif (run := run_owning(ref.path)) is not None and ref.kind != "checkpoint":  # a run, by name or by path
        name = ref.spec if ref.run else run.name  # SWEEP/RUN stays as typed
        where = f"the Detour Lab run `{name}` (its `{Path(ref.path).relative_to(run)}/` model)"
    elif ref.kind == "checkpoint":  # a checkpoint has no card of its own
        ck = Path(ref.path).parent
        name = f"{run.name}/{ck.relative_to(run)}" if (run := run_owning(ck)) else ck.name
        where, card_dir = f"the checkpoint `{name}`", None
    else:
        name, where = Path(ref.path).name, f"the local model folder `{ref.path}`"
    root = card_dir.parent.parent if ref.kind == "hub" and card_dir is not None else card_dir  # the model's cache
    return _with_licence(Base(name, ref.kind, where), card_dir, root)


def _with_licence(base: Base, card_dir: Path | None, root: Path | None) -> Base:
    card = read_card(card_dir / CARD, root) if card_dir is not None else None
    if card is None:
        base.license_why = f"the base model ({base.name}) has no model card here, so its licence is not known"
        return base
    data = card.data
    lic = data.get("license")
    if isinstance(lic, list):
        lic = lic[0] if len(lic) == 1 else None
    if lic and str(lic).strip().lower() != UNKNOWN:
        base.license = str(lic).strip()
        base.license_why = f"inherited from the card of {base.name}"
        base.extra = {k: data.get(k) for k in ("license_name", "license_link") if data.get(k)}
    else:
        base.license_why = f"the card of the base model {base.name} names no licence"
    if data.get("language"):
        base.extra["language"] = data.get("language")
    return base

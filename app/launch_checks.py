"""The Launch form's checks: what launching would refuse, found as the form is typed (a name taken, the model's
checks, the corpus read in the background), and the preview of a valid form."""

from __future__ import annotations

from pathlib import Path

from app import md_escape, warn
from app.launch_form import error_key, kept_note, values_to_config
from app.launch_preview import preview
from backend.core.errors import DataError, DetourError
from backend.core.paths import runs_dir
from backend.runs import jobs


def preflight(cfg: dict) -> list[str]:
    """Model-level checks that need no data and no network (model resolves, freeze ranges fit the model, seq_len fits
    its positions). Returns preflight's warnings (e.g. a rotary model beyond the length it was trained on)."""
    from backend.engine.models import resolve_model
    from backend.runs.preflight import check

    if cfg["model"]["name"] != "from_scratch" and resolve_model(cfg["model"]["name"]).kind == "hub":
        return []  # checked at launch: no network while typing
    return list(check(cfg, check_data=False).get("warnings", []))


_CORPUS_CHECKS: dict[tuple, str | None] = {}  # corpus_key -> the problem found (None: fine)
CHECKING_CORPUS = "checking corpus…"


def corpus_key(cfg: dict) -> tuple | None:
    """What the corpus check depends on: the local corpus (its files' sizes and times) and the settings that read
    it. None for what is not checked as you choose it: the bundled demo text and hub datasets (read at launch)."""
    d = cfg["data"]
    p = Path(str(d["corpus"]))
    if d["corpus"] == "demo" or not p.exists():
        return None
    files = sorted(q for q in p.rglob("*") if q.is_file())[:1000] if p.is_dir() else [p]
    sig = tuple((str(q), q.stat().st_size, q.stat().st_mtime_ns) for q in files)
    m, t = cfg["model"], cfg["train"]
    return (str(p), sig, d["text_column"], d["max_documents"], d["heldout_file"], d["heldout_fraction"],
            t["seq_len"], t["batch_size"], m["tokenizer"] or m["name"])  # fmt: skip


def check_corpus(cfg: dict) -> str | None:
    """Read the corpus as a launch would (``preflight.check_corpus``): the problem as a message, or None. Kept per
    ``corpus_key``: the form's next checks look it up instead of reading the corpus again."""
    from backend.runs.preflight import check_corpus as read_corpus

    key = corpus_key(cfg)
    if key is None:
        return None
    if key not in _CORPUS_CHECKS:
        try:
            read_corpus(cfg)
            _CORPUS_CHECKS[key] = None
        except (DetourError, OSError, ValueError) as exc:  # the tokenizer's own problems are Launch's to report
            _CORPUS_CHECKS[key] = str(exc) if str(exc).startswith("data.") else None
    return _CORPUS_CHECKS[key]


def corpus_pending(cfg: dict | None) -> bool:
    """True when the corpus of ``cfg`` still has to be read (``check_corpus``)."""
    key = corpus_key(cfg) if cfg else None
    return key is not None and key not in _CORPUS_CHECKS


def validate_form(values: list, deep: bool = True, base: dict | None = None, corpus: str = "cached") -> dict:
    """-> {"ok", "cfg", "seeds", "yaml", "python", "accelerate", "errors": {key: message}, "message",
    "corpus_pending"}.

    ``deep``: also what launching would refuse (a run name already taken, model-level checks, the corpus's
    content). ``corpus``: "cached" uses a check already made (a corpus not read yet is ``corpus_pending`` and the
    message says "checking corpus…": the form reads it in the background), "check" reads it now (Launch).
    ``base``: the loaded config whose keys the form does not show (``values_to_config``)."""
    out = {
        "ok": False,
        "cfg": None,
        "seeds": [],
        "yaml": "",
        "python": "",
        "accelerate": "",
        "errors": {},
        "message": "",
        "corpus_pending": False,
    }
    warnings: list[str] = []
    try:
        cfg, seeds = values_to_config(values, base)
        if deep:
            jobs.check_names_free(cfg, runs_dir(), seeds or None)  # the check Launch would make, as you type
            warnings = preflight(cfg)
            if corpus == "check" or not corpus_pending(cfg):
                problem = check_corpus(cfg)
                if problem:
                    raise DataError(problem)
            else:
                out["corpus_pending"] = True
    except (DetourError, ValueError) as exc:
        key = error_key(exc)
        msg = str(exc)
        out["errors"] = {key: msg} if key else {}
        out["message"] = warn(msg)
        return out
    out.update(
        ok=True,
        cfg=cfg,
        seeds=seeds,
        **preview(cfg, seeds),
        message="✓ config valid"
        + (f" · {CHECKING_CORPUS}" if out["corpus_pending"] else "")
        + kept_note(cfg)
        + _estimate_note(cfg)
        + "".join(f"\n\n⚠ warning: {md_escape(w)}" for w in warnings),
    )
    return out


def _estimate_note(cfg: dict) -> str:
    """' · ~12m00s at this machine's last measured rate (...)' (the doctor's ETA before launch), or nothing."""
    from backend.runs.doctor import estimate_for_config

    try:
        est = estimate_for_config(cfg)
    except Exception:  # an estimate never stands in the way of a valid config
        return ""
    return f" · {est}" if est else ""

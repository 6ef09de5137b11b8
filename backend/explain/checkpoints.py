"""A run's models in training order, each with the step, tokens, phase and objective it had reached: the points the
Detour tab's scrub slider walks through, from the starting model over every kept checkpoint to ``final/``."""

from __future__ import annotations

from pathlib import Path

from backend.core.errors import DetourError, ModelSpecError
from backend.engine.models import resolve_model
from backend.engine.rundir import read_config, read_metrics, read_status, saved_models
from backend.explain.surprise import MAX_TOKENS, token_surprise, views

FEW = 4  # fewer saved points than this and the scrub says how to get more
SCRUB_POINTS = 10  # what the advice aims at


def _objectives(rows: list[dict]) -> dict[str, str]:
    """phase name -> objective, from the run's own ``phase`` rows (what the trainer really ran)."""
    return {r["phase"]: r.get("objective") for r in rows if r.get("type") == "phase" and r.get("phase")}


def _start(cfg: dict) -> dict | None:
    """The model the run started from, when it is on disk."""
    spec = cfg["model"]["name"]
    try:
        src = resolve_model(spec)
    except ModelSpecError:
        return None
    if not src.local:  # not on disk: scrubbing would fetch it
        return None
    return {"label": f"start: {spec}", "model": src.folder, "step": 0, "tokens_seen": 0, "phase": None,
            "objective": None, "tag": "start"}  # fmt: skip


def run_checkpoints(run_dir: str | Path) -> dict:
    """``{"run", "points": [{"label", "model", "step", "tokens_seen", "phase", "objective", "tag"}], "switches": [i],
    "advice"}``. ``switches`` are the indices of the first point of each new phase (in a detour run, the switch from
    CLM to the MLM decay); ``advice`` says how to save more points when the run kept few (else None)."""
    run = Path(run_dir)
    if not (run / "config.yaml").exists():
        raise DetourError(f"checkpoints: '{run_dir}' is not a run directory (no config.yaml)")
    cfg, rows, status = read_config(run), read_metrics(run), read_status(run)
    objectives = _objectives(rows)
    points = [{"label": f"step {ck['step']}", "model": ck["path"], "step": ck["step"], "tokens_seen": ck["tokens_seen"],
               "phase": ck["phase"], "objective": objectives.get(ck["phase"]), "tag": ck["tag"]}
              for ck in saved_models(run)]  # fmt: skip
    if (run / "final" / "config.json").exists():
        step = status.get("step")
        if points and points[-1]["step"] == step:  # the last phase-end checkpoint holds the same weights
            points[-1]["final"] = True
        else:
            phase = status.get("phase")
            points.append({"label": "final", "model": str(run / "final"), "step": step,
                           "tokens_seen": status.get("tokens_seen"), "phase": phase,
                           "objective": objectives.get(phase), "tag": "final"})  # fmt: skip
    start = _start(cfg)
    if start:
        points.insert(0, start)
    for p in points:
        if p["tag"] and p["tag"] not in ("start", "final"):
            p["label"] += f" ({p['tag']})"
        if p.pop("final", False):
            p["label"] += " = final"
        if p["objective"]:
            p["label"] += f" · {p['phase']}: {p['objective'].upper()}"
    known = [(i, p["phase"]) for i, p in enumerate(points) if p["phase"]]
    switches = [i for (i, ph), (_, prev) in zip(known[1:], known, strict=False) if ph != prev]
    return {"run": str(run), "points": points, "switches": switches, "advice": _advice(cfg, status, points)}


def _advice(cfg: dict, status: dict, points: list[dict]) -> str | None:
    saved = [p for p in points if p["tag"] != "start"]
    if len(saved) >= FEW:
        return None
    log = cfg["logging"]
    total = status.get("total_steps") or max((p["step"] or 0 for p in saved), default=0)
    every = max(1, int(total) // SCRUB_POINTS) if total else 1
    return (
        f"this run kept {len(saved)} saved model(s) (logging.checkpoint_every = {log['checkpoint_every']}, "
        f"logging.keep_checkpoints = {log['keep_checkpoints']}): to scrub through more of it, train with "
        f"Checkpoint every = {every} and Keep checkpoints = {SCRUB_POINTS * 2} (the Launch form's Advanced "
        f"fields), or --set logging.checkpoint_every={every} --set logging.keep_checkpoints={SCRUB_POINTS * 2}"
    )


def surprise_through_run(run_dir: str | Path, text: str, max_tokens: int = MAX_TOKENS) -> dict:
    """``run_checkpoints`` with the mean surprise of ``text`` under each per-token view (``<objective>_mean``, the
    views in ``views``) at every point: the phase switch seen on one text."""
    res = {**run_checkpoints(run_dir), "views": views()}
    for p in res["points"]:
        s = token_surprise([p["model"]], text, max_tokens)[0]
        p.update({f"{v['objective']}_mean": s[f"{v['objective']}_mean"] for v in s["views"]})
    return res

"""Launch: a valid form queued on this machine (``backend.runs.jobs.submit``) or handed to Slurm."""

from __future__ import annotations

from app import warn
from app.launch_checks import validate_form
from app.launch_form import error_key
from app.launch_preview import keep_last_preview
from backend.core.errors import DetourError
from backend.core.paths import runs_dir
from backend.runs import jobs

TARGETS = {"This machine (queue)": "queue", "Slurm cluster (sbatch)": "slurm"}


def launch(
    values: list,
    max_concurrent: int | None = None,
    base: dict | None = None,
    last: dict | None = None,
    target: str = "queue",
) -> dict:
    """Validate, then queue through ``backend.runs.jobs.submit`` (prepare_runs + detached worker), or with target
    ``slurm`` hand each run to Slurm (``backend.sweeps.cluster.submit_config``, what ``train --executor slurm``
    calls; the form's Slurm fields are its settings). Refused, it keeps ``last`` (the last valid preview) marked
    stale, as a field's change does (``keep_last_preview``)."""
    res = validate_form(values, base=base, corpus="check")
    if not res["ok"]:
        return {**keep_last_preview(res, last), "runs": []}
    target = TARGETS.get(target, target)
    try:
        if target == "slurm":
            from backend.sweeps.cluster import submit_config

            done = submit_config(res["cfg"], root=runs_dir(), seeds=res["seeds"] or None)
            dirs = [d for d, _ in done]
            names = ", ".join(f"{d.name} (Slurm job {j})" for d, j in done)
        else:
            dirs = jobs.submit(res["cfg"], root=runs_dir(), seeds=res["seeds"] or None, max_concurrent=max_concurrent)
            names = ", ".join(d.name for d in dirs)
    except (DetourError, OSError) as exc:  # a read-only or full runs folder too: one line (warn), not a raw error
        key = error_key(exc)
        return {**res, "ok": False, "runs": [], "errors": {key: str(exc)} if key else {}, "message": warn(exc)}
    return {**res, "runs": dirs, "message": f"✓ queued {names}: follow it in the Runs tab"}

"""The Launch form's preview: the config's YAML, the exact ``python -m backend train`` command and its ``accelerate
launch`` form; an invalid form keeps the last valid preview, marked stale."""

from __future__ import annotations

from backend.engine.config import config_to_yaml
from backend.runs import jobs


def preview(cfg: dict, seeds: list[int]) -> dict:
    """``{"yaml", "python", "accelerate"}`` of a valid config (several seeds: the commands say so)."""
    prev = jobs.command_preview(cfg)
    seed_note = f"  # x seeds {','.join(map(str, seeds))}" if len(seeds) > 1 else ""
    return {"yaml": config_to_yaml(cfg), "python": prev["python"] + seed_note,
            "accelerate": prev["accelerate"] + seed_note}  # fmt: skip


STALE = "# ⚠ stale until the ⚠ field is fixed\n"
PREVIEW = ("yaml", "python", "accelerate")


def keep_last_preview(res: dict, last: dict | None) -> dict:
    """An invalid form keeps the last valid preview, marked stale, instead of emptying the CLI, accelerate and YAML
    boxes; a valid one is its own preview."""
    if res["ok"] or not last or not last.get("yaml"):
        return res
    return {**res, **{k: STALE + last[k] for k in PREVIEW}}

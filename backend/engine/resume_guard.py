"""A resume continues the run that trained, or it is refused: the config and the data must be what trained.

Before this, a ``config.yaml`` edited before ``--resume`` (``seq_len``, ``batch_size``) trained to ``done`` on a
different data stream and ``data_info.json`` was overwritten with the new corpus facts. The first start records the
training-relevant config in ``_meta.trained_config`` (flattened ``key: value``); a resume compares the config with it
and names every key that changed. Keys a resume may change are those that only say where and how often the run
reports (they change no weight): ``RESUMABLE``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from backend.core.errors import ConfigError, DataError
from backend.engine.rundir import list_checkpoints, suggest_name

RESUMABLE = (
    "name",
    "logging.log_every",
    "logging.eval_every",
    "logging.checkpoint_every",
    "logging.keep_checkpoints",
    "logging.report_to",
    "model.attn_implementation",  # the same mathematics, another kernel (a resume may land on another machine)
    "train.compile",
    *(f"slurm.{k}" for k in ("partition", "time_min", "cpus_per_task", "gpus_per_task", "account", "sbatch",
                             "signal_delay_s")),  # where a job trains, not what
)  # fmt: skip
CACHE_KEYS = ("cache_path", "cache_bytes", "cache_hit", "prepare_seconds")  # where the token store is, not what


def training_keys(cfg: dict) -> dict[str, Any]:
    """The flattened config without ``_meta`` and the ``RESUMABLE`` keys: what decides the weights."""
    out: dict[str, Any] = {}

    def walk(node: dict, prefix: str) -> None:
        for k, v in node.items():
            key = f"{prefix}{k}"
            if k == "_meta" or key in RESUMABLE:
                continue
            if isinstance(v, dict) and key != "model.from_scratch":
                walk(v, key + ".")
            else:
                out[key] = copy.deepcopy(v)

    walk(cfg, "")
    return out


def record(meta: dict, cfg: dict, run_dir: Path) -> None:
    """Keep ``cfg``'s training keys in ``meta`` while the run has no checkpoint (what its first step trains on)."""
    if not list_checkpoints(run_dir):
        meta["trained_config"] = training_keys(cfg)


def fixed_config(cfg: dict) -> tuple[dict, str]:
    """(training keys, their sha256) of a config as it is queued: what the run must train when it starts. JSON-normal
    (as status.json holds it), so a value read back compares equal."""
    import hashlib
    import json

    keys = json.loads(json.dumps(training_keys(cfg), sort_keys=True, default=str))
    return keys, hashlib.sha256(json.dumps(keys, sort_keys=True).encode()).hexdigest()


def check_queued(run_dir: Path, cfg: dict, status: dict) -> None:
    """Refuse a run whose config.yaml changed between queueing and its start, naming the keys: a queued sweep cell
    edited meanwhile trained the edit (tokens 25,600 -> 5,120, seed 7) while its report promised the plan. Runs
    queued before the record (no ``queued_config_sha256``) pass."""
    from backend.engine.config import validate_config

    queued, sha = status.get("queued_config"), status.get("queued_config_sha256")
    if not isinstance(queued, dict) or not sha:
        return
    try:
        now, now_sha = fixed_config(validate_config(copy.deepcopy(cfg)))
    except ConfigError:
        return  # an invalid config: train_run reports it (and marks the run failed)
    if now_sha == sha:
        return
    changed = _changed(queued, now) or ["(unknown)"]
    _refuse(run_dir, queued, now, changed, "was queued", "a queued run trains what was planned")


def check_config(run_dir: Path, cfg: dict) -> None:
    """Refuse a resume whose config changed since the run trained (names the keys). ``cfg`` is the validated
    config; runs from before the record (no ``trained_config``) and runs without a checkpoint pass."""
    from backend.engine.config import validate_config

    try:
        cfg = validate_config(copy.deepcopy(cfg))
    except ConfigError:
        return  # an invalid config: train_run reports it (and marks the run failed)
    trained = (cfg.get("_meta") or {}).get("trained_config")
    if not isinstance(trained, dict) or not list_checkpoints(run_dir):
        return
    now = training_keys(cfg)
    changed = _changed(trained, now)
    if changed:
        _refuse(run_dir, trained, now, changed, "trained", "a resume continues the same run")


def _changed(before: dict, now: dict) -> list[str]:
    return sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))


def _refuse(run_dir: Path, before: dict, now: dict, changed: list[str], since: str, rule: str) -> None:
    """The one refusal of an edited config: each changed key with its old and new value, and how to go on."""
    what = ", ".join(f"{k} {before.get(k)!r} -> {now.get(k)!r}" for k in changed)
    path = run_dir / "config.yaml"
    raise ConfigError(
        "config",
        str(path),
        f"changed since the run {since} ({what}); {rule}: restore {'it' if len(changed) == 1 else 'them'}, or train "
        f"the edited config as a new run: python -m backend train {path} --name "
        f"{suggest_name(run_dir.name, run_dir.parent)}",
    )


def data_info(run_dir: Path, info: dict, resume: bool) -> dict:
    """What ``data_info.json`` should hold: ``info`` for a fresh start; on a resume the facts recorded when the run
    started (never overwritten; only the token store's location is refreshed), or a DataError when the corpus
    now reads differently (other documents, sequences or fingerprint: not the data stream that trained)."""
    import json

    path = run_dir / "data_info.json"
    if not (resume and path.exists() and list_checkpoints(run_dir)):
        return info
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return info  # unreadable: nothing to compare with (the config check still held)
    if not isinstance(old, dict):
        return info
    changed = sorted(k for k in old if k not in CACHE_KEYS and k in info and old[k] != info[k])
    if changed:
        what = ", ".join(f"{k} {old[k]!r} -> {info[k]!r}" for k in changed)
        raise DataError(
            f"data.corpus: the corpus changed since the run trained ({what}; see {path}); a resume must read the "
            "same data: restore the corpus, or train a new run"
        )
    return {**info, **{k: v for k, v in old.items() if k not in CACHE_KEYS}}

"""Experiment trackers (``logging.report_to``): the lab notebook a researcher already uses, through Accelerate's own
tracker classes (``Accelerator(log_with=...)``, ``init_trackers``, ``log``), never hand-written writers.

What goes where (``tracker_paths`` returns it; ``docs/reference/run-directory.md`` documents it):

* TensorBoard: event files under ``<run>/trackers/tensorboard/detour-lab/`` (Accelerate's TensorBoard tracker puts
  the hyper-parameters in a timestamped folder beside them): ``tensorboard --logdir runs/``.
* trackio: its local SQLite store, one database per project, in ``<runs root>/.trackio/`` (trackio's own
  ``TRACKIO_DIR`` wins when set): ``TRACKIO_DIR=runs/.trackio trackio show --project detour-lab``. One store for
  every run, so its dashboard overlays the two runs of a pair. Nothing leaves the machine.
* W&B and MLflow (optional extras, ``pip install wandb`` / ``pip install mlflow``): wherever their own settings
  say (``WANDB_MODE=offline``, ``MLFLOW_TRACKING_URI``; MLflow's default is ``./mlruns``).

Every tracker gets the same scalars, named so a dashboard groups them (``train/``, ``eval/``, ``phase/``), at
step = optimizer step; the run config, flattened, is logged as hyper-parameters.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import sys
from pathlib import Path

from backend.core.errors import ConfigError

TRACKERS = {  # name (Accelerate's) -> (module that must import, pip package that provides it)
    "tensorboard": ("tensorboard", "tensorboard"),
    "trackio": ("trackio", "trackio"),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow"),
}
PROJECT = "detour-lab"  # the project (trackio, W&B) / experiment (MLflow) every run joins; a pair is a group
PHASE_INDEX = {"warmup": 0, "main": 1, "decay": 2}  # phase/index: the same number for a phase in every recipe
TRACKIO_STORE = ".trackio"
KEY = "logging.report_to"


def parse_report_to(value, key: str = KEY) -> list[str]:
    """A YAML list, a comma string (form, ``--set logging.report_to=tensorboard,trackio``) or none -> names.

    Each name once, in the order given; an unknown one is a ConfigError that lists the allowed names."""
    if value is None or value == "" or value == "none":
        return []
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(x, str) for x in items):
        raise ConfigError(key, value, f"give a list of tracker names from: {', '.join(TRACKERS)} (or none)")
    names = list(dict.fromkeys(x.strip().lower() for x in items if x.strip()))
    unknown = [n for n in names if n not in TRACKERS]
    if unknown:
        raise ConfigError(key, value, f"unknown tracker {', '.join(unknown)}; allowed: {', '.join(TRACKERS)}")
    return names


def check_installed(names: list[str], key: str = KEY) -> None:
    """Every tracker's package imports here, else a ConfigError naming the pip package (a preflight check: Accelerate
    itself would only drop a missing tracker with a debug line and train without it)."""
    missing = [n for n in names if importlib.util.find_spec(TRACKERS[n][0]) is None]
    if missing:
        pips = " ".join(TRACKERS[n][1] for n in missing)
        raise ConfigError(key, names, f"{', '.join(missing)} is not installed here: pip install {pips}")


def checked_report_to(value, key: str = KEY) -> list[str]:
    """``parse_report_to`` then ``check_installed``: what a command takes from its user."""
    names = parse_report_to(value, key)
    check_installed(names, key)
    return names


def logging_dir(out_dir: str | Path) -> Path:
    """Where local trackers write for a run directory (or an evaluation folder)."""
    return Path(out_dir) / "trackers" / "tensorboard"


def accelerator_args(report_to: list[str] | None, out_dir: str | Path) -> dict:
    """The keyword arguments of ``precision.make_accelerator`` that turn ``report_to`` on for ``out_dir``."""
    if not report_to:
        return {}
    check_installed(report_to)
    return {"log_with": list(report_to), "logging_dir": logging_dir(out_dir)}


def flatten(cfg: dict, prefix: str = "") -> dict:
    """The nested config as ``{"train.lr": 0.0002, ...}`` with values every tracker's hyper-parameters accept
    (TensorBoard's take numbers, strings and booleans only): lists as their YAML text, None as "null"."""
    out: dict = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        elif v is None:
            out[key] = "null"
        elif isinstance(v, bool | int | float | str):
            out[key] = v
        else:
            out[key] = str(list(v)) if isinstance(v, list | tuple) else str(v)
    return out


def tracker_paths(accelerator, out_dir: str | Path, store_root: str | Path) -> dict:
    """``{tracker name: where its data is}`` for the trackers this accelerator logs to."""
    names = [str(t) for t in accelerator.log_with]
    paths = {}
    for n in names:
        if n == "tensorboard":
            paths[n] = str(logging_dir(out_dir) / PROJECT)
        elif n == "trackio":
            paths[n] = str(_trackio_dir(store_root))
        else:
            paths[n] = f"{n}'s own settings (project {PROJECT})"
    return paths


def _trackio_dir(store_root: str | Path) -> Path:
    if "trackio" in sys.modules:  # trackio reads its folder once, when first imported
        return Path(sys.modules["trackio.utils"].TRACKIO_DIR)
    return Path(os.environ.get("TRACKIO_DIR") or Path(store_root) / TRACKIO_STORE)


@contextlib.contextmanager
def _trackio_home(store_root: str | Path):
    """trackio fixes its store folder when it is imported: point it at ``<store_root>/.trackio`` for that import
    (unless the user set ``TRACKIO_DIR``), and leave the environment as it was."""
    if "trackio" in sys.modules or os.environ.get("TRACKIO_DIR"):
        yield
        return
    os.environ["TRACKIO_DIR"] = str(Path(store_root) / TRACKIO_STORE)
    try:
        import trackio  # noqa: F401 - the import that reads TRACKIO_DIR

        yield
    finally:
        del os.environ["TRACKIO_DIR"]


def start(
    accelerator,
    run_name: str,
    config: dict,
    out_dir: str | Path,
    store_root: str | Path,
    group: str | None = None,
    resume: bool = False,
) -> dict:
    """Start every tracker of ``accelerator`` for ``run_name`` with ``config`` as hyper-parameters.

    Returns ``tracker_paths`` ({} when there is none). Trackers are finished by ``finish`` or at exit, whichever
    comes first (a run that fails still closes its files)."""
    if not accelerator.log_with:
        return {}
    init = {
        "trackio": {"name": run_name, "group": group, "resume": "allow" if resume else "never"},
        "wandb": {"name": run_name, "group": group},
        "mlflow": {"run_name": run_name},
    }
    uses_trackio = "trackio" in [str(t) for t in accelerator.log_with]
    with _trackio_home(store_root) if uses_trackio else contextlib.nullcontext():
        accelerator.init_trackers(PROJECT, config=flatten(config), init_kwargs=init)
    atexit.register(finish, accelerator)
    return tracker_paths(accelerator, out_dir, store_root)


def start_run(accelerator, cfg: dict, run_dir: Path, resume: bool, log=print) -> dict:
    """``start`` for a training run: named after its folder, grouped by its pair, stores beside the other runs."""
    if not accelerator.log_with:
        return {}
    import yaml

    from backend.core import strict_yaml

    try:
        group = (strict_yaml.load((run_dir / "config.yaml").read_text()) or {}).get("_meta", {}).get("pair")
    except (OSError, yaml.YAMLError, AttributeError):
        group = None
    paths = start(accelerator, run_dir.name, cfg, run_dir, run_dir.parent, group=group, resume=resume)
    if accelerator.is_main_process:
        log("trackers: " + "; ".join(f"{n} -> {p}" for n, p in paths.items()))
    return paths


def finish(accelerator) -> None:
    """Close every tracker once (files flushed, trackio's queue written); later calls do nothing."""
    trackers, accelerator.trackers = list(accelerator.trackers), []
    for t in trackers:
        t.finish()


def train_values(row: dict) -> dict:
    """A ``metrics.jsonl`` row -> the scalars trackers get (empty for a row they do not need)."""
    kind = row.get("type")
    if kind == "train":
        loss = row["loss"]
        return {
            "train/loss": loss,
            f"train/loss_{row['phase']}_{row['objective']}": loss,  # per phase: comparable across runs only as such
            "train/lr": row["lr"],
            "train/grad_norm": row["grad_norm"],
            "train/tokens_per_s": row["tokens_per_s"],
            "train/tokens_seen": row["tokens_seen"],
        }
    if kind == "eval":
        return {  # every held-out number: each objective of the run has its eval_<name>_loss
            f"eval/{name.removeprefix('eval_')}": value
            for name, value in row.items()
            if name.startswith("eval_") and isinstance(value, int | float) and not isinstance(value, bool)
        }
    if kind == "phase":  # phase/causal: 1 where the phase's attention is not bidirectional (causal, prefix, mixed)
        return {"phase/index": PHASE_INDEX.get(row["phase"], -1),
                "phase/causal": int(row.get("attention", "bidirectional") != "bidirectional")}  # fmt: skip
    return {}


def log_row(accelerator, row: dict) -> None:
    """Send one metrics row to every tracker, at its optimizer step."""
    if accelerator.trackers and (values := train_values(row)):
        accelerator.log(values, step=int(row["step"]))


# --- evaluations -------------------------------------------------------------------------------------------


def _numbers(d: dict | None) -> dict:
    return {k: v for k, v in (d or {}).items() if isinstance(v, int | float) and not isinstance(v, bool)}


def start_evaluation(accelerator, results: dict, out_dir: str | Path):
    """``start`` for an evaluation (``evaluate --report-to``): one tracker run named after its folder, with the task,
    data, seeds, models and fine-tuning settings as hyper-parameters. Returns the accelerator."""
    out_dir = Path(out_dir)
    config = {k: results[k] for k in ("task", "data", "data_fingerprint", "seeds", "primary_metric")}
    config |= {"hparams": results["hparams"], "models": [m["label"] for m in results["models"]]}
    start(accelerator, f"eval-{out_dir.name}", config, out_dir, out_dir.parent, group="evaluations")
    return accelerator


def log_eval_run(accelerator, label: str, record: dict) -> None:
    """One finished (model, seed): its test scores (and dev scores) at step = seed."""
    if not accelerator or not accelerator.trackers or record.get("status") != "ok":
        return
    values = {f"test/{label}/{k}": v for k, v in _numbers(record.get("test")).items()}
    values |= {f"dev/{label}/{k}": v for k, v in _numbers(record.get("dev")).items()}
    accelerator.log(values, step=int(record["seed"]))


def log_eval_summary(accelerator, results: dict) -> None:
    """Mean and standard deviation over seeds per model and metric, and each pairwise comparison's mean difference
    with its 95% t interval, then close the trackers."""
    if not accelerator or not accelerator.trackers:
        return
    values = {}
    for entry in results["models"]:
        for metric, s in (entry.get("summary") or {}).items():
            for stat in ("mean", "std"):
                if s.get(stat) is not None:
                    values[f"summary/{entry['label']}/{metric}_{stat}"] = s[stat]
    for c in results.get("comparisons", []):
        name = f"compare/{c['b']}-minus-{c['a']}/{c['metric']}"
        if c.get("mean_diff") is not None:
            values[f"{name}_mean_diff"] = c["mean_diff"]
        for side, v in zip(("lo", "hi"), c.get("ci95_t") or (), strict=False):
            values[f"{name}_ci95_{side}"] = v
    if values:
        accelerator.log(values, step=0)
    finish(accelerator)

"""A task suite: several fine-tuning tasks evaluated with the same models, so a verdict can pool them.

A suite is a small YAML file::

    name: bio-ner                       # optional (default: the file's stem)
    defaults:                           # shared fine-tuning settings: seeds and any evaluate setting
      seeds: 3
      epochs: 3
      max_train_examples: 2000
    tasks:
      - name: ncbi_disease              # a folder name: letters, digits, . _ -
        task: ner                       # ner | classification
        data: ../shared/data/ncbi_disease   # a folder evaluate reads, or a hub dataset id
        metric: f1                      # optional: ner f1 (default) | macro_f1 | token_accuracy;
                                        #   classification macro_f1 (default) | micro_f1 | accuracy
        epochs: 5                       # optional: any default overridden for this task
        text_column: sentence           # optional data columns (as evaluate's --text-column ...)

A relative ``data`` path is looked up next to the suite file, then in the working directory, then in the
repository root. Every key is checked before anything is read or trained; an error names the file, the task and
the key. Each task is an ordinary evaluation in ``OUT/tasks/<name>/`` (resumable and merged as ``evaluate``'s
``--out`` is); the suite's report pools them (``suite_report.py``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from backend.core import strict_yaml
from backend.core.errors import DetourError
from backend.core.paths import REPO_ROOT
from backend.evaluation import TASKS
from backend.evaluation.finetune import DEFAULT_HPARAMS, resolve_hparams

SETTINGS = tuple(k for k in DEFAULT_HPARAMS["ner"] if k != "metric")  # epochs, lr, ..., max_eval_examples
COLUMNS = ("text_column", "label_column", "label_separator", "tokens_column", "tags_column")
TOP_KEYS = ("name", "description", "defaults", "tasks")
TASK_KEYS = ("name", "task", "data", "metric", "seeds", *SETTINGS, *COLUMNS)
DEFAULT_KEYS = ("seeds", *SETTINGS)
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
SUITES_DIR = REPO_ROOT / "configs" / "suites"


class SuiteError(DetourError):
    """A suite file that cannot be run: the message names the file, the task and the key."""


def list_suites() -> list[Path]:
    """The suites shipped in configs/suites (the Reports tab's choices)."""
    return sorted(SUITES_DIR.glob("*.yaml")) if SUITES_DIR.exists() else []


def find_suite(path: str | Path) -> Path:
    """A suite file as given, else a shipped one by its repository path or its name (``configs/suites/bio-ner.yaml``,
    ``bio-ner.yaml``, ``bio-ner``): the default suite is found from any working directory."""
    p = Path(path).expanduser()
    if p.is_file() or p.is_absolute():
        return p
    for found in (REPO_ROOT / p, SUITES_DIR / p, SUITES_DIR / f"{p}.yaml"):
        if found.is_file():
            return found
    return p


def _where(path: Path, i: int | None = None, name: str | None = None) -> str:
    w = f"suite {path}"
    return w if i is None else f"{w}: tasks[{i}]" + (f" ({name})" if name else "")


def _resolve_data(data: str, suite_file: Path) -> str:
    """A folder (absolute, or next to the suite, in the working directory, in the repo root) or a hub id."""
    p = Path(data).expanduser()
    if p.is_absolute():
        return str(p)
    for base in (suite_file.parent, Path.cwd(), REPO_ROOT):
        if (base / p).exists():
            return str((base / p).resolve())
    if not data.startswith((".", "~")) and data.count("/") == 1:
        return data  # a hub dataset id: its loader says when it cannot be reached
    return str(p)  # not found anywhere: checked (with where it was looked for) in load_suite


def _check_keys(d: dict, known: tuple, where: str) -> None:
    for k in d:
        if k not in known:
            raise SuiteError(f"{where}: unknown key '{k}'; known: {', '.join(known)}")


def load_suite(path: str | Path) -> dict:
    """Read and check a suite file: ``{name, path, tasks: [{name, task, data, seeds, hparams, columns}]}`` with
    every task's settings resolved (defaults, then the task's own). Raises SuiteError with one line."""
    from backend.evaluation.runner import normalize_seeds

    path = find_suite(path)
    if not path.is_file():
        raise SuiteError(f"suite {path}: no such file (shipped suites: {', '.join(p.name for p in list_suites())})")
    try:
        raw = strict_yaml.load(path.read_text(encoding="utf-8"))
    except Exception as exc:  # noqa: BLE001 - YAML syntax, a duplicate key, a bad encoding: one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SuiteError(f"suite {path}: not valid YAML ({first})") from exc
    if not isinstance(raw, dict):
        raise SuiteError(f"suite {path}: expected a mapping with 'tasks' (and optional 'defaults', 'name')")
    _check_keys(raw, TOP_KEYS, _where(path))
    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise SuiteError(f"suite {path}: 'defaults' must be a mapping of settings ({', '.join(DEFAULT_KEYS)})")
    _check_keys(defaults, DEFAULT_KEYS, f"suite {path}: defaults")
    tasks = raw.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise SuiteError(f"suite {path}: 'tasks' must be a non-empty list of {{name, task, data, ...}}")
    out, seen = [], set()
    for i, t in enumerate(tasks):
        if not isinstance(t, dict):
            raise SuiteError(f"{_where(path, i)}: expected a mapping {{name, task, data, ...}}, got {t!r}")
        name = t.get("name")
        where = _where(path, i, name if isinstance(name, str) else None)
        _check_keys(t, TASK_KEYS, where)
        if not isinstance(name, str) or not NAME.fullmatch(name):  # match: '$' let "demo-ner\n" through
            raise SuiteError(f"{where}: 'name' must be a short folder name (letters, digits, . _ -), got {name!r}")
        if name in seen:
            raise SuiteError(f"{where}: task name '{name}' is used twice; names must be distinct")
        seen.add(name)
        if t.get("task") not in TASKS:
            raise SuiteError(f"{where}: 'task' must be one of {', '.join(TASKS)}, got {t.get('task')!r}")
        data = t.get("data")
        if not isinstance(data, str) or not data.strip():
            raise SuiteError(f"{where}: 'data' must be a folder of train/dev/test files or a hub dataset id")
        resolved = _resolve_data(data.strip(), path)
        if resolved.startswith("/") and not Path(resolved).exists():
            raise SuiteError(
                f"{where}: data '{data}' not found (looked next to the suite, in {Path.cwd()} and in {REPO_ROOT})"
            )
        settings = {k: defaults[k] for k in SETTINGS if k in defaults} | {k: t[k] for k in SETTINGS if k in t}
        if "metric" in t:
            settings["metric"] = t["metric"]
        try:
            hp = resolve_hparams(t["task"], **settings)
            seeds = normalize_seeds(t.get("seeds", defaults.get("seeds", 3)))
        except DetourError as exc:
            raise SuiteError(f"{where}: {exc}") from None
        columns = {k: t[k] for k in COLUMNS if k in t}
        if t["task"] == "ner" and "label_separator" in columns:
            raise SuiteError(f"{where}: 'label_separator' is for classification tasks")
        given = {k: v for k, v in settings.items() if v is not None}
        out.append({"name": name, "task": t["task"], "data": resolved, "seeds": seeds, "hparams": hp,
                    "settings": given, "columns": columns})  # fmt: skip
    return {"name": str(raw.get("name") or path.stem), "path": str(path.resolve()), "tasks": out,
            "description": raw.get("description")}  # fmt: skip


class _SuiteProgress:
    """One line per event with the task ('[task 2/3 anatem]') and the suite's own fraction and ETA: units are
    runs x epochs per task; the ETA is the training time so far per unit times the units left."""

    def __init__(self, suite: dict, n_models: int, callback: Callable[[dict], None] | None):
        self.units = [n_models * len(t["seeds"]) * t["hparams"]["epochs"] for t in suite["tasks"]]
        self.total = sum(self.units)
        self.callback, self.t0 = callback, time.time()
        self.index, self.name, self.last_print = 0, "", 0.0

    def task(self, index: int, name: str) -> None:
        self.index, self.name = index, name

    def __call__(self, ev: dict) -> None:
        from backend.evaluation.runner import _fmt_s

        before = sum(self.units[: self.index])
        done = before + ev.get("fraction", 0.0) * self.units[self.index]
        frac = done / self.total if self.total else 1.0
        elapsed = time.time() - self.t0
        eta = elapsed / frac * (1 - frac) if frac > 0.01 else None
        head = f"[task {self.index + 1}/{len(self.units)} {self.name}] "
        msg = ev["message"].split(" | ")[0]
        line = f"{head}{msg} | suite {100 * frac:.0f}% elapsed {_fmt_s(elapsed)} ETA {_fmt_s(eta)}"
        out = {**ev, "task": self.name, "task_index": self.index, "suite_fraction": frac, "suite_eta_s": eta,
               "message": line}  # fmt: skip
        if self.callback is not None:
            self.callback(out)
        elif ev["event"] != "step" or time.time() - self.last_print > 30:  # a step line at most every 30 s
            self.last_print = time.time()
            print(line, flush=True)


def evaluate_suite(
    suite: str | Path | dict,
    models: list[str],
    out_dir: str | Path | None = None,
    *,
    labels: list[str] | None = None,
    progress: Callable[[dict], None] | None = None,
    overrides: dict | None = None,
    part_of: str | Path | None = None,
    **kwargs,
) -> dict:
    """Every task of ``suite`` with every model and seed (``runner.evaluate_models`` per task into
    ``OUT/tasks/<name>``), then the suite report (``OUT/suite.json|md|html``, figures). ``overrides``: settings
    that replace the suite's for every task (seeds, epochs, example caps, ... : quick checks). ``kwargs``:
    evaluate_models' other arguments (precision, keep_models, trust_remote_code, report_to). When it finishes, each
    run it measured gets the suite's results in its model card (``model_cards.record_suite``). ``part_of``: the
    artifact (a sweep) whose part ``out_dir`` is; each task's evaluation is the suite's own part."""
    from backend.evaluation.model_cards import record_suite
    from backend.evaluation.runner import _output_dir, check_output_dir, evaluate_models
    from backend.evaluation.suite_report import write_suite_report

    spec = suite if isinstance(suite, dict) else load_suite(suite)
    check_output_dir(out_dir, "suite", spec["name"], part_of)  # another suite's, or anything else: refused now
    spec = with_overrides(spec, overrides)
    out = _output_dir(out_dir, "suite", spec["name"], part_of)
    meter = _SuiteProgress(spec, len(models), progress)
    for i, t in enumerate(spec["tasks"]):
        meter.task(i, t["name"])
        evaluate_models(
            models,
            t["task"],
            t["data"],
            t["seeds"],
            out / "tasks" / t["name"],
            labels=labels,
            progress=meter,
            card_runs=False,  # the suite adds its own results to the runs' cards, task by task and pooled
            part_of=out,
            **t["columns"],
            **kwargs,
            **t["settings"],
        )
    rep = write_suite_report(out, spec)
    for warning in record_suite(rep):
        print(f"warning: {warning}", flush=True)
    return rep


def with_overrides(spec: dict, overrides: dict | None) -> dict:
    """``spec`` with ``overrides`` (seeds, epochs, caps, ...) in place of every task's own, each task's settings
    checked as a fine-tune reads them: an unknown key or a bad value is one SuiteError naming it."""
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    unknown = [k for k in overrides if k not in (*DEFAULT_KEYS, "metric")]
    if unknown:
        raise SuiteError(f"suite {spec['path']}: cannot override {', '.join(unknown)}")
    if not overrides:
        return spec
    return {**spec, "tasks": [_override(t, overrides, spec["path"]) for t in spec["tasks"]]}


def _override(t: dict, overrides: dict, path: str) -> dict:
    from backend.evaluation.runner import normalize_seeds

    settings = {**t["settings"], **{k: v for k, v in overrides.items() if k != "seeds"}}
    try:
        hp = resolve_hparams(t["task"], **settings)
        seeds = normalize_seeds(overrides["seeds"]) if "seeds" in overrides else t["seeds"]
    except DetourError as exc:
        raise SuiteError(f"suite {path}: {t['name']}: {exc}") from None
    return {**t, "settings": settings, "hparams": hp, "seeds": seeds}

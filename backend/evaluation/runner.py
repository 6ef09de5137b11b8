"""The evaluation loop: models x seeds fine-tunes with progress and an ETA; a failed (model, seed) is recorded
with its error and the loop goes on; results are rewritten after every run; finished runs (``metrics.json``
present) are reused, so a rerun with the same ``out_dir`` resumes."""

from __future__ import annotations

import hashlib
import json
import re
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from backend.cards.results import eval_id
from backend.core.errors import ConfigError, DetourError
from backend.core.paths import DEMO_NER_DIR, evals_dir
from backend.engine import trackers
from backend.engine.precision import bf16_warning, check_runs_here, from_mixed, make_accelerator, resolve_precision
from backend.engine.schema import PRECISIONS
from backend.evaluation import TASKS, sanity
from backend.evaluation.datafiles import subsample
from backend.evaluation.finetune import effective_max_len, finetune, resolve_hparams
from backend.evaluation.identity import model_identity, recorded_identity, refuse_relabel
from backend.evaluation.merge import merge_previous
from backend.evaluation.model_cards import record_evaluation
from backend.evaluation.report import refresh, write_results

if TYPE_CHECKING:
    from backend.engine.models import ModelRef

RESULTS_VERSION = 1


class EvaluationStopped(DetourError):
    """Raise this from a progress callback to stop the loop; results so far are written with status 'stopped'."""


def safe_label(label: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("._-")
    return s[:100] or "model"


MAX_SEED = 2**32 - 1  # what every seeded generator a fine-tune sets takes (numpy's is the narrowest)


def normalize_seeds(seeds) -> list[int]:
    """A count (``5`` -> 0..4) or a list of distinct whole seeds in [0, 2**32 - 1], checked here once: 1.5 was
    read as 1, and 4294967296 or -1 passed and then failed in every fine-tune."""
    if isinstance(seeds, bool):
        raise ConfigError("seeds", seeds, "give a count (e.g. 5) or a list of integers")
    if isinstance(seeds, int):
        if not 1 <= seeds <= 10_000:
            raise ConfigError("seeds", seeds, "give a count from 1 to 10,000")
        return list(range(seeds))
    if not isinstance(seeds, list | tuple) or not all(type(s) is int for s in seeds):
        raise ConfigError("seeds", seeds, "give a count (e.g. 5) or a list of whole numbers (e.g. [0, 1, 2])")
    out = list(seeds)
    if not out or len(set(out)) != len(out):
        raise ConfigError("seeds", seeds, "give a non-empty list of distinct integers")
    if bad := [s for s in out if not 0 <= s <= MAX_SEED]:
        raise ConfigError("seeds", seeds, f"each seed from 0 to {MAX_SEED:,} (got {bad[0]:,})")
    return out


def load_task_data(task: str, data, **columns):
    """NerData or ClsData for ``data`` (NER defaults to the bundled demo set)."""
    if task == "ner":
        from backend.evaluation.iob import load_ner_data

        return load_ner_data(data or DEMO_NER_DIR, columns.get("tokens_column", "tokens"), columns.get("tags_column"))
    from backend.evaluation.classification import load_classification_data

    if not data:
        raise ConfigError("data", data, "classification needs --data: a folder with train/dev/test CSV/JSONL/parquet")
    return load_classification_data(
        data, columns.get("text_column", "text"), columns.get("label_column", "label"), columns.get("label_separator")
    )


def _subsample_data(data, max_train: int | None, max_eval: int | None):
    data.train = data.train.select(subsample(len(data.train), max_train))
    data.dev = data.dev.select(subsample(len(data.dev), max_eval))
    data.test = data.test.select(subsample(len(data.test), max_eval))
    return data


def data_fingerprint(data) -> str:
    h = hashlib.sha1()
    for sp in data.splits():
        payload = (sp.sentences, sp.tags) if hasattr(sp, "sentences") else (sp.texts, sp.labels)
        h.update(sp.name.encode())
        h.update(json.dumps(payload, ensure_ascii=False).encode("utf-8"))
    return h.hexdigest()[:16]


def _fmt_s(s: float | None) -> str:
    if s is None or s != s:
        return "?"
    s = int(round(s))
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def _build_task(task: str, data, source, label: str, hp: dict, trust_remote_code: bool):
    from backend.engine.models import load_config, load_tokenizer

    tokenizer = load_tokenizer(source, trust_remote_code=trust_remote_code)
    config = load_config(source, trust_remote_code=trust_remote_code)
    max_len = effective_max_len(hp["max_len"], tokenizer, config)
    if task == "ner":
        from backend.evaluation.ner import NerTask

        return NerTask(data, tokenizer, max_len, label)
    from backend.evaluation.classification import ClsTask

    return ClsTask(data, tokenizer, max_len, label)


def evaluate_models(
    models: list[str],
    task: str = "ner",
    data: str | Path | None = None,
    seeds: int | list[int] = 5,
    out_dir: str | Path | None = None,
    *,
    labels: list[str] | None = None,
    text_column: str = "text",
    label_column: str = "label",
    label_separator: str | None = None,
    tokens_column: str = "tokens",
    tags_column: str | None = None,
    progress: Callable[[dict], None] | None = None,
    trust_remote_code: bool = False,
    keep_models: bool = True,
    precision: str = "auto",
    report_to: list[str] | str | None = None,
    card_runs: bool = True,
    part_of: str | Path | None = None,
    **hparams,
) -> dict:
    """Fine-tune every model with every seed on ``task`` and compare them. Returns the results dict (also written
    to ``out_dir/results.json`` and ``results.md``). ``hparams``: epochs, lr, weight_decay, batch_size, max_len,
    warmup_ratio, grad_clip, eval_batch_size, max_train_examples, max_eval_examples, metric.
    ``precision``: auto | fp32 | bf16 | fp16, resolved as ``train.precision`` is (``resolve_precision``: auto is bf16
    on a CUDA GPU with bf16 and on CPUs where bf16 is really faster, else fp32); recorded as
    ``precision: {requested, resolved, why}`` in results.json and every metrics.json. ``report_to``:
    experiment trackers (``logging.report_to``'s names) that get each seed's scores and the summary. When it
    finishes, the model cards get its results (``model_cards.record_evaluation``): each kept fine-tuned model's,
    and, with ``card_runs`` (a suite records its own), each measured run's ``final/README.md``. ``part_of``: the
    artifact (a suite, a sweep, a study) whose part ``out_dir`` is (``catalogue.check_out_folder``).

    ``progress(event)`` gets dicts with ``event`` (start | step | epoch | run_done | run_failed | run_resumed |
    done), ``model``, ``seed``, ``run`` (1-based) / ``runs``, ``fraction`` (0-1 overall), ``elapsed_s``,
    ``eta_s`` and a one-line ``message``; without a callback the messages are printed.
    """
    check_output_dir(out_dir, part_of=part_of)  # a folder of something else: refused before anything is read
    labels, dirs, seeds, hp, sources = _check_inputs(task, models, labels, data, seeds, hparams)
    lr_why = hp.pop("lr_why")
    prec = resolve_eval_precision(precision)
    report_to = trackers.checked_report_to(report_to, "report_to")
    data_obj = load_task_data(
        task,
        data,
        text_column=text_column,
        label_column=label_column,
        label_separator=label_separator,
        tokens_column=tokens_column,
        tags_column=tags_column,
    )
    data_obj = _subsample_data(data_obj, hp["max_train_examples"], hp["max_eval_examples"])
    out_dir = _output_dir(out_dir, part_of=part_of)
    identities = [model_identity(s) for s in sources]  # what each label measures: path + weights sha256
    results = _new_results(task, data_obj, seeds, hp, out_dir, labels, sources, dirs, identities)
    results["precision"] = prec
    results["lr_why"] = lr_why  # 'given', or why the default fits these models' size
    jobs = _plan_jobs(results, sources)
    for job in jobs:  # settings or model clash with finished runs: fail now, before any training
        _read_finished(job.seed_dir, hp, results["data_fingerprint"], task, results["models"][job.model]["identity"])
    merge_previous(results, out_dir)  # models evaluated here before stay listed (or other settings: refused)
    write_results(refresh(results), out_dir)

    meter = _Progress(len(jobs), hp["epochs"], out_dir, progress)
    if prec.get("warning"):
        meter.report("warning", f"warning: {prec['warning']}", 0.0)
    runner = _Runner(task, data_obj, hp, results, meter, trust_remote_code, keep_models, prec)
    if report_to:  # one accelerator fine-tunes and reports (engine/trackers.py)
        accelerator = make_accelerator(prec["resolved"], **trackers.accelerator_args(report_to, out_dir))
        runner.accelerator = trackers.start_evaluation(accelerator, results, out_dir)
    try:
        for job in jobs:
            runner.run(job)
            trackers.log_eval_run(runner.accelerator, job.label, job.record)
            write_results(refresh(results), out_dir)
    except (EvaluationStopped, KeyboardInterrupt):
        _finish(results, "stopped", out_dir)
        raise
    n_failed = len(results["failures"])
    _finish(results, "complete" if not n_failed else "complete_with_failures", out_dir)
    for warning in record_evaluation(results, out_dir, runs=card_runs):
        meter.report("warning", f"warning: {warning}", meter.total_units)
    trackers.log_eval_summary(runner.accelerator, results)
    meter.report(
        "done",
        f"done: {len(jobs) - n_failed}/{len(jobs)} runs ok; results in {out_dir / 'results.md'}",
        meter.total_units,
        failures=n_failed,
    )
    return results


def resolve_eval_precision(requested: str) -> dict:
    """``{requested, resolved, why}`` (and ``warning`` for bf16 on a CPU that runs it slowly), as training does.

    fp16 is refused without a GPU: Accelerate 1.15 runs "fp16" on a CPU as plain fp32 without a word, so the
    results would claim a precision they were not computed in."""

    if requested not in PRECISIONS:
        raise ConfigError("precision", requested, f"use one of: {', '.join(PRECISIONS)}")
    resolved, why = resolve_precision(requested)
    why = why if requested == "auto" else "asked for explicitly"
    check_runs_here(resolved, "precision")  # fp16 on a CPU: the rule training follows too
    out = {"requested": requested, "resolved": resolved, "why": why}
    if warning := bf16_warning(resolved):
        out["warning"] = warning
    return out


def _check_inputs(task: str, models, labels, data, seeds, hparams: dict) -> tuple:
    """Every argument checked before any data or model is read: (labels, folder names, seeds, hparams, sources)."""

    if task not in TASKS:
        raise ConfigError("task", task, f"use one of: {', '.join(TASKS)}")
    models = list(models or [])
    if not models:
        raise ConfigError("models", models, "give at least one model")
    if labels:
        labels, dirs = _checked_labels(list(labels), len(models))
    seeds = normalize_seeds(seeds)
    hp = resolve_hparams(task, **hparams)
    if task == "classification" and not data:
        raise ConfigError("data", data, "classification needs --data: a folder with train/dev/test CSV/JSONL/parquet")
    labels, dirs, sources = check_models(models, labels)
    hp["lr_why"] = "given"
    if hparams.get("lr") is None:  # the paper's 5e-5 leaves a small model predicting nothing: by size, and why
        hp["lr"], hp["lr_why"] = sanity.default_lr([model_config_of_source(s) for s in sources])
    return labels, dirs, seeds, hp, sources


def check_models(models: list[str], labels: list[str] | None) -> tuple[list[str], list[str], list]:
    """(labels, folder names, sources) of the models an evaluation compares, each name resolved and every label
    distinct: what ``evaluate`` refuses before any work, and what its ``--plan`` checks too (a plan named a model
    that does not exist, or one model twice, and priced it)."""
    from backend.engine.model_ref import resolve_model

    sources = [resolve_model(m) for m in models]  # every kind of name, one resolver; refused here with candidates
    # named as resolved when no labels are given: a picker's label (org/name (cached, ...)) never names a result
    labels, dirs = _checked_labels(list(labels) if labels else [s.spec for s in sources], len(models))
    return labels, dirs, sources


def _checked_labels(labels: list[str], n: int) -> tuple[list[str], list[str]]:
    """(labels, their folder names): one per model, distinct, and distinct as folder names too."""
    if len(labels) != n:
        raise ConfigError("labels", labels, f"give one label per model ({n})")
    if len(set(labels)) != len(labels):
        raise ConfigError("labels", labels, "model labels must be distinct (pass --labels to name repeats)")
    dirs = [safe_label(x) for x in labels]
    if len(set(dirs)) != len(dirs):
        raise ConfigError("labels", labels, f"labels map to the same folder names ({dirs}); pass distinct --labels")
    return labels, dirs


def model_config_of_source(source):
    """The model's config for its size (None when it cannot be read: the failure is reported per seed later)."""
    from backend.engine.models import load_config

    try:
        return load_config(source)
    except DetourError:
        return None


def _output_dir(
    out_dir: str | Path | None, kind: str = "evaluation", name: str | None = None, part_of: str | Path | None = None
) -> Path:
    """``out_dir`` (resolved: the resume key), or a fresh ``evals/<timestamp>`` folder, claimed for ``kind``
    (``catalogue.claim_folder``): a folder that holds anything but an evaluation (or, for a suite, the same suite)
    is refused before any work."""
    from backend.core.catalogue import claim_folder

    if out_dir:
        raw = Path(out_dir).expanduser()
        if raw.exists() and not raw.is_dir() and not raw.is_symlink():  # mkdir raised FileExistsError
            raise ConfigError("out", str(out_dir), "is a file; give a folder (new, or one an evaluation wrote)")
        out = raw.absolute()
    else:
        stamp = evals_dir() / time.strftime("%Y%m%d-%H%M%S")
        out, i = stamp, 2
        while out.exists():  # two evaluations started in the same second
            out, i = stamp.with_name(f"{stamp.name}-{i}"), i + 1
    return claim_folder(out, kind, name, part_of=part_of).resolve()


def check_output_dir(
    out_dir: str | Path | None, kind: str = "evaluation", name: str | None = None, part_of: str | Path | None = None
) -> None:
    """Refuse an ``--out`` that ``_output_dir`` would refuse, writing nothing: called before any data or model
    is read."""
    from backend.core.catalogue import check_out_folder

    if out_dir:
        raw = Path(out_dir).expanduser()
        if raw.exists() and not raw.is_dir() and not raw.is_symlink():
            raise ConfigError("out", str(out_dir), "is a file; give a folder (new, or one an evaluation wrote)")
        check_out_folder(raw, kind, name, part_of=part_of)


def _new_results(task, data_obj, seeds, hp, out_dir: Path, labels, sources, dirs, identities) -> dict:
    """The results dict before any run: every (model, seed) is listed as pending, so none can go missing."""
    source = Path(data_obj.source)
    return {
        "version": RESULTS_VERSION,
        "task": task,
        "data": str(source.resolve()) if source.exists() else data_obj.source,
        "data_fingerprint": data_fingerprint(data_obj),
        "data_notes": list(data_obj.notes),
        "data_sizes": {sp.name: len(sp) for sp in data_obj.splits()},
        "labels": list(data_obj.labels),
        "multi_label": bool(getattr(data_obj, "multi_label", False)),
        "primary_metric": hp["metric"],
        "seeds": seeds,
        "hparams": hp,
        "out_dir": str(out_dir),
        "status": "running",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "finished_at": None,
        "models": [
            {
                "label": lab,
                "spec": src.spec,
                "kind": src.kind,
                "path": src.path,
                "identity": ident,
                "dir": str(out_dir / "models" / d),
                "runs": [{"seed": s, "status": "pending"} for s in seeds],
            }
            for lab, src, d, ident in zip(labels, sources, dirs, identities, strict=True)
        ],
    }


def _finish(results: dict, status: str, out_dir: Path) -> None:
    results["status"] = status
    results["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    write_results(refresh(results), out_dir)


@dataclass
class _Job:
    """One (model, seed) fine-tune; ``record`` is its entry in ``results``, rewritten in place when it ends."""

    run: int  # 1-based, in plan order
    runs: int
    model: int  # index into results["models"]
    label: str
    source: ModelRef
    seed: int
    seed_dir: Path
    record: dict

    @property
    def tag(self) -> str:
        return f"[{self.run}/{self.runs}] {self.label} seed {self.seed}"

    def where(self) -> dict:
        return {"model": self.label, "seed": self.seed, "run": self.run}


def _plan_jobs(results: dict, sources: list) -> list[_Job]:
    """Model-major order: the seeds of one model run back to back, sharing its tokenized task."""
    pairs = [(i, entry, rec) for i, entry in enumerate(results["models"]) for rec in entry["runs"]]
    return [
        _Job(n, len(pairs), i, entry["label"], sources[i], rec["seed"], Path(entry["dir"]) / f"seed-{rec['seed']}", rec)
        for n, (i, entry, rec) in enumerate(pairs, start=1)
    ]


class _Progress:
    """Fraction done and ETA, counted in epochs. The ETA divides by the time spent training only, so resumed
    runs (which cost nothing) do not make the rest look fast."""

    def __init__(self, runs: int, epochs: int, out_dir: Path, callback: Callable[[dict], None] | None):
        self.runs, self.epochs, self.out_dir, self.callback = runs, epochs, out_dir, callback
        self.total_units = runs * epochs
        self.t0 = time.time()
        self.train_s = 0.0
        self.train_units = 0.0
        self.done_units = 0.0
        self.run_start: float | None = None

    def eta(self, done_units: float) -> float | None:
        live, live_s = self.train_units, self.train_s
        if self.run_start is not None:
            live += done_units - self.done_units
            live_s += time.time() - self.run_start
        if live <= 0:
            return None
        return max(0.0, (self.total_units - done_units) * live_s / live)

    def report(self, event: str, message: str, done_units: float, **extra) -> None:
        ev = {
            "event": event,
            "runs": self.runs,
            "fraction": min(1.0, done_units / self.total_units) if self.total_units else 1.0,
            "elapsed_s": time.time() - self.t0,
            "eta_s": self.eta(done_units),
            "out_dir": str(self.out_dir),
            **extra,
        }
        ev["message"] = (
            f"{message} | {100 * ev['fraction']:.0f}% elapsed {_fmt_s(ev['elapsed_s'])} ETA {_fmt_s(ev['eta_s'])}"
        )
        if self.callback is not None:
            self.callback(ev)
        elif event != "step":
            print(ev["message"], flush=True)

    def run_ended(self, base_units: float, trained: bool) -> None:
        if trained:
            self.train_units += self.epochs
            self.train_s += time.time() - self.run_start
        self.run_start = None
        self.done_units = base_units + self.epochs


class _Runner:
    """Runs one job at a time: reuses a finished run, or fine-tunes and records the metrics or the error.

    The tokenized task is built once per model (a build error fails each of its seeds with that error) and the
    accelerator once per evaluation."""

    def __init__(self, task, data_obj, hp, results, meter, trust_remote_code, keep_models, precision: dict):
        self.task, self.data_obj, self.hp, self.meter = task, data_obj, hp, meter
        self.data_desc, self.fingerprint = results["data"], results["data_fingerprint"]
        self.trust_remote_code, self.keep_models, self.precision = trust_remote_code, keep_models, precision
        self.accelerator = None
        self.identities = [e["identity"] for e in results["models"]]
        self._tasks: dict[int, object] = {}  # model index -> task, or the exception its build raised

    def run(self, job: _Job) -> None:
        done = _read_finished(job.seed_dir, self.hp, self.fingerprint, self.task, self.identities[job.model])
        if done is not None:
            self._set_record(job, _run_record(done, resumed=True))
            self.meter.done_units += self.epochs
            metric = self.hp["metric"]
            self.meter.report(
                "run_resumed",
                f"{job.tag}: already done ({metric} {_pct(done['test'][metric])})",
                self.meter.done_units,
                **job.where(),
            )
            return
        base = self.meter.done_units
        self.meter.report("start", f"{job.tag}: fine-tuning", base, **job.where())
        self.meter.run_start = time.time()
        try:
            metrics = self._finetune(job, base)
            self._set_record(job, _run_record(metrics, resumed=False))
            self.meter.run_ended(base, trained=True)
            metric = self.hp["metric"]
            self.meter.report(
                "run_done",
                f"{job.tag}: test {metric} {_pct(metrics['test'][metric])} (best epoch {metrics['best_epoch']})",
                self.meter.done_units,
                **job.where(),
            )
        except EvaluationStopped:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed seed is recorded, the loop goes on
            self.meter.run_ended(base, trained=False)
            err = f"{type(exc).__name__}: {exc}"
            tb = "".join(traceback.format_exception(exc)[-12:])
            self._set_record(job, {"seed": job.seed, "status": "failed", "error": err, "traceback": tb})
            self.meter.report(
                "run_failed", f"{job.tag}: FAILED: {err}", self.meter.done_units, **job.where(), error=err
            )

    @property
    def epochs(self) -> int:
        return self.hp["epochs"]

    @staticmethod
    def _set_record(job: _Job, rec: dict) -> None:
        job.record.clear()  # in place: the record is the one results["models"][i]["runs"] holds
        job.record.update(rec)

    def _task_for(self, job: _Job):
        if job.model not in self._tasks:
            try:
                self._tasks[job.model] = _build_task(
                    self.task, self.data_obj, job.source, job.label, self.hp, self.trust_remote_code
                )
            except Exception as exc:
                self._tasks[job.model] = exc
                raise
        built = self._tasks[job.model]
        if isinstance(built, Exception):
            raise built
        return built

    def _finetune(self, job: _Job, base_units: float) -> dict:
        task_obj = self._task_for(job)
        if self.accelerator is None:
            self.accelerator = make_accelerator(self.precision["resolved"])

        def on_event(ev):
            frac_epoch = ev["epoch"] - 1 + (ev["step"] / ev["steps_per_epoch"] if ev["event"] == "step" else 1.0)
            msg = f"{job.tag}: epoch {ev['epoch']}/{ev['epochs']}"
            if ev["event"] == "epoch":
                msg += f" dev {ev['metric']} {_pct(ev['dev_metric'])} (best epoch {ev['best_epoch']})"
            if ev["skipped"]:
                msg += f", {ev['skipped']} steps skipped (non-finite loss or gradients)"
            self.meter.report(
                ev["event"],
                msg,
                base_units + frac_epoch,
                **job.where(),
                epoch=ev["epoch"],
                epochs=ev["epochs"],
                step=ev.get("step"),
                skipped=ev["skipped"],
                skipped_steps=ev["skipped"],
                **{k: ev[k] for k in ("dev_metric", "metric", "best_epoch", "train_loss") if k in ev},
            )

        meta = {
            "spec": job.source.spec,
            "source_kind": job.source.kind,
            "source_path": job.source.path,
            "identity": self.identities[job.model],
            "data": self.data_desc,
            "data_fingerprint": self.fingerprint,
            "evaluation": eval_id(job.seed_dir.parent.parent.parent),  # what the model's card calls its evaluation
        }
        return finetune(
            task_obj,
            job.source,
            job.seed,
            job.seed_dir,
            self.hp,
            model_label=job.label,
            meta=meta,
            progress=on_event,
            accelerator=self.accelerator,
            precision={k: self.precision[k] for k in ("requested", "resolved", "why")},
            trust_remote_code=self.trust_remote_code,
            keep_model=self.keep_models,
        )


def _pct(v) -> str:
    return "?" if v is None else f"{100 * v:.2f}"


def _run_record(metrics: dict, resumed: bool) -> dict:
    keep = (
        "seed",
        "status",
        "best_epoch",
        "epochs_run",
        "dev",
        "test",
        "model_dir",
        "saved_model",
        "train_time_s",
        "device",
        "n_train",
        "n_dev",
        "n_test",
        "finished_at",
    )
    rec = {k: metrics.get(k) for k in keep}
    rec["precision"] = run_precision(metrics)
    rec["skipped_steps"] = (metrics.get("skipped_steps") or {}).get("total", 0)
    rec["resumed"] = resumed
    return rec


def run_precision(metrics: dict) -> dict | None:
    """A finished run's ``precision`` record; runs finished before it existed recorded Accelerate's
    ``mixed_precision`` (no | bf16 | fp16) instead."""
    if "precision" in metrics:
        return metrics["precision"]
    if "mixed_precision" in metrics:
        mixed = metrics["mixed_precision"]
        why = f"recorded as mixed_precision {mixed} (older version)"
        return {"requested": None, "resolved": from_mixed(mixed), "why": why}
    return None


def _read_finished(seed_dir: Path, hp: dict, fingerprint: str, task: str, identity: dict) -> dict | None:
    """The metrics of a finished run in ``seed_dir``; an error when it was made with other settings or data, or
    from another model than ``identity`` (the label names a folder; the folder's scores are that model's)."""
    p = seed_dir / "metrics.json"
    if not p.exists():
        return None
    try:
        m = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError):
        return None  # unreadable: train it again
    if m.get("status") != "ok":
        return None
    label = m.get("model") or seed_dir.parent.name
    refuse_relabel(seed_dir.parent.parent.parent, label, recorded_identity(m), identity)
    diffs = [k for k in hp if m.get("hparams", {}).get(k) != hp[k]]
    if m.get("task") != task:
        diffs.append("task")
    if m.get("data_fingerprint") != fingerprint:
        diffs.append("data")
    if diffs:
        raise ConfigError(
            "out",
            str(seed_dir.parent.parent.parent),
            f"it already holds {seed_dir.name} of this model finished with different {', '.join(diffs)}; "
            "use another --out folder (or delete that one) to start fresh",
        )
    return m

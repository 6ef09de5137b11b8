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
from pathlib import Path

from backend.core.errors import ConfigError, DetourError
from backend.core.paths import DEMO_NER_DIR, evals_dir
from backend.engine.precision import make_accelerator
from backend.evaluation import TASKS
from backend.evaluation.datafiles import subsample
from backend.evaluation.finetune import effective_max_len, finetune, resolve_hparams
from backend.evaluation.report import refresh, write_results

RESULTS_VERSION = 1


class EvaluationStopped(DetourError):
    """Raise this from a progress callback to stop the loop; results so far are written with status 'stopped'."""


def safe_label(label: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("._-")
    return s[:100] or "model"


def normalize_seeds(seeds) -> list[int]:
    if isinstance(seeds, bool):
        raise ConfigError("seeds", seeds, "give a count (e.g. 5) or a list of integers")
    if isinstance(seeds, int):
        if seeds < 1:
            raise ConfigError("seeds", seeds, "give a count >= 1")
        return list(range(seeds))
    try:
        out = [int(s) for s in seeds]
    except (TypeError, ValueError):
        raise ConfigError("seeds", seeds, "give a count (e.g. 5) or a list of integers") from None
    if not out or len(set(out)) != len(out):
        raise ConfigError("seeds", seeds, "give a non-empty list of distinct integers")
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
    mixed_precision: str | None = None,
    **hparams,
) -> dict:
    """Fine-tune every model with every seed on ``task`` and compare them. Returns the results dict (also written
    to ``out_dir/results.json`` and ``results.md``). ``hparams``: epochs, lr, weight_decay, batch_size, max_len,
    warmup_ratio, grad_clip, eval_batch_size, max_train_examples, max_eval_examples, metric.

    ``progress(event)`` gets dicts with ``event`` (start | step | epoch | run_done | run_failed | run_resumed |
    done), ``model``, ``seed``, ``run`` (1-based) / ``runs``, ``fraction`` (0-1 overall), ``elapsed_s``,
    ``eta_s`` and a one-line ``message``; without a callback the messages are printed.
    """
    from backend.engine.models import resolve_model

    if task not in TASKS:
        raise ConfigError("task", task, f"use one of: {', '.join(TASKS)}")
    models = list(models or [])
    if not models:
        raise ConfigError("models", models, "give at least one model")
    labels = list(labels) if labels else list(models)
    if len(labels) != len(models):
        raise ConfigError("labels", labels, f"give one label per model ({len(models)})")
    if len(set(labels)) != len(labels):
        raise ConfigError("labels", labels, "model labels must be distinct (pass --labels to name repeats)")
    dirs = [safe_label(x) for x in labels]
    if len(set(dirs)) != len(dirs):
        raise ConfigError("labels", labels, f"labels map to the same folder names ({dirs}); pass distinct --labels")
    seeds = normalize_seeds(seeds)
    hp = resolve_hparams(task, **hparams)
    if task == "classification" and not data:
        raise ConfigError("data", data, "classification needs --data: a folder with train/dev/test CSV/JSONL/parquet")
    sources = [resolve_model(m) for m in models]

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
    fingerprint = data_fingerprint(data_obj)
    data_desc = str(Path(data_obj.source).resolve()) if Path(data_obj.source).exists() else data_obj.source

    if out_dir:
        out_dir = Path(out_dir).expanduser().resolve()
    else:
        stamp = evals_dir() / time.strftime("%Y%m%d-%H%M%S")
        out_dir, i = stamp, 2
        while out_dir.exists():  # two evaluations started in the same second
            out_dir, i = stamp.with_name(f"{stamp.name}-{i}"), i + 1
    out_dir.mkdir(parents=True, exist_ok=True)
    results = {
        "version": RESULTS_VERSION,
        "task": task,
        "data": data_desc,
        "data_fingerprint": fingerprint,
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
                "dir": str(out_dir / "models" / d),
                "runs": [{"seed": s, "status": "pending"} for s in seeds],
            }
            for lab, src, d in zip(labels, sources, dirs, strict=True)
        ],
    }
    for entry in results["models"]:  # settings clash with finished runs: fail now, before any training
        for rec in entry["runs"]:
            _read_finished(Path(entry["dir"]) / f"seed-{rec['seed']}", hp, fingerprint, task)
    write_results(refresh(results), out_dir)

    total_runs = len(models) * len(seeds)
    epochs = hp["epochs"]
    total_units = total_runs * epochs
    clock = {"t0": time.time(), "train_s": 0.0, "train_units": 0.0, "done_units": 0.0, "run_start": None}

    def eta(done_units: float) -> float | None:
        live = clock["train_units"]
        live_s = clock["train_s"]
        if clock["run_start"] is not None:
            live += done_units - clock["done_units"]
            live_s += time.time() - clock["run_start"]
        if live <= 0:
            return None
        return max(0.0, (total_units - done_units) * live_s / live)

    def report(event: str, message: str, done_units: float, **extra) -> None:
        ev = {
            "event": event,
            "runs": total_runs,
            "fraction": min(1.0, done_units / total_units) if total_units else 1.0,
            "elapsed_s": time.time() - clock["t0"],
            "eta_s": eta(done_units),
            "out_dir": str(out_dir),
            **extra,
        }
        ev["message"] = (
            f"{message} | {100 * ev['fraction']:.0f}% elapsed {_fmt_s(ev['elapsed_s'])} ETA {_fmt_s(ev['eta_s'])}"
        )
        if progress is not None:
            progress(ev)
        elif event != "step":
            print(ev["message"], flush=True)

    accelerator = None
    run_idx = 0
    try:
        for entry, src, lab in zip(results["models"], sources, labels, strict=True):
            task_obj, task_error = None, None
            for rec in entry["runs"]:
                seed = rec["seed"]
                run_idx += 1
                seed_dir = Path(entry["dir"]) / f"seed-{seed}"
                tag = f"[{run_idx}/{total_runs}] {lab} seed {seed}"
                base_units = clock["done_units"]
                meta = {
                    "spec": src.spec,
                    "source_kind": src.kind,
                    "source_path": src.path,
                    "data": data_desc,
                    "data_fingerprint": fingerprint,
                }
                done = _read_finished(seed_dir, hp, fingerprint, task)
                if done is not None:
                    rec.clear()
                    rec.update(_run_record(done, resumed=True))
                    clock["done_units"] += epochs
                    report(
                        "run_resumed",
                        f"{tag}: already done ({hp['metric']} {_pct(done['test'][hp['metric']])})",
                        clock["done_units"],
                        model=lab,
                        seed=seed,
                        run=run_idx,
                    )
                    write_results(refresh(results), out_dir)
                    continue
                report("start", f"{tag}: fine-tuning", base_units, model=lab, seed=seed, run=run_idx)
                clock["run_start"] = time.time()
                try:
                    if task_error is not None:
                        raise task_error
                    if task_obj is None:
                        try:
                            task_obj = _build_task(task, data_obj, src, lab, hp, trust_remote_code)
                        except Exception as exc:
                            task_error = exc
                            raise
                    if accelerator is None:
                        accelerator = make_accelerator(mixed_precision)

                    def on_event(ev, _tag=tag, _lab=lab, _seed=seed, _run=run_idx, _base=base_units):
                        frac_epoch = (
                            ev["epoch"] - 1 + (ev["step"] / ev["steps_per_epoch"] if ev["event"] == "step" else 1.0)
                        )
                        msg = f"{_tag}: epoch {ev['epoch']}/{ev['epochs']}"
                        if ev["event"] == "epoch":
                            msg += f" dev {ev['metric']} {_pct(ev['dev_metric'])} (best epoch {ev['best_epoch']})"
                        report(
                            ev["event"],
                            msg,
                            _base + frac_epoch,
                            model=_lab,
                            seed=_seed,
                            run=_run,
                            epoch=ev["epoch"],
                            epochs=ev["epochs"],
                        )

                    metrics = finetune(
                        task_obj,
                        src,
                        seed,
                        seed_dir,
                        hp,
                        model_label=lab,
                        meta=meta,
                        progress=on_event,
                        accelerator=accelerator,
                        trust_remote_code=trust_remote_code,
                        keep_model=keep_models,
                    )
                    rec.clear()
                    rec.update(_run_record(metrics, resumed=False))
                    clock["train_units"] += epochs
                    clock["train_s"] += time.time() - clock["run_start"]
                    clock["run_start"] = None
                    clock["done_units"] = base_units + epochs
                    report(
                        "run_done",
                        f"{tag}: test {hp['metric']} {_pct(metrics['test'][hp['metric']])} "
                        f"(best epoch {metrics['best_epoch']})",
                        clock["done_units"],
                        model=lab,
                        seed=seed,
                        run=run_idx,
                    )
                except EvaluationStopped:
                    raise
                except Exception as exc:  # noqa: BLE001 - a failed seed is recorded, the loop goes on
                    clock["run_start"] = None
                    clock["done_units"] = base_units + epochs
                    err = f"{type(exc).__name__}: {exc}"
                    rec.clear()
                    rec.update(
                        {
                            "seed": seed,
                            "status": "failed",
                            "error": err,
                            "traceback": "".join(traceback.format_exception(exc)[-12:]),
                        }
                    )
                    report(
                        "run_failed",
                        f"{tag}: FAILED: {err}",
                        clock["done_units"],
                        model=lab,
                        seed=seed,
                        run=run_idx,
                        error=err,
                    )
                write_results(refresh(results), out_dir)
    except (EvaluationStopped, KeyboardInterrupt):
        results["status"] = "stopped"
        results["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        write_results(refresh(results), out_dir)
        raise
    n_failed = len(results["failures"])
    results["status"] = "complete" if not n_failed else "complete_with_failures"
    results["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    write_results(refresh(results), out_dir)
    report(
        "done",
        f"done: {total_runs - n_failed}/{total_runs} runs ok; results in {out_dir / 'results.md'}",
        total_units,
        failures=n_failed,
    )
    return results


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
    rec["resumed"] = resumed
    return rec


def _read_finished(seed_dir: Path, hp: dict, fingerprint: str, task: str) -> dict | None:
    """The metrics of a finished run in ``seed_dir``; an error when it was made with other settings or data."""
    p = seed_dir / "metrics.json"
    if not p.exists():
        return None
    try:
        m = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError):
        return None  # unreadable: train it again
    if m.get("status") != "ok":
        return None
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

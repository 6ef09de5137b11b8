"""The NER tab's evaluations: the fine-tuned NER models they kept (the slots' first choices), the F1 table, and
running one from the page (``backend.evaluation.runner.evaluate_models``, the function behind ``python -m backend
evaluate``) with each epoch's numbers shown as it trains."""

from __future__ import annotations

import math
from pathlib import Path

from app import check_model_spec, evals_dir, warn
from backend.core import catalogue
from backend.core.errors import DetourError
from backend.evaluation.results_file import read_results


def evaluations() -> list[tuple[catalogue.Entry, dict | None]]:
    """The evaluations folder's evaluations by the catalogue, newest name first, each with its results, or with
    None and listed as unreadable (a torn or foreign results.json, a folder linking out of the root): never fatal."""
    return [(e, e.value) for e in reversed(catalogue.entries("evaluation", evals_dir(), read=read_results))]


def finetuned() -> list[dict]:
    """The fine-tuned NER models of the readable evaluations, newest first."""
    from backend.evaluation.predict import list_finetuned

    out = [m for e, _ in evaluations() if e.readable for m in list_finetuned(e.path, task="ner")]
    return sorted(out, key=lambda m: (m["finished_at"], m["eval_dir"]), reverse=True)


def finetuned_choices() -> list[tuple[str, str]]:
    return [(m["name"], m["path"]) for m in finetuned()]


def f1_table() -> list[list]:
    """One row per (evaluation, model): mean ± std of the primary test metric over seeds; an evaluation that
    cannot be read is one row whose status says why."""
    rows = []
    for entry, res in evaluations():
        if res is None:
            rows.append([entry.name, "", "", "", None, None, "", f"unreadable: {entry.problem}"])
            continue
        primary = res.get("primary_metric", "f1")
        for e in res.get("models", []):
            s = (e.get("summary") or {}).get(primary) or {}
            mean, std = s.get("mean"), s.get("std")
            rows.append(
                [
                    entry.name,
                    res.get("task", ""),
                    e.get("label", ""),
                    primary,
                    None if mean is None else round(100 * mean, 2),
                    None if std is None else round(100 * std, 2),
                    f"{e.get('n_ok', 0)}/{len(e.get('runs', []))}",
                    res.get("status", "") + flag_text(e.get("flags") or []),
                ]
            )
    return rows


def flag_text(flags: list[str]) -> str:
    """What the status column adds for a model whose scores mean nothing (results.md has the full lines)."""
    short = [w for w, key in (("F1 undefined (no entities)", "undefined"), ("constant answer", "constant answer"))
             if any(key in f for f in flags)]  # fmt: skip
    return "".join(f" ⚠ {w}" for w in short)


F1_HEADERS = ["evaluation", "task", "model", "metric", "mean %", "std %", "seeds ok", "status"]


def eval_labels(choices: list[str], specs: list[str]) -> list[str]:
    """What the evaluation calls each model: a hub model by its hub id (``org/name``: two orgs' models of one name
    stay apart), a bundled model, a run or a folder by its folder's name."""
    return [spec if not Path(spec).exists() else Path(choice).name for choice, spec in zip(choices, specs, strict=True)]


def run_evaluation(models: list[str], seeds: str, epochs, max_train, progress=None) -> str:
    """Fine-tune the chosen models on the bundled NER demo (or the runner's default data) across seeds;
    ``progress(event)`` gets the runner's progress events."""
    from backend.evaluation.runner import evaluate_models

    try:
        specs = [check_model_spec(m, "model") for m in (models or []) if m]
        if not specs:
            raise DetourError("choose at least one model to evaluate")
        seed_list = [_whole(s, "Seeds") for s in str(seeds or "0").replace(",", " ").split()]
        if _whole(epochs, "Epochs") is None:
            raise DetourError("Epochs is blank: give a whole number, e.g. 2")
        res = evaluate_models(
            specs,
            task="ner",
            seeds=seed_list,
            labels=eval_labels([m for m in models if m], specs),
            epochs=_whole(epochs, "Epochs"),
            max_train_examples=_whole(max_train, "Max training sentences"),  # 0 is refused there, blank is all
            progress=progress,
        )
    except (DetourError, ValueError) as exc:
        return warn(exc)
    return f"✓ evaluation {Path(res['out_dir']).name}: {res['status']}"


def _whole(value, what: str) -> int | None:
    """A form field's value as a whole number, None when blank. ``int()`` said "cannot convert float NaN to integer"
    or "invalid literal for int()", raised a TypeError on a blank Epochs, and cut 1.5 to 1 without a word."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise DetourError(f"{what} '{value}': give whole numbers, e.g. 0 1 2") from None
    if not math.isfinite(number) or number != int(number):
        raise DetourError(f"{what} {value}: give a whole number")
    return int(number)


LIVE_HEADERS = ["run", "model", "seed", "epoch", "dev F1 %", "train loss", "skipped steps", "best epoch"]


class LiveEvaluation:
    """The runner's progress events as the page shows them while an evaluation runs: one row per finished epoch
    (dev F1, train loss, skipped steps), a log of what each fine-tune did, and a status line with the ETA."""

    def __init__(self):
        self.rows: list[list] = []
        self.lines: list[str] = []
        self.status = "starting…"

    def add(self, ev: dict) -> None:
        msg = ev.get("message", "")
        self.status = msg
        if ev.get("event") == "epoch":
            self.rows.append(self._epoch_row(ev))
        if ev.get("event") != "step":
            self.lines.append(msg.split(" | ")[0])

    @staticmethod
    def _epoch_row(ev: dict) -> list:
        """The numbers from the event's fields (``evaluation.runner`` forwards the fine-tune's epoch event)."""
        dev, best = ev.get("dev_metric"), ev.get("best_epoch")
        loss, skipped = ev.get("train_loss"), ev.get("skipped_steps")
        return [
            f"{ev.get('run')}/{ev.get('runs')}",
            ev.get("model", ""),
            ev.get("seed"),
            f"{ev.get('epoch')}/{ev.get('epochs')}",
            None if dev is None else round(100 * dev, 2),
            None if loss is None else round(loss, 4),
            skipped,
            best,
        ]

    def table(self) -> dict | None:
        """The rows for a gr.Dataframe, without the columns no event filled (a runner that reports no train loss
        gets no empty train-loss column)."""
        if not self.rows:
            return None
        keep = [j for j in range(len(LIVE_HEADERS)) if j < 4 or any(r[j] is not None for r in self.rows)]
        return {"headers": [LIVE_HEADERS[j] for j in keep], "data": [[r[j] for j in keep] for r in self.rows]}

    def log(self) -> str:
        return "\n".join(self.lines)


def evaluate_live(models, seeds, epochs, max_train):
    """Run ``run_evaluation`` in a thread and yield ``(LiveEvaluation, None)`` whenever a progress event arrives,
    then ``(LiveEvaluation, final message)``. Closing the generator (the page went away, or Stop) stops the
    evaluation at its next progress event; what finished is kept (results status 'stopped')."""
    import queue
    import threading

    from backend.evaluation.runner import EvaluationStopped

    events: queue.Queue = queue.Queue()
    stop = threading.Event()
    done: list[str] = []

    def on_event(ev: dict) -> None:
        if stop.is_set():
            raise EvaluationStopped("stopped from the page")
        events.put(ev)

    def work() -> None:
        try:
            done.append(run_evaluation(models, seeds, epochs, max_train, progress=on_event))
        except Exception as exc:  # noqa: BLE001 - said on the page; a thread's exception would vanish
            done.append(warn(f"the evaluation failed: {type(exc).__name__}: {exc}"))
        finally:
            events.put(None)

    live = LiveEvaluation()
    threading.Thread(target=work, name="ner-evaluation", daemon=True).start()
    try:
        while (ev := events.get()) is not None:
            live.add(ev)
            yield live, None
        yield live, done[0]
    finally:
        stop.set()

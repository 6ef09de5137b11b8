"""NER tab: fine-tuned models (from the evaluation backend) side by side on one text, spans highlighted per model;
the F1 table of the evaluations; a button that runs an evaluation (``backend.evaluation.runner.evaluate_models``,
the function behind ``python -m backend evaluate``)."""

from __future__ import annotations

import math
from pathlib import Path

from app import check_model_spec, check_path, evals_dir, looks_like_path, md_escape, model_choices, warn
from backend.core import catalogue, inference_lane
from backend.core.errors import DetourError
from backend.evaluation.results_file import read_results

SLOTS = 4
EXAMPLE = "Patients with type 2 diabetes received metformin at Massachusetts General Hospital."
# gr.HighlightedText sets ``word-break: break-all`` on its text, so a segment that reaches the end of a line is cut
# anywhere ("receive|d", "Gener|al"); in this tab lines break between words (a word longer than a line still wraps).
# gr.Dropdown draws its arrow over the end of its text box: a slot's text stops before the arrow, and a name too
# long for its slot ends in "…" rather than under the arrow.
WHOLE_WORDS_CSS = (
    "<style>.ner-spans .textfield { word-break: normal; overflow-wrap: anywhere; }"
    " .ner-slot input { padding-right: var(--size-8); text-overflow: ellipsis; }</style>"
)


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


def default_slots(picks: list, choices: list[tuple[str, str]] | None = None) -> list:
    """The slots' values: with nothing picked (a page built before any evaluation), the first two fine-tuned models
    that exist; a choice made is kept."""
    if any(picks):
        return list(picks)
    choices = finetuned_choices() if choices is None else choices
    return [choices[i][1] if i < min(2, len(choices)) else None for i in range(len(picks))]


# One batch answers at most this many waiting requests (Gradio's ``max_batch_size``), as in the Fill-mask tab.
MAX_BATCH = 16


def tag(text: str, model_dirs: list[str | None]) -> tuple[list, str]:
    """-> (HighlightedText value or None per slot, message)."""
    return tag_many([(text, model_dirs)])[0]


def tag_many(requests: list[tuple[str, list[str | None]]]) -> list[tuple[list, str]]:
    """``tag`` for many users' requests ``(text, model folders)`` at once: each model tags every text that asks for
    it in one batched pass, in the inference lane (``backend.core.inference_lane``: one thread, below training)."""
    out: list[tuple[list, str] | None] = [None] * len(requests)
    slots: list[list[str | None]] = []
    groups: dict[Path, list[tuple[int, int]]] = {}
    notes: list[dict[int, str]] = [{} for _ in requests]
    defaults = None
    for r, (text, model_dirs) in enumerate(requests):
        if not any(model_dirs):  # read once per batch, not once per request
            defaults = finetuned_choices() if defaults is None else defaults
        dirs = default_slots(list(model_dirs), defaults)  # empty slots take the defaults
        slots.append(dirs)
        if not (text or "").strip():
            out[r] = [None] * len(dirs), "⚠ write a text to tag"
        elif len(text) > 5000:
            out[r] = [None] * len(dirs), f"⚠ the text has {len(text)} characters; at most 5000"
        if out[r] is not None:
            continue
        for i, d in enumerate(dirs):
            if not d:
                continue
            try:
                if not looks_like_path(d):  # a name typed: a listed fine-tuned model's, else a pretrained model's
                    defaults = finetuned_choices() if defaults is None else defaults
                    d = _finetuned_by_name(d, i, defaults)
                groups.setdefault(check_path(d, f"slot {i + 1}"), []).append((r, i))  # the error names the slot
            except DetourError as exc:
                notes[r][i] = _slot_note(exc, i)
    answers = inference_lane.run(_infer, groups, [t for t, _ in requests])
    for r, dirs in enumerate(slots):
        if out[r] is not None:
            continue
        vals: list = [None] * len(dirs)
        for i in range(len(dirs)):
            res = answers.get((r, i))
            if isinstance(res, DetourError):
                notes[r][i] = _slot_note(res, i)
            elif res is not None:
                vals[i] = res
                notes[r][i] = f"slot {i + 1}: {sum(1 for _, lab in res if lab)} entities"
        if not any(dirs):
            out[r] = vals, "⚠ choose at least one fine-tuned model (run an evaluation below if there is none)"
        else:
            out[r] = vals, " · ".join(notes[r][i] for i in sorted(notes[r]))
    return out  # type: ignore[return-value]


def _finetuned_by_name(name: str, i: int, choices: list[tuple[str, str]]) -> str:
    """The folder of the fine-tuned model listed as ``name``; a bundled model, a run or a hub id is a pretrained
    encoder, which tags nothing until it is fine-tuned (it was refused as a path outside the allowed folders)."""
    name = name.strip()
    for label, path in choices:
        if name == label:
            return path
    raise DetourError(
        f"slot {i + 1}: '{name}' is not a fine-tuned NER model (a bundled model, a run or a hub id is a pretrained "
        "encoder): fine-tune it under Run an evaluation below, then pick the fine-tuned model here"
    )


def _slot_note(exc: Exception, i: int) -> str:
    return warn(exc) if str(exc).startswith(f"slot {i + 1}") else warn(f"slot {i + 1}: {exc}")


def _infer(groups: dict[Path, list[tuple[int, int]]], texts: list[str]) -> dict:
    """{(request, slot): spans or the DetourError it got}: one ``predict_entities_batch`` per model folder."""
    from backend.evaluation.predict import predict_entities_batch

    out: dict[tuple[int, int], list | DetourError] = {}
    for model_dir, members in groups.items():
        try:
            res = predict_entities_batch(model_dir, [texts[r] for r, _ in members])
        except DetourError as exc:  # the model does not load: every slot that asked for it says why
            res = [exc] * len(members)
        out.update(zip(members, res, strict=True))
    return out


NO_MODELS = (
    "**No fine-tuned NER model yet.** Open **Run an evaluation** below, pick one or more models (the bundled one "
    "works), keep the quick settings and press **Run evaluation**: each model is fine-tuned on the NER demo set, "
    "then appears in the slots above and in the F1 table. From a terminal: `python -m backend evaluate --task ner "
    "--models MODEL`."
)


def next_step(choices: list | None = None) -> str:
    """What a page with nothing to tag says to do (empty once a fine-tuned model exists)."""
    return NO_MODELS if not (finetuned_choices() if choices is None else choices) else ""


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


def build(ctx) -> dict:
    import gradio as gr

    from app.refresh import keep_fresh

    choices = finetuned_choices()
    text = gr.Textbox(value=EXAMPLE, label="Text", lines=3, elem_id="ner-text")
    with gr.Row():
        refresh = gr.Button("Refresh models", scale=0, min_width=200, elem_id="ner-refresh")
        go_btn = gr.Button("Tag entities", variant="primary", elem_id="ner-btn")
    slots, outs = [], []
    for first in range(0, SLOTS, 2):  # two slots a row: a model's name (model, seed, score, evaluation) fits whole
        with gr.Row(equal_height=False):
            for i in (first, first + 1):
                with gr.Column(min_width=220):
                    slots.append(
                        gr.Dropdown(
                            choices=choices,
                            value=default_slots([None] * SLOTS, choices)[i],
                            label=f"Fine-tuned model {i + 1}",
                            elem_id=f"ner-model-{i}",
                            elem_classes=["ner-slot"],
                            allow_custom_value=True,  # paths are checked by the handler
                        )
                    )
                    outs.append(
                        gr.HighlightedText(
                            label=f"Entities, model {i + 1}",
                            combine_adjacent=False,
                            show_legend=False,
                            show_inline_category=True,  # the entity type on the span itself
                            elem_id=f"ner-out-{i}",
                            elem_classes=["ner-spans"],
                        )
                    )
    msg = gr.Markdown("")
    hint = gr.Markdown(next_step, elem_id="ner-next-step")  # a fresh install: what to do first
    gr.Markdown("### Evaluations (test F1, mean over seeds)")
    table = gr.Dataframe(value=f1_table() or None, headers=F1_HEADERS, interactive=False)
    with gr.Accordion("Run an evaluation (NER demo set)", open=False, elem_id="ner-eval"):
        with gr.Row():
            ev_models = gr.Dropdown(
                choices=model_choices(),
                multiselect=True,
                label="Models",
                allow_custom_value=True,
                elem_id="ner-ev-models",
            )
            ev_seeds = gr.Textbox(value="0", label="Seeds", max_lines=1)
            ev_epochs = gr.Number(value=2, precision=0, label="Epochs (paper: 20)")
            ev_max = gr.Number(value=200, precision=0, label="Max training sentences (blank = all)")
        with gr.Row():
            ev_btn = gr.Button("Run evaluation", variant="primary", elem_id="ner-ev-btn")
            stop_btn = gr.Button("Stop", scale=0, min_width=100)
        ev_msg = gr.Markdown("", elem_id="ner-ev-msg")
        live_table = gr.Dataframe(  # shown once an evaluation runs, like the log
            headers=LIVE_HEADERS,
            interactive=False,
            label="Per epoch, as it trains",
            elem_id="ner-ev-epochs",
            visible=False,
        )
        live_log = gr.Textbox(
            label="Log", lines=6, max_lines=12, interactive=False, elem_id="ner-ev-log", visible=False
        )
    gr.HTML(head=WHOLE_WORDS_CSS)  # into the page's <head>, so the rule reaches the HighlightedText above

    def on_tag(texts, *dirs):
        """Gradio's batch: each input a list (one item per waiting request), one list per output back."""
        cols = [list(d) for d in dirs]
        answers = tag_many([(texts[r], [c[r] for c in cols]) for r in range(len(texts))])
        return [*[[vals[i] for vals, _ in answers] for i in range(SLOTS)], [m for _, m in answers]]

    gr.on(
        [go_btn.click, text.submit],
        on_tag,
        inputs=[text, *slots],
        outputs=[*outs, msg],
        batch=True,
        max_batch_size=MAX_BATCH,
        concurrency_limit=1,  # one batch at a time: the requests that arrive meanwhile form the next batch
        api_name="ner_tag",
    )

    def lists(*picks):
        """Every list this tab shows, read again: the fine-tuned models (empty slots take the defaults), the models
        to evaluate, the F1 table."""
        ch = finetuned_choices()
        values = default_slots(list(picks) or [None] * SLOTS, ch)
        return [
            *[gr.update(choices=ch, value=v) for v in values],
            gr.update(choices=model_choices()),
            f1_table() or None,
            next_step(ch),
        ]

    list_outs = [*slots, ev_models, table, hint]
    keep_fresh(lists, list_outs, inputs=slots, button=refresh)

    def on_eval(models, seeds, epochs, max_train, *picks):
        for live, final in evaluate_live(models, seeds, epochs, max_train):
            shown = [gr.update(value=live.table(), visible=True), gr.update(value=live.log(), visible=True)]
            if final is None:
                yield [f"**Running** · {md_escape(live.status)}", *shown, *[gr.skip()] * len(list_outs)]
            else:
                yield [final, *shown, *lists(*picks)]

    ev = ev_btn.click(
        on_eval,
        inputs=[ev_models, ev_seeds, ev_epochs, ev_max, *slots],
        outputs=[ev_msg, live_table, live_log, *list_outs],
        concurrency_limit=1,
        concurrency_id="analysis",
        show_progress="minimal",
        api_name="ner_evaluate",
    )
    stop_btn.click(None, cancels=[ev])
    return {"text": text, "outs": outs, "lists": lists}

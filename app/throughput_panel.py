"""The Runs tab's throughput panel: the doctor's diagnosis (``backend/runs/doctor.py``) of the run picked for the log:
tokens/s and MFU per phase, where the wall time goes, the ETA and the findings with the setting that fixes each;
below it, the newest evaluations' fine-tuning rate and seconds per seed."""

from __future__ import annotations

from app import md_escape
from app.figure_cache import FileKeyed
from backend.core import catalogue
from backend.core.errors import DetourError
from backend.core.paths import evals_dir, runs_dir
from backend.engine.config import check_run_name
from backend.engine.throughput import PART_LABELS, format_mfu, shares
from backend.evaluation.results_file import read_results
from backend.runs.doctor import diagnose, evaluation_throughput, phase_peak

DIAGNOSES = FileKeyed(16)  # one diagnosis per change of a run's files, shared by every page that polls it


def _rate(x: float | None) -> str:
    """tokens/s as the table prints it; '-' before a phase has a logged interval."""
    return "-" if x is None else f"{x:,.0f}"


def panel_markdown(name: str | None) -> str:
    """Markdown for one run; a plain sentence where there is nothing to diagnose yet."""
    if not name:
        from backend.engine.rundir import list_runs

        if not list_runs(runs_dir()):
            return "No runs yet: launch one on the **Launch** tab; its diagnosis shows here as it trains."
        return "Pick a run to see where its time goes."
    try:
        check_run_name(name)
    except DetourError as exc:
        return str(exc)
    d = runs_dir() / name
    if not (d / "metrics.jsonl").exists():
        return f"{name}: no metrics yet (the run has not started training)."
    doc = DIAGNOSES.get(str(d), (d / "metrics.jsonl", d / "status.json"), lambda: diagnose(d))
    if not doc["phases"]:
        return f"{name}: no training steps logged yet."
    m = doc["machine"]
    state = doc["state"] + (f": {doc['progress']['phase']}" if doc["progress"]["finishing"] else "")
    lines = [f"**{name}** ({state})" + (f" on {m.get('device')}, {m.get('precision')}" if m else ""), "",
             "| phase | objective | tok/s | MFU (of the peak, where from) | " + " | ".join(PART_LABELS.values()) + " |",
             "|---|---|---|---|" + "---|" * len(PART_LABELS)]  # fmt: skip
    for p in doc["phases"]:
        sh = shares(p["split"]) if p["split"] else {}
        cells = [f"{100 * sh[k]:.0f}%" if k in sh else "-" for k in PART_LABELS]
        mfu = format_mfu(p["mfu"], *phase_peak(p, m)).removeprefix("MFU ") if p["mfu"] is not None else "-"
        lines.append(
            f"| {p['phase']} | {p['objective']} | {_rate(p['tokens_per_s'])} | {mfu} | " + " | ".join(cells) + " |"
        )
    if doc.get("tokens_per_s"):  # the Runs table's tok/s: one definition (throughput.step_rate), one number
        lines.append(f"| whole run | | {doc['tokens_per_s']:,.0f} | | " + " | ".join("" for _ in PART_LABELS) + " |")
    if doc["state"] == "running":  # the Runs table's ETA: the same reading (engine.progress)
        lines += ["", f"ETA at the measured rate: **{doc['eta']}**"]
    lines += ["", "**Findings**" if doc["findings"] else "No finding: forward+backward holds the time."]
    lines += [f"- {f}: {fix}" for f, fix in doc["findings"]]
    lines += ["", f"The same from a terminal: `python -m backend doctor {name}`"]
    return "\n".join(lines)


def evaluations_markdown(limit: int = 5) -> str:
    """The newest evaluations' fine-tuning throughput (``python -m backend evaluate``): seconds per seed and rate."""
    found = list(reversed(catalogue.entries("evaluation", evals_dir(), read=read_results)))[:limit]
    lines, problems = [], []
    for entry in found:
        if not entry.readable:  # torn, foreign or linked out: said under the table, the others still listed
            problems.append(f"- ⚠ {md_escape(entry.name)}: unreadable: {md_escape(entry.problem)}")
            continue
        results = entry.value
        for e in evaluation_throughput(results):
            if e["seeds_done"]:
                tok = f"{e['padded_tokens_per_s']:,.0f}" if e["padded_tokens_per_s"] else "-"
                lines.append(f"| {entry.name} | {results.get('task')} | {e['label']} | "
                             f"{e['seeds_done']}/{e['seeds']} | {e['seconds_per_seed']:.0f} | "
                             f"{e['examples_per_s']:.1f} | {tok} | {e['device']} |")  # fmt: skip
    if not lines:
        return "\n".join(["No finished fine-tuning seed yet (NER tab, or `python -m backend evaluate`).", *problems])
    head = ["**Evaluation runs** (tokens/s: padded to max_len, an upper bound)", "",
            "| evaluation | task | model | seeds | s per seed | examples/s | tokens/s | device |",
            "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    return "\n".join(head + lines + ([""] + problems if problems else []))


def build(run_dropdown):
    """An accordion under the log: filled when a run is picked, as the run trains (the Runs tab's timer) and on
    Diagnose. Returns the diagnosis' Markdown (the timer's output)."""
    import gradio as gr

    from app.refresh import keep_fresh

    with gr.Accordion("Throughput: where the time goes (doctor)", open=False):
        md = gr.Markdown("Pick a run to see where its time goes.", elem_id="runs-throughput")
        btn = gr.Button("Diagnose", size="sm")
        evals = gr.Markdown("", elem_id="runs-eval-throughput")
    keep_fresh(evaluations_markdown, [evals])  # read when the tab is shown, not on every page's opening
    run_dropdown.change(panel_markdown, inputs=[run_dropdown], outputs=[md], show_progress="hidden",
                        api_name="throughput")  # fmt: skip
    btn.click(lambda name: (panel_markdown(name), evaluations_markdown()), inputs=[run_dropdown], outputs=[md, evals],
              api_visibility="private")  # fmt: skip
    return md

"""How long a study takes here, said before it runs, from rates this machine measured (``engine.rates``).

* **Training**: the runs' tokens at the training rate ``rates.pick`` trusts (the median of the comparable recent
  measurements at the study's sequence length and batch, calm ones preferred), side by side where each measured run
  had part of the cores, plus each run's start-up (process, model load, the step-0 evaluation, the final save):
  measured by the last study here (``record_trained``), else ``RUN_START_S``.
* **Fine-tuning and CKA**: seconds per fine-tune measured by the last studies here with the same fine-tuning settings
  (``record_measure_rate``: the measure step's wall time over the fine-tunes it ran, per process), else the fitted
  per-sentence rates (``FT_*``), scaled by ``--measure-jobs``.

Each part says what it stands on, so a plan is read with its source.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from backend.engine import rates

RUN_START_S = 8.0  # a run's start-up before one was measured here
FT_START_S, FT_TRAIN_S, FT_EVAL_S = 1.0, 0.03, 0.012  # fitted on the 6-layer base, 2 cores: a fine-tune's start,
# seconds per training sentence and epoch, per evaluated sentence (dev each epoch, test once)


def device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def training(n_params: int, precision: str | None, device: str, seq_len: int, batch_size: int, tokens: float,
             runs: int, slots: int) -> dict:  # fmt: skip
    """``{rate, pick, together, train_s, start_s, text}`` for ``runs`` runs of ``tokens`` in all; ``train_s`` None
    before any rate for this size and precision was measured here."""
    found = rates.pick(n_params, precision, device, seq_len=seq_len, batch_size=batch_size) if precision else None
    # Runs side by side add up only where the rate was one run on part of the cores (its threads recorded with it);
    # a rate measured on every core is the machine's whole throughput, shared by the runs.
    threads = found["threads"] if found else (os.cpu_count() or 1)
    together = max(1, min(slots, (os.cpu_count() or 1) // max(1, threads))) if device == "cpu" else 1
    start = run_start(n_params, device)
    out = {"rate": found["tokens_per_s"] if found else None, "pick": found, "together": together, "train_s": None,
           "start_s": start["seconds"], "start_text": start["text"]}  # fmt: skip
    if found:
        out["train_s"] = (tokens / found["tokens_per_s"] + runs * start["seconds"]) / together
    return out


def run_start(n_params: int, device: str) -> dict:
    rows = [
        r for r in rates.read("run_start") if r.get("size") == rates.size_key(n_params) and r.get("device") == device
    ]
    if not rows:
        return {"seconds": RUN_START_S, "text": f"{RUN_START_S:.0f} s a run to start (not measured here yet)"}
    recent = rows[-rates.RECENT :]
    sec = statistics.median(r["seconds"] for r in recent)
    return {"seconds": sec, "text": f"{sec:.0f} s a run to start (median of the last {len(recent)} studies here)"}


def finetune_key(tasks: list[dict]) -> list:
    """What a fine-tune's time depends on, per task: train cap, eval cap, epochs, max_len."""
    return [[t.get("max_train_examples"), t.get("max_eval_examples"), t.get("epochs"), t.get("max_len")]
            for t in tasks]  # fmt: skip


def finetune_seconds(tasks: list[dict], n_params: int, device: str) -> dict:
    """``{seconds, text}``: one fine-tune (the mean over ``tasks``, each its resolved settings) here."""
    key = finetune_key(tasks)
    rows = [r for r in rates.read("finetune") if r.get("key") == key and r.get("size") == rates.size_key(n_params)
            and r.get("device") == device]  # fmt: skip
    if rows:
        recent = rows[-rates.RECENT :]
        quiet = [r for r in recent if rates.calm(r)] or recent
        sec = statistics.median(r["seconds"] for r in quiet)
        when = recent[-1]["measured_at"].replace("T", " ")[:16]
        return {
            "seconds": sec,
            "measured": True,
            "text": f"{sec:.1f} s a fine-tune, measured by {len(quiet)} earlier studies here (the last {when})",
        }
    per = []
    for t in tasks:
        n_train, n_eval = t.get("max_train_examples") or 5400, t.get("max_eval_examples") or 940
        per.append(FT_START_S + t["epochs"] * (FT_TRAIN_S * n_train + FT_EVAL_S * n_eval) + FT_EVAL_S * n_eval)
    sec = statistics.fmean(per) / (10 if device == "cuda" else 1)
    return {
        "seconds": sec,
        "measured": False,
        "text": f"{sec:.1f} s a fine-tune at the fitted per-sentence rates (none measured here at these settings)",
    }


def suite_tasks(suite: str, overrides: dict) -> list[dict]:
    """Each task of ``suite`` with its settings as a study runs them (``overrides`` replace the suite's)."""
    from backend.evaluation.suite import load_suite

    out = []
    for t in load_suite(suite)["tasks"]:
        hp = {**t["hparams"], **{k: v for k, v in overrides.items() if k != "seeds"}}
        out.append({**hp, "seeds": int(overrides.get("seeds") or len(t["seeds"])), "name": t["name"]})
    return out


# ------------------------------------------------------------------------------------------------ what a study measured


def record_trained(n_params: int, device: str, sweep_dir: Path, since: float) -> None:
    """Each run's start-up, from the runs the sweep trained since ``since``: its wall time (launched to finished)
    less its tokens at its own logged rate; the median over them is kept (``run_start``)."""
    from backend.engine import rundir
    from backend.engine.throughput import step_rate
    from backend.sweeps.manifest import read_manifest

    m = read_manifest(sweep_dir)
    starts = []
    for c in m["cells"]:
        for run in c["runs"].values():
            d = sweep_dir / "runs" / run
            st = rundir.read_status(d)
            began, ended = st.get("launched_at") or st.get("started_at"), st.get("finished_at")
            if st.get("state") != "done" or not began or not ended or began < since:
                continue
            rate = step_rate([r for r in rundir.read_metrics(d) if r.get("type") == "train"])
            if rate:
                starts.append(max(0.0, ended - began - c["tokens"] / rate))
    if len(starts) >= 2:
        rates.record("run_start", size=rates.size_key(n_params), device=device, runs=len(starts),
                     seconds=round(statistics.median(starts), 2), load=rates.load_1m())  # fmt: skip


def record_measure_rate(n_params: int, sweep_dir: Path, seconds: float, jobs: int, tasks: list[dict]) -> None:
    """Seconds per fine-tune from a measure step that took ``seconds`` with ``jobs`` processes: the runs whose results
    it wrote (the others were measured before) times the fine-tunes each had, per process."""
    since = time.time() - seconds
    fresh = [p for p in (sweep_dir / "results").glob("*.json") if p.stat().st_mtime >= since]
    n = len(fresh) * sum(t["seeds"] for t in tasks)
    if n:
        rates.record("finetune", key=finetune_key(tasks), size=rates.size_key(n_params), device=device(), finetunes=n,
                     jobs=jobs, seconds=round(seconds * jobs / n, 3), load=rates.load_1m())  # fmt: skip

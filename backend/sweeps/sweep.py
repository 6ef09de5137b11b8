"""Run a sweep: write its folder, queue its cells, wait, resume after a crash, cancel, evaluate and report.

Layout of a sweep folder (default ``sweeps/<name>``, ``DETOUR_SWEEPS_DIR`` moves the root)::

    sweep.json        the manifest: base config, axes, seeds, reference, evaluation, executor, cells and their runs
    runs/<cell>-s<seed>   one run directory per (cell, seed); also the root of the sweep's own queue
    results/<run>.json    what the evaluation measured on that run (a cache: a rerun measures nothing twice)
    evals/<run>/          fine-tuning output (backend.evaluation) when the sweep fine-tunes
    report.md, report.html, report.json, figures/*.html|png

The cells go through the existing queue (``backend.runs.jobs``) rooted at ``runs/``: one detached worker, at
most ``max_concurrent`` runs at once, one run per GPU with ``pin_gpus``. With ``executor`` ``slurm`` or ``local``
each run is a submitit job instead (``backend.sweeps.cluster``). Nothing here trains in the calling process, so
a killed ``sweep --wait`` loses nothing: rerunning the same command (or ``--resume DIR``) re-queues what did not
finish and waits again.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from backend.core.errors import ConfigError, DetourError
from backend.core.paths import is_plain_name, sweeps_dir
from backend.engine import rundir
from backend.engine.config import load_config
from backend.sweeps.bound import MAX_RUNS, check_max_runs, check_size
from backend.sweeps.grid import (
    ARM_KEY,
    Axis,
    check_matched,
    check_packing_axes,
    compute_tokens,
    expand_cells,
    matched_sentence,
    parse_axis,
    run_config,
    seed_list,
)
from backend.sweeps.manifest import (
    MANIFEST,
    SweepError,
    all_terminal,
    cell_states,
    read_manifest,
    sweep_status,
    write_manifest,
)

VERSION = 1
EXECUTORS = ("queue", "local", "slurm")


def plan_sweep(
    config: str | Path | dict | None = None,
    sets: list[str] | tuple[str, ...] = (),
    grid: list[str] | tuple[str, ...] = (),
    seeds: int = 1,
    *,
    name: str | None = None,
    reference: str | None = None,
    allow_unmatched_budget: bool = False,
    evaluation: dict | None = None,
    executor: str = "queue",
    max_concurrent: int | None = None,
    pin_gpus: bool | None = None,
    slurm: dict | None = None,
    arms: dict[str, dict] | None = None,
    max_runs: int | None = MAX_RUNS,
) -> dict:
    """The manifest of a sweep, checked (every run config validates, the budgets are matched); nothing on disk.

    ``reference``: the value of the first axis every other value is compared with, within each value of the second
    axis (default: the first axis' first value). ``evaluation``: ``{"task": "ner"|"classification"|None, "data",
    "seeds", "hparams", "cka_texts", "cka_n_texts", "cka_max_len", "cka_measure"}``; the held-out MLM loss is always
    read. ``arms``: name -> overrides, the values of an ``arm`` axis (``grid.ARM_KEY``), kept in the manifest.
    ``pin_gpus`` None: pin one cell per GPU where this machine has GPUs; ``max_concurrent`` None: one cell per GPU
    when pinning, else 1 (on CPU the user sets the slots). ``max_runs``: the most runs the grid may make, checked
    from the axes before any run is planned (``bound.py``; None: a study that planned its own size)."""
    from backend.runs.gpus import visible_gpus

    if pin_gpus is None:
        pin_gpus = executor == "queue" and bool(visible_gpus())
    if max_concurrent is None:
        max_concurrent = len(visible_gpus()) if pin_gpus else 1
    if not grid:
        raise ConfigError("--grid", None, "give at least one axis, e.g. --grid phases.main.tokens=40960,81920")
    if len(grid) > 2:
        raise ConfigError("--grid", list(grid), "at most two axes (one line per value of the second)")
    if executor not in EXECUTORS:
        raise ConfigError("--executor", executor, f"one of {', '.join(EXECUTORS)}")
    if max_concurrent < 1:
        raise ConfigError("--max-concurrent", max_concurrent, "at least 1")
    base = load_config(config, list(sets))
    axes = [_arm_axis(g, arms) if g.startswith(f"{ARM_KEY}=") else parse_axis(g) for g in grid]
    if len({a.key for a in axes}) != len(axes):
        raise ConfigError("--grid", list(grid), "the same key twice")
    name = name or "-".join([base["name"], *(a.short for a in axes)])[:60]
    if not is_plain_name(name):
        raise ConfigError("--name", name, "a plain folder name: letters, digits, '_', '-', '.'")
    seeds_ = seed_list(base["train"]["seed"], seeds)
    check_size([len(a.values) for a in axes], len(seeds_), check_max_runs(max_runs))
    cells = expand_cells(axes)
    tokens, cfgs = {}, []
    for c in cells:
        for s in seeds_:
            cfg = run_config(base, c, s, name, arms)  # validates every run now, before anything is queued
            cfg["name"] = f"{c.slug}-s{s}"
            c.runs[s] = cfg["name"]
        tokens[c.index] = compute_tokens(cfg)
        cfgs.append(cfg)
    check_packing_axes(axes, cfgs, allow_unmatched_budget)
    matched = check_matched(axes, cells, tokens, allow_unmatched_budget)
    ref = _reference(axes, reference)
    base.pop("_meta", None)
    return {
        "version": VERSION,
        "name": name,
        "base": base,
        "sets": list(sets),
        "grid": list(grid),
        "axes": [{"key": a.key, "values": a.values} for a in axes],
        **({"arms": arms} if arms else {}),
        "seeds": seeds_,
        "reference": ref,
        "evaluation": _evaluation(evaluation),
        "executor": executor,
        "max_concurrent": max_concurrent,
        "pin_gpus": pin_gpus,
        "slurm": {**(base.get("slurm") or {}), **(slurm or {})},  # the config's slurm.* keys
        "matched": matched,
        "summary": matched_sentence(matched, len(seeds_)),
        "cells": [
            {
                "index": c.index,
                "label": c.label,
                "slug": c.slug,
                "values": c.values,
                "tokens": tokens[c.index],
                "runs": {str(s): r for s, r in c.runs.items()},
            }
            for c in cells
        ],
    }


def _arm_axis(item: str, arms: dict[str, dict] | None) -> Axis:
    """``arm=a,b,c``: the named override sets a study planned (``arms``), in that order."""
    if not arms:
        raise ConfigError("--grid", item, "'arm' is an axis a study plans (replicate), not one typed on --grid")
    names = [v.strip() for v in item.split("=", 1)[1].split(",")]
    if any(n not in arms for n in names) or len(set(names)) != len(names):
        raise ConfigError("--grid", item, f"each arm once, among the planned ones: {', '.join(arms)}")
    return Axis(ARM_KEY, names)


def _reference(axes, reference: str | None):
    first = axes[0]
    if reference is None:
        return first.values[0]
    from backend.engine.config import parse_override

    value = reference if first.key == ARM_KEY else parse_override(f"{first.key}={reference}")[1]
    if repr(value) not in {repr(v) for v in first.values}:
        raise ConfigError("--reference", reference, f"a value of the first axis {first.key}: {first.values}")
    return value


def _evaluation(ev: dict | None) -> dict:
    ev = dict(ev or {})
    task = ev.get("task")
    if task not in (None, "ner", "classification"):
        raise ConfigError("--eval", task, "ner or classification")
    if task and not ev.get("data"):
        raise ConfigError("--eval-data", None, f"--eval {task} needs a data folder")
    suite = ev.get("suite")
    if suite:  # checked now (every key of the file), not after the runs have trained
        from backend.evaluation.suite import load_suite

        suite = load_suite(suite)["path"]
    hparams = dict(ev.get("hparams") or {})
    if hparams and not task and not suite:
        raise ConfigError(
            "--eval-set", hparams, "fine-tuning settings need --eval ner, --eval classification or --eval-suite"
        )
    if suite and hparams:  # the suite's overrides (seeds, epochs, example caps): refused now if unknown or bad
        from backend.evaluation.suite import DEFAULT_KEYS, load_suite, with_overrides

        unknown = sorted(k for k in hparams if k not in DEFAULT_KEYS)
        if unknown:
            raise ConfigError("--eval-set", unknown, f"settings a suite takes: {', '.join(DEFAULT_KEYS)}")
        with_overrides(load_suite(suite), hparams)  # each value as every task's fine-tune reads it
    asked = ev.get("cka_measures") or ev.get("cka_measure")
    measures = [_cka_measure(x) for x in (asked if isinstance(asked, list | tuple) else [asked])]
    if len(set(measures)) != len(measures):
        raise ConfigError("--cka-measure", asked, "each measure once")
    if task:  # a misspelt or bad setting is refused now, not after every cell has trained
        from backend.evaluation.finetune import resolve_hparams

        try:
            resolve_hparams(task, **hparams)
        except ConfigError as exc:
            raise ConfigError(f"--eval-set {exc.key}", exc.value, exc.allowed) from None
    return {
        "suite": suite,
        "task": task,
        "data": str(ev["data"]) if ev.get("data") else None,
        "seeds": int(ev.get("seeds") or 3),
        "hparams": dict(ev.get("hparams") or {}),
        "cka_texts": str(ev["cka_texts"]) if ev.get("cka_texts") else None,
        "cka_n_texts": int(ev.get("cka_n_texts") or 100),
        "cka_max_len": int(ev.get("cka_max_len") or 128),
        "cka_measure": measures[0],
        "cka_measures": measures,
        "drop_weights": bool(ev.get("drop_weights")),
    }


def _cka_measure(measure: str | None) -> str:
    from backend.analysis.measures import DEFAULT_MEASURE, MEASURES

    if measure in (None, ""):
        return DEFAULT_MEASURE
    if measure not in MEASURES:
        raise ConfigError("--cka-measure", measure, "use one of " + ", ".join(MEASURES))
    return measure


# ------------------------------------------------------------------------------------------------ the folder


def default_out(name: str) -> Path:
    return sweeps_dir() / name


def _same_sweep(a: dict, b: dict) -> bool:
    keys = ("base", "axes", "seeds", "executor", "arms")
    return json.dumps([a.get(k) for k in keys], sort_keys=True, default=str) == json.dumps(
        [b.get(k) for k in keys], sort_keys=True, default=str
    )


def _nothing_prepared(out: Path, m: dict) -> bool:
    """True when no run of the sweep ``m`` in ``out`` was ever queued: its manifest can be replaced safely."""
    return all(state == "missing" for state in cell_states(out, m, jobs={}).values())


# ------------------------------------------------------------------------------------------------ launch / resume


def check_out(out: str | Path, flag: str = "--out", part_of: str | Path | None = None) -> Path:
    """The sweep folder ``--out`` names, refused before any planning or training when it cannot be one
    (``catalogue.check_out_folder``): a file, a link, a folder inside a run's folder (its runs would nest in
    another run's files), a folder that holds anything but a sweep (a user's report.md would be replaced), a new
    folder inside another artifact (a suite's ``tasks/``, another sweep's ``runs/``) unless it is ``part_of``'s."""
    from backend.core.catalogue import OutTaken, check_out_folder

    try:
        real = Path(out).expanduser().resolve() if not Path(out).is_symlink() else out
        return check_out_folder(real, "sweep", flag=flag, part_of=part_of)
    except OutTaken as exc:
        raise SweepError(str(exc)) from None


def check_one_run_per_cell(m: dict) -> None:
    """Refuse, before anything is written, a sweep whose cells have the recipe ``pair``: a pair trains two runs
    (``<name>-detour``, ``<name>-mlm``) where the sweep follows and measures one run per cell and seed, so it waited
    for runs that never came and its report was never written."""
    for c in m["cells"]:
        if c["values"].get("recipe", m["base"].get("recipe")) == "pair":
            raise SweepError(
                f"cell {c['label']}: recipe 'pair' trains two runs, and a sweep cell is one run; make the recipe an "
                "axis (recipe = mlm,clm_detour: each detour cell is compared with MLM, paired by seed) or set one "
                "recipe (recipe=clm_detour); nothing was written"
            )


def launch(m: dict, out: str | Path | None = None, part_of: str | Path | None = None) -> Path:
    """Write the sweep folder (or find the same sweep there) and queue every run that is not done or running.
    Rerunning with the same manifest resumes; a different sweep in the same folder is refused. ``part_of``: the
    study whose part the sweep is (its folder holds it)."""
    out = check_out(out or default_out(m["name"]), part_of=part_of)  # the default folder too: it may hold others
    check_one_run_per_cell(m)
    if m["executor"] == "slurm":  # before the folder is written: what is missing, in one line
        from backend.sweeps.cluster import check_sbatch

        check_sbatch()
    fresh = not (out / MANIFEST).exists()
    if not fresh:
        old = read_manifest(out)
        if _same_sweep(old, m):
            m = {**old, "state": "running", "max_concurrent": m["max_concurrent"], "pin_gpus": m["pin_gpus"]}
        elif _nothing_prepared(out, old):  # a launch that failed before any run: the corrected sweep replaces it
            m = {**m, "created_at": rundir.now(), "state": "running"}
        else:
            raise SweepError(
                f"{out} holds another sweep ({old['name']}: {old['grid']}) whose runs are already on disk; "
                "pick another --out, or delete that folder to start over"
            )
    else:
        existed = out.exists()
        out.mkdir(parents=True, exist_ok=True)
        m = {**m, "created_at": rundir.now(), "state": "running"}
    write_manifest(out, m)
    try:
        to_start = _queue_missing(out, m)
    except BaseException:
        if fresh:  # a run refused at its preflight: no folder says a sweep runs there, and the name stays free
            _unwrite(out, existed)
        raise
    # handed to an executor from here: a refused submission leaves its runs failed, for --resume and --cancel
    _start(out, m, to_start)
    return out


def _unwrite(out: Path, existed: bool) -> None:
    """Remove what a new sweep's refused launch wrote (its manifest and queued runs; nothing trained yet: no worker
    was started); the folder itself too when the launch made it."""
    shutil.rmtree(out / "runs", ignore_errors=True)
    (out / MANIFEST).unlink(missing_ok=True)
    if not existed and not any(out.iterdir()):
        out.rmdir()


def resume(out: str | Path) -> Path:
    """Re-queue what a killed or cancelled sweep left unfinished (the manifest says what it was)."""
    return launch(read_manifest(out), out)


def _queue_missing(out: Path, m: dict) -> list[Path]:
    """Queue every cell's run that is missing, failed or cancelled (each checked at its preflight as it is queued;
    what the preflight reads from files, once for the whole grid); returns the runs to start. Nothing runs yet."""
    from backend.runs import jobs
    from backend.runs.preflight import checks_once
    from backend.sweeps.grid import Cell

    root = out / "runs"
    states = cell_states(out, m)
    base = m["base"]
    to_start: list[Path] = []
    with checks_once():  # the model, tokenizer and corpus are checked once for the grid, not once per run
        for c in m["cells"]:
            cell = Cell(c["index"], c["values"], c["label"], c["slug"])
            for seed, r in c["runs"].items():
                d = root / r
                state = states[r]
                if state == "missing":
                    cfg = run_config(base, cell, int(seed), m["name"], m.get("arms"))
                    cfg["name"] = r
                    jobs.submit(cfg, root=root, start_worker=False)
                    to_start.append(d)
                elif state in ("failed", "cancelled"):
                    if rundir.read_status(d).get("state") == "running":  # killed without saying so
                        rundir.write_status(d, state="failed", error="the training process is gone (killed?)")
                    rundir.write_status(d, state="queued", resume_requested=True, error=None, queued_at=rundir.now(),
                                        launched_pid=None, cancel_requested=None)  # fmt: skip
                    to_start.append(d)
                elif state == "queued":
                    to_start.append(d)
    hashes = {r: h for c in m["cells"] for r in c["runs"].values()
              if (h := rundir.read_status(root / r).get("queued_config_sha256"))}  # fmt: skip
    if hashes != m.get("config_sha256"):  # the config each run was queued with (its report checks what ran)
        m["config_sha256"] = hashes
        write_manifest(out, m)
    return to_start


def _start(out: Path, m: dict, to_start: list[Path]) -> None:
    """Hand the queued runs to the sweep's executor (the queue worker, or Slurm)."""
    from backend.runs import jobs

    root = out / "runs"
    if not to_start:
        return
    if m["executor"] == "queue":
        jobs.ensure_worker(root, m["max_concurrent"], pin_gpus=m["pin_gpus"])
    else:
        from backend.sweeps.cluster import job_alive, job_states, submit_runs

        live = job_states(out) if m["executor"] == "slurm" else {}
        submit_runs(out, m, [d for d in to_start if not job_alive(out, d.name, live)])


def cancel(out: str | Path) -> list[str]:
    """Cancel every queued or running run of the sweep (running ones checkpoint first); finished ones stay."""
    from backend.runs import jobs

    out = Path(out)
    m = read_manifest(out)
    msgs = []
    if m["executor"] == "slurm":  # scancel: Slurm signals the trainers wherever they run
        from backend.sweeps.cluster import cancel_jobs

        msgs += cancel_jobs(out)
        m["state"] = "cancelled"
        write_manifest(out, m)
        return msgs
    for r, state in cell_states(out, m).items():
        if state in ("queued", "running"):
            try:
                msgs.append(jobs.cancel(out / "runs" / r))
            except jobs.JobError as exc:
                msgs.append(str(exc))
    m["state"] = "cancelled"
    write_manifest(out, m)
    return msgs


def wait(
    out: str | Path,
    poll_s: float = 2.0,
    timeout_s: float | None = None,
    progress: Callable[[dict], None] | None = None,
) -> dict:
    """Block until every run is done, failed or cancelled; keeps a queue worker alive (one killed meanwhile is
    replaced). Returns the final ``sweep_status``."""
    from backend.runs import jobs

    out = Path(out)
    t0 = time.time()
    last = None
    while True:
        st = sweep_status(out)
        if st["counts"] != last and progress:
            progress(st)
        last = st["counts"]
        if st["finished"]:
            return st
        if st["executor"] == "queue" and st["counts"].get("queued") and st.get("state") != "cancelled":
            jobs.ensure_worker(out / "runs", st["max_concurrent"], pin_gpus=st["pin_gpus"])
        elif st["executor"] != "queue":
            _fail_orphans(out, st["run_states"])
        if timeout_s is not None and time.time() - t0 > timeout_s:
            raise SweepError(f"{out}: still running after {timeout_s:.0f} s ({st['counts']})")
        time.sleep(poll_s)


def _fail_orphans(out: Path, states: dict[str, str]) -> None:
    """A queued run whose submitit job is gone (killed by the cluster before the trainer started) will never
    start: mark it failed so the sweep ends and ``--resume`` submits it again."""
    from backend.sweeps.cluster import job_alive

    if not any(state == "queued" for state in states.values()):
        return
    for run, state in states.items():
        if state == "queued" and not job_alive(out, run):
            time.sleep(1.0)  # a job that just started may be about to write "running"
            if rundir.read_status(out / "runs" / run).get("state") == "queued" and not job_alive(out, run):
                rundir.write_status(out / "runs" / run, state="failed", error="its submitit job ended without training")


def finish(out: str | Path, progress: Callable[[str], None] = print, jobs: int = 1) -> dict:
    """Evaluate every finished run (what ``evaluation`` asks for; ``jobs`` runs at once), then write the report.
    Returns the report."""
    from backend.sweeps.measure import measure_all
    from backend.sweeps.report import write_report

    out = Path(out)
    m = read_manifest(out)
    measure_all(out, m, progress, jobs=jobs)
    rep = write_report(out)
    states = cell_states(out, m)
    m["state"] = "done" if all(s == "done" for s in states.values()) else m.get("state", "running")
    if m["state"] == "running" and all_terminal(states):
        m["state"] = "incomplete"
    write_manifest(out, m)
    return rep


def run_sweep(m: dict, out: str | Path | None = None, wait_for: bool = True, progress=print) -> dict:
    """Launch (or resume) and, with ``wait_for``, wait and report: the one function the CLI and the app call."""
    out = launch(m, out)
    if not wait_for:
        return {"out": str(out), "report": None}
    wait(out, progress=lambda st: progress(f"{st['name']}: {_counts_line(st['counts'])}"))
    return {"out": str(out), "report": finish(out, progress)}


def _counts_line(counts: dict) -> str:
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def list_sweeps(root: str | Path | None = None) -> list[dict]:
    """Every sweep folder under the sweeps root, newest first (name, out, state, counts)."""
    root = Path(root) if root else sweeps_dir()
    out = []
    for p in sorted(root.glob(f"*/{MANIFEST}")) if root.exists() else []:
        try:
            st = sweep_status(p.parent)
        except (OSError, ValueError, KeyError, DetourError):
            continue
        out.append(
            {
                "name": st["name"],
                "out": str(p.parent),
                "state": st.get("state"),
                "counts": st["counts"],
                "created": st.get("created_at") or 0,
            }
        )
    return sorted(out, key=lambda s: s["created"], reverse=True)

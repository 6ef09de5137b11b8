"""What a sweep measures on each finished run, cached in ``results/<run>.json`` so a rerun measures nothing twice:

* ``heldout_mlm_loss``: the run's last held-out MLM loss (metrics.jsonl; the same masks in every run);
* ``heldout_clm_loss``: the run's last held-out next-token (causal) loss, the curve the detour lowers;
* ``finetune``: the mean test score over fine-tuning seeds (NER or classification, ``backend.evaluation``), with
  each fine-tuning seed's score (``finetune_by_seed``: the report pairs cells by pretraining x fine-tuning seed);
* ``suite``: with ``--eval-suite``, per task of the suite each fine-tuning seed's test score (``suite_scores``) and
  the seeds that gave one constant answer (``suite_constant``: a task where every run does measures nothing);
* ``cka_divergence``: mean over layers of 1 - CKA against the reference cell's run of the same seed
  (``backend.analysis``), when the sweep names held-out texts; ``cka_by_measure`` holds every measure asked
  (``cka_measures``: debiased, linear...) with its per-layer divergence.

With ``drop_weights`` in the evaluation, a run's weights (``final/``, ``checkpoints/``) are deleted once every
measurement of every run is cached: the folder then holds only small files (metrics, results, reports) and can be
copied back from a GPU box without its checkpoints.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from pathlib import Path

from backend.core import atomic
from backend.core.json_file import read_json_object
from backend.engine import rundir
from backend.evaluation.results_file import SCORES
from backend.evaluation.results_file import read_results as read_evaluation
from backend.sweeps.manifest import SweepError

METRICS = {  # name -> (label, higher is better)
    "heldout_mlm_loss": ("held-out MLM loss", False),
    "heldout_clm_loss": ("held-out CLM loss (next token)", False),
    "finetune": ("fine-tuned test score", True),
    "cka_divergence": ("CKA divergence from the reference (mean over layers)", None),
}


def heldout_loss(run_dir: Path, key: str = "eval_mlm_loss") -> float | None:
    evals = [r for r in rundir.read_metrics(run_dir) if r.get("type") == "eval" and r.get(key) is not None]
    return float(evals[-1][key]) if evals else None


def _progress(log: Callable[[str], None]) -> Callable[[dict], None]:
    """The evaluation's own lines (run, epoch, dev score, ETA) to the sweep's log; step events at most every 30 s."""
    last = [0.0]

    def on_event(ev: dict) -> None:
        import time

        if ev.get("event") != "step" or time.time() - last[0] > 30:
            last[0] = time.time()
            log(f"  {ev['message']}")

    return on_event


def _finetune(run_dir: Path, ev: dict, out_dir: Path, log: Callable[[str], None]) -> dict:
    from backend.evaluation.runner import evaluate_models

    res = evaluate_models(
        [str(run_dir)],
        task=ev["task"],
        data=ev["data"],
        seeds=ev["seeds"],
        out_dir=out_dir,
        labels=[run_dir.name],
        keep_models=False,
        progress=_progress(log),
        part_of=out_dir.parent.parent,  # the sweep: evals/<run> is its own part
        **ev["hparams"],
    )
    by_seed = _seed_scores(res)
    vals = list(by_seed.values())
    return {
        "finetune": statistics.fmean(vals) if vals else None,
        "finetune_metric": f"test {res['primary_metric']}",
        "finetune_seeds": vals,
        "finetune_by_seed": {str(k): v for k, v in by_seed.items()},
    }


def _seed_scores(res: dict) -> dict[int, float]:
    """Fine-tuning seed -> test score of the primary metric (0-1, as results.json holds it) of the one model."""
    primary = res["primary_metric"]
    runs = res["models"][0]["runs"]
    return {r["seed"]: r["test"][primary] for r in runs if r.get("status") == "ok" and primary in (r.get("test") or {})}


def _suite(run_dir: Path, ev: dict, out_dir: Path, log: Callable[[str], None]) -> dict:
    """Every task of the sweep's suite on this run (``evaluate_suite`` into ``evals/<run>``)."""
    from backend.evaluation.suite import evaluate_suite

    sweep = out_dir.parent.parent  # suites/<run> is the sweep's own part
    rep = evaluate_suite(ev["suite"], [str(run_dir)], out_dir, labels=[run_dir.name], progress=_progress(log),
                         keep_models=False, overrides=ev.get("hparams") or None, part_of=sweep)  # fmt: skip
    scores, constant = {}, {}
    for t in rep["tasks"]:
        res = read_evaluation(out_dir / "tasks" / t["name"] / "results.json", SCORES)
        scores[t["name"]] = {str(k): v for k, v in _seed_scores(res).items()}
        runs = [r for r in res["models"][0]["runs"] if r.get("status") == "ok"]
        constant[t["name"]] = [str(r["seed"]) for r in runs if (r.get("test") or {}).get("constant") is not None]
    return {"suite_scores": scores, "suite_metrics": {t["name"]: t["metric"] for t in rep["tasks"]},
            "suite_constant": constant}  # fmt: skip


def cka_asked(ev: dict) -> list[str]:
    """The CKA measures a sweep asks; a sweep planned before measures existed measured linear CKA, and keeps it."""
    return ev.get("cka_measures") or [ev.get("cka_measure") or "linear"]


def cka_measured(rec: dict) -> dict[str, dict]:
    """measure -> {mean, layers} a run's cached results hold (a result from before ``cka_by_measure``: its one)."""
    by = dict(rec.get("cka_by_measure") or {})
    if rec.get("cka_divergence") is not None and rec.get("cka_measure") and rec["cka_measure"] not in by:
        by[rec["cka_measure"]] = {"mean": rec["cka_divergence"], "layers": rec.get("cka_divergence_layers")}
    return by


def _cka(run_dir: Path, ref_dir: Path, ev: dict, rec: dict) -> dict:
    """1 - CKA per layer against the reference run, for every measure the sweep asks that ``rec`` lacks;
    ``cka_divergence`` (and its layers) stays the first measure's, as the tables read it."""
    from backend.analysis.api import cka_between

    measures, by = cka_asked(ev), cka_measured(rec)
    for measure in measures:
        if measure in by:
            continue
        r = cka_between(
            str(run_dir), str(ref_dir), ev["cka_texts"], n_texts=ev["cka_n_texts"], max_len=ev["cka_max_len"],
            measure=measure, baseline=False,
        )  # fmt: skip
        div = r.get("divergence")
        by[measure] = {"mean": statistics.fmean(div) if div else None, "layers": div}
    first = by[measures[0]]
    return {
        "cka_divergence": first["mean"],
        "cka_divergence_layers": first["layers"],
        "cka_measure": measures[0],
        "cka_by_measure": by,
    }


def suite_folder(out: Path, run: str) -> Path:
    """Where a run's suite evaluation goes: ``suites/<run>`` (its own folder: ``evals/<run>`` holds the run's
    single-task evaluation, another kind), or ``evals/<run>`` where a suite already ran before there."""
    from backend.core.catalogue import kind_of

    legacy = out / "evals" / run
    return legacy if kind_of(legacy) == "suite" else out / "suites" / run


def measure_run(out: Path, m: dict, run: str, ref_run: str | None, log: Callable[[str], None]) -> dict:
    """Everything the sweep asks of one finished run (cached per run; a new request fills only what is missing)."""
    d = out / "runs" / run
    cache = out / "results" / f"{run}.json"
    rec = _cached(cache, log)
    ev = m["evaluation"]
    rec["heldout_mlm_loss"] = heldout_loss(d)
    rec["heldout_clm_loss"] = heldout_loss(d, "eval_clm_loss")
    if ev["task"] and (rec.get("finetune") is None or "finetune_by_seed" not in rec):
        log(f"{run}: fine-tuning on {ev['task']} ({ev['seeds']} seeds)")
        rec.update(_finetune(d, ev, out / "evals" / run, log))  # finished seeds are reused (evaluate resumes)
    if ev.get("suite") and rec.get("suite_scores") is None:
        log(f"{run}: evaluating the suite {ev['suite']}")
        rec.update(_suite(d, ev, suite_folder(out, run), log))
    missing = [m for m in cka_asked(ev) if m not in cka_measured(rec)]
    if ev["cka_texts"] and ref_run and ref_run != run and missing:
        log(f"{run}: CKA ({', '.join(missing)}) against {ref_run}")
        rec.update(_cka(d, out / "runs" / ref_run, ev, rec))
    atomic.write_json(cache, rec)
    return rec


def _cached(cache: Path, log: Callable[[str], None]) -> dict:
    """A run's cached measurements; a torn or foreign cache file (edited by hand, cut by a full disk) is said and
    the run measured again (it was a JSONDecodeError or a TypeError at ``sweep --report``)."""
    if not cache.exists() and not cache.is_symlink():
        return {}
    try:
        return read_json_object(cache, SweepError, "a run's measurements", "the run is measured again")
    except SweepError as exc:
        log(str(exc))
        return {}


def _measure_one(args: tuple) -> tuple[str, dict]:
    out, m, run, ref = args
    return run, measure_run(out, m, run, ref, lambda line: print(line, flush=True))


def measure_all(out: Path, m: dict, log: Callable[[str], None] = print, jobs: int = 1) -> dict[str, dict]:
    """Measure every finished run; runs that did not finish are left out (the report says which). ``jobs`` > 1
    measures that many runs at once, each in its own process (each run writes only its own cache and eval folder)."""
    from backend.sweeps.manifest import cell_states

    states = cell_states(out, m)
    refs = reference_runs(m)
    todo = [(out, m, run, refs.get((_line_key(m, c), seed))) for c in m["cells"] for seed, run in c["runs"].items()
            if states[run] == "done"]  # fmt: skip
    res = {}
    if jobs > 1 and len(todo) > 1:
        import multiprocessing as mp

        threads = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 2) // jobs))  # the workers share the cores
        pool = mp.get_context("spawn").Pool(jobs)
        try:
            res = dict(pool.imap_unordered(_measure_one, todo))
            pool.close()
        except BaseException:  # a stopped study (a signal) ends its fine-tuning processes too, not after them
            pool.terminate()
            raise
        finally:
            pool.join()
            if threads is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = threads
    else:
        for out_, m_, run, ref in todo:
            res[run] = measure_run(out_, m_, run, ref, log)
    if m["evaluation"].get("drop_weights"):
        for run in res:  # after every run is measured: CKA reads the reference run's weights
            drop_weights(out / "runs" / run)
    return res


WEIGHT_DIRS = ("final", "checkpoints")


def drop_weights(run_dir: Path) -> int:
    """Delete a finished run's weights (``final/``, ``checkpoints/``), keeping its metrics, config and status;
    returns the bytes freed. Its cached results stay valid: the run is never measured again."""
    import shutil

    freed = 0
    for name in WEIGHT_DIRS:
        d = run_dir / name
        if d.is_dir():
            freed += sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
            shutil.rmtree(d)
    return freed


def _line_key(m: dict, cell: dict) -> str:
    """The cell's value on the second axis (its line in the figure); '' with one axis."""
    return repr(cell["values"][m["axes"][1]["key"]]) if len(m["axes"]) > 1 else ""


def reference_runs(m: dict) -> dict[tuple[str, str], str]:
    """(line, seed) -> the reference cell's run on that line and seed (the pairing of every delta)."""
    key = m["axes"][0]["key"]
    out = {}
    for c in m["cells"]:
        if repr(c["values"][key]) == repr(m["reference"]):
            for seed, run in c["runs"].items():
                out[(_line_key(m, c), seed)] = run
    return out


def read_results(out: Path) -> dict[str, dict]:
    """Every run's cached measurements, each checked: a torn or foreign file is one line naming it."""
    d = out / "results"
    fix = "delete it: python -m backend sweep --report measures the run again"
    return {p.stem: read_json_object(p, SweepError, "a run's measurements", fix)
            for p in sorted(d.glob("*.json"))} if d.exists() else {}  # fmt: skip

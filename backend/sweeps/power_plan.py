"""A planned study's smallest detectable difference, from the seed noise an earlier study measured here
(``sweeps.variance``) and the one rule's power (``evaluation.power``), and what it would take to detect a target.

Sources are the sweeps under the sweeps root, the studies under the reports root (their ``sweep``, ``splits`` and
``cpt`` folders) and the studies published with the code (``bench/results/crossover``). One whose tasks, fine-tuning
settings and base are the planned study's is **measured at these settings**; failing that, one that differs only in
its evaluation sentences is used with the evaluation share moved to the planned count (``power``'s binomial share,
an approximation, said so); failing that, nothing is claimed and a pilot is offered.
"""

from __future__ import annotations

import math
from pathlib import Path

from backend.core.paths import REPO_ROOT, reports_dir, sweeps_dir
from backend.evaluation import power
from backend.sweeps import variance

PUBLISHED = REPO_ROOT / "bench" / "results" / "crossover"
TARGET = 1.0  # points: what the plan says it would take to detect (the paper's English gains are +0.3 to +0.8)


def roots() -> list[Path]:
    return [sweeps_dir(), reports_dir(), PUBLISHED]


def sweep_folders() -> list[Path]:
    found = []
    for root in roots():
        if not root.is_dir():
            continue
        for pattern in ("*/sweep.json", "*/sweep/sweep.json", "*/splits/sweep.json", "*/cpt/sweep.json"):
            found += [p.parent for p in root.glob(pattern)]
    return sorted(set(found))


def _near(a: dict, b: dict) -> bool:
    """The same base, tasks and settings but the evaluation sentences."""
    strip = lambda sig: [(n, [kv for kv in st if kv[0] != "max_eval_examples"]) for n, st in sig["tasks"]]  # noqa: E731
    return a["model"] == b["model"] and strip(a) == strip(b)


def sources(sig: dict) -> tuple[list[dict], list[dict]]:
    """(measured at these settings, differing only in evaluation sentences), newest first."""
    exact, near = [], []
    for d in sweep_folders():
        got = variance.read(d)
        if got is None:
            continue
        if got["signature"] == sig:
            exact.append(got)
        elif _near(got["signature"], sig):
            near.append(got)
    key = lambda g: str(g.get("when") or "")  # noqa: E731
    return sorted(exact, key=key, reverse=True), sorted(near, key=key, reverse=True)


def _samples(tasks: list[dict]) -> dict[str, tuple[int, float]]:
    from backend.evaluation.eval_sample import task_samples

    return task_samples([{"name": t["name"], "task": t["task"], "data": t["data"],
                          "max_eval_examples": t["settings"].get("max_eval_examples")} for t in tasks])  # fmt: skip


def pooled(found: list[dict]) -> tuple[power.Components, list[dict]]:
    """The components of the sources' comparisons pooled (one comparison found in two studies counts once), with the
    evaluation share at the first source's sentences."""
    seen, groups, used = set(), [], []
    for src in found:
        new = [g for g in src["groups"] if variance.fingerprint(g) not in seen]
        seen |= {variance.fingerprint(g) for g in new}
        if new:
            groups += new
            used.append(src)
    first = used[0]
    samples = _samples(first["tasks"])
    names = [t["name"] for t in first["tasks"]]
    level = {n: sum(s["level"].get(n, 0) for s in used) / len(used) for n in names}
    c = power.components(groups, names, {k: v[0] for k, v in samples.items()}, {k: v[1] for k, v in samples.items()},
                         level)  # fmt: skip
    return c, used


def plan_power(tasks: list[dict], model: str | None, pretraining_seeds: int, finetune_seeds: int,
               target: float = TARGET) -> dict:  # fmt: skip
    """``{mde, how ('measured' | 'near' | None), sources, components, n_eval, take, text}`` for a study of
    ``pretraining_seeds`` x ``finetune_seeds`` on ``tasks`` (``variance.finetune_tasks``) from base ``model``."""
    sig = variance.signature(tasks, model)
    exact, near = sources(sig)
    out = {"mde": None, "how": None, "sources": [], "target": target, "design": {
        "pretraining_seeds": pretraining_seeds, "finetune_seeds": finetune_seeds, "tasks": len(tasks)}}  # fmt: skip
    found, how = (exact, "measured") if exact else (near[:1], "near") if near else ([], None)
    if not found:
        return out
    c, used = pooled(found)
    n_eval = {k: v[0] for k, v in _samples(tasks).items()}
    out.update(how=how, components=c, n_eval=n_eval, sources=[_name(s) for s in used])
    out["mde"] = power.detectable(c, pretraining_seeds, len(tasks), finetune_seeds, n_eval)
    out["take"] = take(c, pretraining_seeds, len(tasks), finetune_seeds, n_eval, tasks, target)
    return out


def take(c: power.Components, p: int, t: int, f: int, n_eval: dict, tasks: list[dict], target: float) -> dict:
    """What would detect ``target`` points: more pretraining seeds as planned; with 3 fine-tuning seeds and whole
    test splits; more tasks like these at ``p`` pretraining seeds (or the floor the pretraining variance sets)."""
    whole = {k: v[0] for k, v in _samples([{**x, "settings": {**x["settings"], "max_eval_examples": None}}
                                            for x in tasks]).items()}  # fmt: skip
    pre = max(p, 2)
    out = {
        "pretraining_seeds": power.smallest(lambda n: power.detectable(c, n, t, f, n_eval), target, pre),
        "finetune_seeds_3_whole": power.smallest(lambda n: power.detectable(c, n, t, max(f, 3), whole), target, pre),
        "whole_sentences": whole,
        "tasks": power.smallest(lambda n: power.detectable(c, pre, n, f, n_eval), target, t, limit=1000),
        "finetune_seeds": power.smallest(lambda n: power.detectable(c, pre, t, n, whole), target, f, limit=1000),
        "floor": power.floor(c, pre),
        "at_whole": power.detectable(c, pre, t, f, whole),
    }
    return out


def _name(src: dict) -> str:
    d = Path(src["dir"])
    try:
        return str(d.relative_to(REPO_ROOT))
    except ValueError:
        return str(d)


def sentences(n_eval: dict) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in n_eval.items()) or "as the tasks give"


def text(p: dict, pilot: str | None = None) -> str:
    """The plan's power in a few sentences: the detectable difference at these seeds, tasks and sentences, where the
    variance was measured, and what would detect ``target`` points; or that it is not known and how to measure it."""
    d = p["design"]
    at = (f"{d['pretraining_seeds']} pretraining seed{'s' if d['pretraining_seeds'] != 1 else ''} x "
          f"{d['finetune_seeds']} fine-tuning seed{'s' if d['finetune_seeds'] != 1 else ''} x {d['tasks']} "
          f"task{'s' if d['tasks'] != 1 else ''}")  # fmt: skip
    if p["mde"] is None:
        offer = f" A short pilot measures it: `{pilot}`." if pilot else ""
        return (f"Detectable difference: not known yet. No study with these tasks, fine-tuning settings and base has "
                f"been measured here, so the seed noise of {at} is unknown.{offer}")  # fmt: skip
    c, tk = p["components"], p["take"]
    where = ", ".join(f"`{s}`" for s in p["sources"])
    how = ("measured at these settings in " + where if p["how"] == "measured" else
           f"measured in {where} at other evaluation sentences, moved to these by the binomial share of "
           "entity-level F1 (an approximation)")  # fmt: skip
    mde = "no interval at all (one checkpoint and one fine-tuning seed)" if math.isinf(p["mde"]) else \
        f"±{p['mde']:.1f} points"  # fmt: skip
    apart = "" if c.finetune_measured else "; fine-tuning variance not measured apart: one fine-tuning seed"
    shares = c.finetune_at(p["n_eval"])
    ev = sum(shares.values()) / len(shares) - c.finetune
    parts = [f"Smallest detectable difference (80% power, 95% level, the report's rule): {mde} at {at}, "
             f"{sentences(p['n_eval'])} test sentences; seed noise {how} (variance per pretraining seed "
             f"{c.pretraining:.1f}, per task and pretraining seed {c.task:.1f}, per fine-tune {c.finetune:.1f} + "
             f"{ev:.1f} for the evaluation sample at these sentences, points^2{apart}).",
             "The paper's gains are +0.3 to +0.8 (English) and +1.2 to +2.8 points (French)."]  # fmt: skip
    target = p["target"]
    ways = []
    if tk["pretraining_seeds"]:
        ways.append(f"{tk['pretraining_seeds']} pretraining seeds as planned")
    if tk["finetune_seeds_3_whole"]:
        ways.append(f"{tk['finetune_seeds_3_whole']} pretraining seeds with {max(d['finetune_seeds'], 3)} fine-tuning "
                    f"seeds and whole test splits ({sentences(tk['whole_sentences'])})")  # fmt: skip
    pre = max(d["pretraining_seeds"], 2)
    if tk["finetune_seeds"]:
        ways.append(f"{tk['finetune_seeds']} fine-tuning seeds on whole test splits at {pre} pretraining seeds")
    else:
        ways.append(f"no number of fine-tuning seeds or test sentences at {pre} pretraining seeds")
    if tk["tasks"]:
        ways.append(f"{tk['tasks']} tasks like these at {pre} pretraining seeds")
    else:
        ways.append(f"no number of tasks at {pre} pretraining seeds (the pretraining variance alone sets a floor of "
                    f"±{tk['floor']:.1f} points)")  # fmt: skip
    parts.append(f"To detect {target:g} point: " + "; or ".join(ways) + f". Whole test splits alone: "
                 f"±{tk['at_whole']:.1f} points.")  # fmt: skip
    return " ".join(parts)

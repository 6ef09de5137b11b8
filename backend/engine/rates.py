"""The rates this machine measured (training tokens/s, seconds per fine-tune), kept so a run or a study is timed
before it runs, and the one way a plan picks the rate it trusts.

A training rate is recorded only from enough work to mean something: a phase's logged intervals after its first
(the warm-up: compiling, the step-0 evaluation, a resume's loading), at least ``MIN_STEPS`` optimizer steps in at
least ``MIN_INTERVALS`` intervals; the rate is their median. A 16-step run made while other work ran once timed a
study at six hours that took one. Each measurement is kept with what it depends on (model size, precision, device,
the CPU and its speed flags, objective, sequence length, batch, processes, threads) and with the machine's load
while it was measured (the 1-minute load average over the phase, and the CPU count), one JSON line per measurement
in ``<cache>/rates.jsonl``.

``pick`` is what a plan uses: the median of the newest ``RECENT`` comparable measurements (same size, precision,
device, CPU, sequence length and batch), of the calm ones where there are any (calm: the load never above the CPU
count, so every thread had a core), and it says which it used and when (``describe``). The older single-rate file
(``measured-rates.json``: one rate per size, of any length, load unknown) is not read.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import dataclass, field

from backend.core import atomic
from backend.core.paths import cache_dir

MIN_STEPS = 20  # optimizer steps after a phase's first logged interval
MIN_INTERVALS = 3  # logged intervals after the first: a median of fewer is one noisy number
RECENT = 8  # a plan's median is over at most this many newest comparable measurements
KEEP = 2000  # lines read back from the file (the newest)
FILE = "rates.jsonl"


def path():
    return cache_dir() / FILE


def load_1m() -> float | None:
    """The 1-minute load average, None where the OS has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def machine() -> str:
    """The CPU and the flags that decide its speed (two "AMD EPYC" hosts differ in exactly these)."""
    from backend.core.machine import cpu_name, cpu_speed_flags

    return f"{cpu_name()}|{','.join(cpu_speed_flags())}"


def size_key(n_params: int) -> int:
    """Model size rounded to 2 significant digits (a rate carries over between runs of one base model)."""
    digits = max(len(str(int(n_params))) - 2, 0)
    return int(round(int(n_params), -digits))


def record(kind: str, **fields) -> dict:
    """Append one measurement of ``kind`` ('train', 'finetune') with its time, machine and CPU count; returns it. A
    cache that cannot be written loses the measurement, never the run."""
    row = {"kind": kind, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": machine(),
           "cpus": os.cpu_count(), **fields}  # fmt: skip
    try:
        atomic.append_jsonl(path(), row)
    except OSError:
        pass
    return row


def read(kind: str) -> list[dict]:
    """The measurements of ``kind`` on this machine, oldest first (a torn last line is skipped)."""
    try:
        lines = path().read_text(encoding="utf-8").splitlines()[-KEEP:]
    except OSError:
        return []
    here, out = machine(), []
    for ln in lines:
        try:
            row = json.loads(ln)
        except ValueError:
            continue
        if isinstance(row, dict) and row.get("kind") == kind and row.get("machine") == here:
            out.append(row)
    return out


def calm(row: dict) -> bool:
    """Measured with every thread on a core of its own: the load average not above the CPU count."""
    load, cpus = row.get("load"), row.get("cpus")
    return isinstance(load, int | float) and isinstance(cpus, int) and load <= cpus


# ------------------------------------------------------------------------------------------------ training rates


@dataclass
class PhaseRates:
    """The training loop's meter: each logged interval's tokens, seconds, steps and the load then, per objective;
    ``record`` keeps the phase's rate when it has enough steps (the loop calls it at each phase's end)."""

    n_params: int
    precision: str
    device: str
    seq_len: int
    batch_size: int
    world: int
    threads: int
    intervals: dict = field(default_factory=dict)  # objective -> [(tokens, seconds, steps, load)]

    def add(self, objective: str, tokens: float, seconds: float, steps: int) -> None:
        self.intervals.setdefault(objective, []).append((tokens, seconds, steps, load_1m()))

    def record(self, objective: str) -> dict | None:
        """The phase's measurement, recorded, or None when it has too few steps after its first interval."""
        logged = self.intervals.pop(objective, [])[1:]
        steps = sum(i[2] for i in logged)
        if len(logged) < MIN_INTERVALS or steps < MIN_STEPS:
            return None
        loads = [i[3] for i in logged if i[3] is not None]
        return record("train", n_params=self.n_params, size=size_key(self.n_params), precision=self.precision,
                      device=self.device, objective=objective, seq_len=self.seq_len, batch_size=self.batch_size,
                      world=self.world, threads=self.threads, steps=steps, seconds=round(sum(i[1] for i in logged), 3),
                      tokens_per_s=round(statistics.median(i[0] / max(i[1], 1e-9) for i in logged), 1),
                      load=round(statistics.fmean(loads), 2) if loads else None)  # fmt: skip


def pick(n_params: int, precision: str, device: str, *, objective: str | None = None, seq_len: int | None = None,
         batch_size: int | None = None) -> dict | None:  # fmt: skip
    """The rate a plan uses for a model of this size, or None before one was measured here: the median of the newest
    comparable measurements, calm ones preferred (see the module). Without ``objective``, the slowest objective
    measured (an estimate errs long, never short). ``comparable`` False: none at this sequence length and batch
    (their rates stand in, and ``describe`` says so)."""
    rows = [r for r in read("train") if r.get("size") == size_key(n_params) and r.get("precision") == precision
            and r.get("device") == device]  # fmt: skip
    same = [r for r in rows if (seq_len is None or r.get("seq_len") == seq_len)
            and (batch_size is None or r.get("batch_size") == batch_size)]  # fmt: skip
    comparable = bool(same)
    rows = same or rows
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["objective"], []).append(r)
    if objective is not None:
        by = {objective: by[objective]} if objective in by else {}
    picks = [_median_pick(o, rs) for o, rs in by.items()]
    if not picks:
        return None
    best = min(picks, key=lambda p: p["tokens_per_s"])
    return {**best, "comparable": comparable, "want": {"seq_len": seq_len, "batch_size": batch_size}}


def _median_pick(objective: str, rows: list[dict]) -> dict:
    recent = rows[-RECENT:]
    quiet = [r for r in recent if calm(r)]
    used = quiet or recent
    return {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in used), "objective": objective,
            "n": len(used), "calm": bool(quiet), "skipped_loaded": len(recent) - len(used), "rows": used,
            "threads": max(int(r.get("threads") or 1) for r in used)}  # fmt: skip


def describe(p: dict) -> str:
    """'median of 4 calm rates (MLM, seq 64 x batch 4, 1 thread), measured 2026-11-26 18:02 to 2026-11-27 00:40
    under load 1.3-1.9 on 2 CPUs': what a plan's training time stands on."""
    rows = p["rows"]
    when = sorted(r["measured_at"].replace("T", " ")[:16] for r in rows)
    span = when[0] if when[0] == when[-1] else f"{when[0]} to {when[-1]}"
    loads = [r["load"] for r in rows if r.get("load") is not None]
    load = (f"load {min(loads):.1f}" + (f"-{max(loads):.1f}" if max(loads) > min(loads) else "") if loads
            else "load unknown") + f" on {rows[-1].get('cpus')} CPUs"  # fmt: skip
    shape = {(r.get("seq_len"), r.get("batch_size"), r.get("threads")) for r in rows}
    shapes = ", ".join(f"seq {s} x batch {b}, {t} thread{'s' if t != 1 else ''}" for s, b, t in sorted(shape, key=str))
    plural = "s" if p["n"] > 1 else ""
    what = f"{'the' if p['n'] == 1 else 'median of'} {p['n']} {'calm ' if p['calm'] else ''}rate{plural}"
    text = f"{what} ({str(p['objective']).upper()}, {shapes}) measured {span} under {load}"
    if not p["calm"]:
        text += "; every one under load (a quiet machine is faster)"
    elif p["skipped_loaded"]:
        text += f"; {p['skipped_loaded']} measured under load left out"
    want = p.get("want") or {}
    if not p.get("comparable", True) and want.get("seq_len"):
        text += f"; none measured at this plan's seq {want['seq_len']} x batch {want['batch_size']}"
    return text

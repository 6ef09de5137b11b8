"""Where a run stands, read once: its state, phase, step, tokens, rate and ETA. The Runs table, the doctor (its
CLI report and the Runs tab's throughput panel) all show this dict, so one run has one ETA and one tokens/s wherever
it is written, and a run that has trained its last step but is still evaluating and saving says so in both.

The ETA is the tokens still to train over the newest phase's effective rate (tokens over wall time, evaluation and
checkpoints included: the time the run will really take), else its bare step rate; the tokens/s is the whole run's
``throughput.step_rate``."""

from __future__ import annotations

from collections.abc import Sequence

from backend.engine.throughput import step_rate

FINISHING = "final evaluation and save"  # every step trained, the trainer has not written its end yet


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def phase_groups(rows: Sequence[dict]) -> list[tuple[list[dict], float]]:
    """metrics.jsonl's train rows split by phase, each with the tokens seen where its first interval began (a
    resumed run's first process began at its checkpoint's step, which its first ``machine`` row records). A row
    without a numeric step and tokens_seen (a hand-edited file) is left out, never a crash of the Runs table."""
    train = [r for r in rows if r.get("type") == "train" and _number(r.get("tokens_seen")) and _number(r.get("step"))]
    first_machine = next((r for r in rows if r.get("type") == "machine"), {})
    per_step = train[0]["tokens_seen"] / train[0]["step"] if train and train[0].get("step") else 0
    before = (first_machine.get("step") if _number(first_machine.get("step")) else 0) * per_step
    groups: list[tuple[list[dict], float]] = []
    current: list[dict] = []
    for r in train:
        if current and r.get("phase") != current[-1].get("phase"):
            groups.append((current, before))
            before, current = current[-1]["tokens_seen"], []
        current.append(r)
    if current:
        groups.append((current, before))
    return groups


def effective_rate(rows: Sequence[dict], tokens_before: float) -> float | None:
    """tokens/s over wall time of one phase's train rows (evaluation and checkpoints included), None without a
    logged split."""
    splits = [r.get("time_split") for r in rows]
    wall = sum(w for x in splits if isinstance(x, dict) and _number(w := x.get("wall")))
    tokens = rows[-1]["tokens_seen"] - tokens_before if rows else 0
    return tokens / wall if wall and tokens > 0 else None


def run_progress(status: dict, rows: Sequence[dict]) -> dict:
    """``status`` (as ``rundir.read_status`` gives it: a gone process already reads failed) and the run's
    metrics.jsonl rows -> {state, phase, finishing, step, total_steps, tokens_seen, total_tokens, tokens_per_s,
    eta_s}. ``eta_s`` is 0 for a done run, None while not running, finishing, or before a rate is logged."""
    state = status.get("state", "unknown")
    tokens, total = status.get("tokens_seen"), status.get("total_tokens")
    groups = phase_groups(rows)
    train = [r for g, _ in groups for r in g]
    finishing = state == "running" and bool(total) and tokens is not None and tokens >= total
    eta = None
    if state == "done":
        eta = 0.0
    elif state == "running" and not finishing and groups:
        newest, before = groups[-1]
        rate = effective_rate(newest, before) or step_rate(newest)
        left = (total or 0) - (tokens or 0)
        eta = left / rate if rate and left > 0 else None
    return {
        "state": state,
        "phase": FINISHING if finishing else status.get("phase") or "",
        "finishing": finishing,
        "step": status.get("step"),
        "total_steps": status.get("total_steps"),
        "tokens_seen": tokens,
        "total_tokens": total,
        "tokens_per_s": step_rate(train),
        "eta_s": eta,
    }


def hms(seconds: float | None) -> str:
    """12m05s / 1h02m; 'unknown' for None."""
    if seconds is None:
        return "unknown"
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def eta_text(p: dict) -> str:
    """The ETA as the table and the panel both print it: '' when the run is not running, 'finishing' once every
    step is trained, '…' before a rate is logged."""
    if p["state"] != "running":
        return ""
    if p["finishing"]:
        return "finishing"
    return "…" if p["eta_s"] is None else hms(p["eta_s"])

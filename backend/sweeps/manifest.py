"""The sweep folder's manifest (``sweep.json``) and what its runs' states are: the bottom of ``backend.sweeps``,
read by the launcher, the measurements, the report and the app alike."""

from __future__ import annotations

import json
from pathlib import Path

from backend.core import atomic
from backend.core.errors import DetourError
from backend.core.process import pid_alive
from backend.engine import rundir

MANIFEST = "sweep.json"
TERMINAL = ("done", "failed", "cancelled")


class SweepError(DetourError):
    pass


def read_manifest(out: str | Path) -> dict:
    p = Path(out) / MANIFEST
    if not p.exists():
        raise SweepError(f"{out}: not a sweep folder (no {MANIFEST})")
    return json.loads(p.read_text())


def write_manifest(out: Path, m: dict) -> None:
    atomic.write_json(out / MANIFEST, m)


def run_names(m: dict) -> list[str]:
    return [r for c in m["cells"] for r in c["runs"].values()]


def cell_states(out: str | Path, m: dict | None = None) -> dict[str, str]:
    """Run name -> state (``missing`` for a run not prepared yet); a running run whose process is gone reads
    ``failed``: its trainer was killed (kill -9, a reboot) without writing so."""
    out = Path(out)
    m = m or read_manifest(out)
    states = {}
    for r in run_names(m):
        d = out / "runs" / r
        if not (d / "config.yaml").exists():
            states[r] = "missing"
            continue
        st = rundir.read_status(d)
        state = st.get("state", "queued")
        if state == "running" and not pid_alive(st.get("pid")):
            state = "failed"
        states[r] = state
    return states


def sweep_status(out: str | Path) -> dict:
    """The manifest with each cell's run states and counts: what the CLI prints and the app's Sweeps view shows."""
    out = Path(out)
    m = read_manifest(out)
    states = cell_states(out, m)
    counts: dict[str, int] = {}
    for s in states.values():
        counts[s] = counts.get(s, 0) + 1
    for c in m["cells"]:
        c["states"] = {seed: states[r] for seed, r in c["runs"].items()}
    return {**m, "out": str(out), "run_states": states, "counts": counts, "finished": all_terminal(states)}


def all_terminal(states: dict[str, str]) -> bool:
    return all(s in TERMINAL for s in states.values())

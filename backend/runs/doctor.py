"""The doctor: where a run's time goes, read from its run directory, with plain findings and the setting that fixes
each. ``python -m backend doctor RUN`` prints ``report(diagnose(run))``; the Runs tab's throughput panel shows the
same dict. Everything comes from files the loop writes (metrics.jsonl's ``train`` rows carry ``time_split`` and
``mfu``, its ``machine`` row the peak and FLOPs per token; config.yaml's ``_meta`` what this machine resolved), so
the doctor runs anywhere the run directory is, also while the run trains.

``launch_estimate`` is the same ETA before a run exists: its tokens over the rate this machine measured for a model of
that size at that sequence length and batch (``engine/rates.pick``: the median of the recent comparable ones, calm
ones preferred; the loop records one at each phase end that had enough steps).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from backend.engine.progress import effective_rate, eta_text, hms, phase_groups, run_progress
from backend.engine.rundir import read_config, read_metrics, read_status
from backend.engine.throughput import PART_LABELS, PARTS, format_mfu, format_split, shares, step_rate

# Thresholds of the findings: a share of the wall time above these is worth a setting.
DATA_SHARE = 0.15
EVAL_SHARE = 0.10
OTHER_SHARE = 0.20
CHECKPOINT_STALL_S = 1.0
# bench/results/attention_cpu.md: flex_attention vs sdpa, CLM forward, detour-tiny-en, seq 2048 (window 64): 1.47x;
# at 512 tokens no gain (0.97x). The GPU kernels differ, the saving (blocks outside the window skipped) is the same.
FLEX_SPEEDUP = {2048: 1.47, 512: 0.97}
# train.compile's measured gain on a CPU, per precision (a bf16 figure is never the yardstick of an fp32 run):
# bench/results/train.run1.json (AVX512-BF16 CPU, bf16): 6,501 vs 5,420 tok/s MLM.
COMPILE_SPEEDUP_CPU = {"bf16": (1.2, "bench/results/train.run1.json, a CPU with AVX512-BF16")}
# A running run is "slowed" when the median of its last RECENT logged intervals is below SLOWED of the median of the
# phase's earlier ones; then the CPU use of the app that serves its runs folder and of the other processes is
# measured over CPU_SAMPLE_S, and a user of BUSY_CORES or more is named as the cause.
SLOWED, RECENT, CPU_SAMPLE_S, BUSY_CORES = 0.7, 5, 0.5, 0.25


def _phase_stats(rows: list[dict], tokens_before: float) -> dict:
    """tokens/s (median of the logged intervals, the first one left out where there are others: warm-up), MFU,
    the summed split and the effective rate (tokens over wall time, evaluation and checkpoints included)."""
    mfus = [r["mfu"] for r in rows if isinstance(r.get("mfu"), int | float)]
    mfus = mfus[1:] or mfus
    peak = next((r for r in reversed(rows) if r.get("peak_flops")), {})  # the peak the newest MFU was taken against
    split = {k: 0.0 for k in (*PARTS, "other", "wall", "n_eval", "n_checkpoint")}
    for r in rows:
        parts = r.get("time_split")
        for k, v in (parts if isinstance(parts, dict) else {}).items():
            if isinstance(v, int | float):  # a hand-edited row's text is left out, as engine.progress leaves it
                split[k] = split.get(k, 0.0) + v
    first = rows[0]
    return {
        "phase": first["phase"],
        "objective": first.get("objective"),
        "steps": (first["step"], rows[-1]["step"]),
        "logged": len(rows),
        "tokens_per_s": step_rate(rows),
        "mfu": statistics.median(mfus) if mfus else None,
        "peak_flops": peak.get("peak_flops"),
        "peak_source": peak.get("peak_source"),
        "split": split if split["wall"] else None,
        "effective_tokens_per_s": effective_rate(rows, tokens_before),
    }


def diagnose(run_dir: str | Path) -> dict:
    """{'run', 'state', 'machine', 'phases': [...], 'split', 'eta_s', 'findings': [(finding, fix), ...]}."""
    run_dir = Path(run_dir)
    cfg, status = read_config(run_dir), read_status(run_dir)
    rows = read_metrics(run_dir)
    progress = run_progress(status, rows)
    machine = next((r for r in reversed(rows) if r.get("type") == "machine"), {})
    phases = [_phase_stats(group, before) for group, before in phase_groups(rows)]
    total = {k: 0.0 for k in (*PARTS, "other", "wall", "n_eval", "n_checkpoint")}
    for p in phases:
        for k, v in (p["split"] or {}).items():
            total[k] = total.get(k, 0.0) + v
    out = {
        "run": run_dir.name,
        "state": status.get("state", "unknown"),
        "machine": machine,
        "phases": phases,
        "split": total if total["wall"] else None,
        "eta_s": progress["eta_s"],  # the Runs table's ETA and tok/s: one reading (engine.progress)
        "eta": eta_text(progress),
        "tokens_per_s": progress["tokens_per_s"],
        "tokens_seen": status.get("tokens_seen"),
        "total_tokens": status.get("total_tokens"),
        "progress": progress,
    }
    out["findings"] = findings(cfg, machine, out["split"])
    out["slowdown"] = slowdown(rows) if out["state"] == "running" else None
    if out["slowdown"]:
        out["slowdown"].update(cpu_users(run_dir.parent, status.get("pid")))
        out["findings"].insert(0, slowdown_finding(out["slowdown"]))
    return out


def slowdown(rows: list[dict]) -> dict | None:
    """{'recent', 'earlier', 'ratio', 'intervals'}: the current phase's last ``RECENT`` logged rates against its
    earlier ones (the first, the warm-up, left out); None when the run keeps its pace or has logged too little."""
    groups = phase_groups(rows)
    if not groups:
        return None
    rates = [r["tokens_per_s"] for r in groups[-1][0] if isinstance(r.get("tokens_per_s"), int | float)][1:]
    if len(rates) < RECENT + 3:
        return None
    recent, earlier = statistics.median(rates[-RECENT:]), statistics.median(rates[:-RECENT])
    if not earlier or recent >= SLOWED * earlier:
        return None
    return {"recent": recent, "earlier": earlier, "ratio": recent / earlier, "intervals": RECENT}


def cpu_users(runs_root: Path, trainer_pid: object, seconds: float = CPU_SAMPLE_S) -> dict:
    """Who uses the cores now, over ``seconds``: {'cores', 'app_pid', 'app_cores', 'others_cores'} (the app is the
    one holding ``runs_root/.app.lock``; 'others' is every process but the trainer and the app)."""
    import psutil

    from backend.core.inference_lane import app_pid

    pid = app_pid(runs_root)
    procs: dict[str, psutil.Process | None] = {}
    for who, p in (("app", pid), ("trainer", trainer_pid)):
        try:
            procs[who] = psutil.Process(p) if isinstance(p, int) else None
            if procs[who] is not None:
                procs[who].cpu_percent(None)  # the first call starts the count
        except psutil.Error:
            procs[who] = None
    psutil.cpu_percent(None)
    time.sleep(seconds)
    total = psutil.cpu_percent(None) / 100 * (psutil.cpu_count() or 1)
    used = {}
    for who, proc in procs.items():
        try:
            used[who] = proc.cpu_percent(None) / 100 if proc else 0.0
        except psutil.Error:
            used[who] = 0.0
    return {"cores": psutil.cpu_count() or 1, "app_pid": pid if procs["app"] else None, "app_cores": used["app"],
            "others_cores": max(0.0, total - used["app"] - used["trainer"])}  # fmt: skip


def slowdown_finding(s: dict) -> tuple[str, str]:
    """The slowdown as a finding: what fell, by how much, and who holds the cores now."""
    from backend.core.inference_lane import settings

    fell = (f"the run slowed to {s['recent']:,.0f} tok/s over its last {s['intervals']} logged steps, "
            f"{100 * s['ratio']:.0f}% of its earlier {s['earlier']:,.0f} tok/s")  # fmt: skip
    if s.get("app_pid") and s["app_cores"] >= BUSY_CORES:
        lane = settings()
        return (f"{fell}: the app (pid {s['app_pid']}) uses {s['app_cores']:.1f} of the {s['cores']} cores now",
                f"the app's model inference runs {lane['threads']} thread(s) at nice {lane['nice']}: to favour the "
                f"run, restart the app with DETOUR_APP_THREADS=1 in its own session (setsid) with a higher "
                f"DETOUR_APP_SESSION_NICE (now {lane['session_nice']}, up to 19: its users then wait longer), or serve "
                f"its users from another machine")  # fmt: skip
    if s["others_cores"] >= BUSY_CORES:
        return (f"{fell}: other processes use {s['others_cores']:.1f} of the {s['cores']} cores now",
                "the machine is shared: train when it is quieter, or with fewer other jobs on it")  # fmt: skip
    return (f"{fell}, with nothing else busy now", "look at the run's time split above (data wait, evaluation)")


def findings(cfg: dict, machine: dict, split: dict | None) -> list[tuple[str, str]]:
    """Plain findings, each with the setting that fixes it; the biggest costs first."""
    out: list[tuple[float, str, str]] = []
    meta = cfg.get("_meta", {})
    train, log_cfg = cfg.get("train", {}), cfg.get("logging", {})
    device = str(machine.get("device", "cpu")).split(":")[0]
    seq = train.get("seq_len") or 0
    if split:
        sh = shares(split)
        if sh["data"] >= DATA_SHARE:
            out.append((sh["data"], f"{100 * sh['data']:.0f}% of the step waits for data",
                        "the batches are read in the training loop from the token store: prepare it ahead "
                        "(python -m backend prepare-data CONFIG) on a local disk (DETOUR_CACHE_DIR), not a network "
                        "share; with other jobs on the machine, fewer of them"))  # fmt: skip
        if sh["eval"] >= EVAL_SHARE:
            out.append((sh["eval"], f"held-out evaluation takes {100 * sh['eval']:.0f}% of the wall time",
                        f"raise logging.eval_every (now {log_cfg.get('eval_every')}) or lower logging.eval_batches "
                        f"(now {log_cfg.get('eval_batches')})"))  # fmt: skip
        n_ck = split.get("n_checkpoint") or 0
        if n_ck and split["checkpoint"] / n_ck >= CHECKPOINT_STALL_S:
            each = split["checkpoint"] / n_ck
            out.append((sh["checkpoint"], f"checkpoint writes stall {each:.1f} s each "
                        f"({100 * sh['checkpoint']:.0f}% of the wall time)",
                        f"raise logging.checkpoint_every (now {log_cfg.get('checkpoint_every')}); a phase end always "
                        "waits for its checkpoint"))  # fmt: skip
        if sh["other"] >= OTHER_SHARE:
            out.append((sh["other"], f"{100 * sh['other']:.0f}% of the wall time is outside data, compute, "
                        "evaluation and checkpoints (logging, trackers, checks)",
                        f"raise logging.log_every (now {log_cfg.get('log_every')}) or drop logging.report_to "
                        "trackers"))  # fmt: skip
    attn = (meta.get("attn_implementation") or {}).get("resolved") or cfg.get("model", {}).get("attn_implementation")
    if attn == "eager":
        out.append((0.3, "attention is eager", "model.attn_implementation=sdpa (1.3-1.9x in "
                    "bench/results/attention_cpu.md)"))  # fmt: skip
    elif attn == "sdpa" and device == "cuda" and seq >= 1024:
        gain = FLEX_SPEEDUP[2048] if seq >= 2048 else (FLEX_SPEEDUP[2048] + 1) / 2
        out.append((gain - 1, f"attention is sdpa: flex_attention would give about {gain:.1f}x at {seq} tokens "
                    "(measured in bench/results/attention_cpu.md: 1.47x at 2048, none at 512)",
                    "model.attn_implementation=flex_attention (or auto)"))  # fmt: skip
    compiled = (meta.get("compile") or {}).get("resolved", train.get("compile"))
    precision = machine.get("precision") or (meta.get("precision") or {}).get("resolved")
    if compiled is False:
        gain = COMPILE_SPEEDUP_CPU.get(precision) if device == "cpu" else None
        if device == "cuda":
            out.append((0.15, "compile is off", "train.compile=true: on a GPU, where it also fuses the kernels"))
        elif gain:
            out.append((gain[0] - 1, "compile is off", f"train.compile=true: about {gain[0]}x in {precision} on a "
                        f"CPU ({gain[1]}); the first steps pay the compiling (~45 s, then cached)"))  # fmt: skip
        else:
            out.append((0.01, "compile is off", f"train.compile=true may help; its gain in {precision} on a CPU is "
                        "not measured (python bench/bench_train.py --compile measures it on this machine); the first "
                        "steps pay the compiling (~45 s, then cached)"))  # fmt: skip
    if device == "cuda" and precision == "fp32" and machine.get("bf16_supported"):
        out.append((0.5, "precision fp32 on a GPU with bf16", "train.precision=bf16 (or auto): ~10x the matmul peak"))
    elif device == "cpu" and precision == "fp32" and (machine.get("bf16_speedup") or 0) >= 1.25:
        out.append((0.4, f"precision fp32 on a CPU whose bf16 matmuls run {machine['bf16_speedup']:.1f}x faster",
                    "train.precision=auto (picks bf16 here)"))  # fmt: skip
    return [(f, fix) for _, f, fix in sorted(out, key=lambda t: -t[0])]


def phase_peak(phase: dict, machine: dict) -> tuple[float | None, str | None]:
    """(FLOP/s, source) a phase's MFU was taken against: its rows' peak, else (runs from before peaks were bounded)
    the machine row's."""
    if phase.get("peak_flops"):
        return phase["peak_flops"], phase.get("peak_source")
    return machine.get("peak_flops"), machine.get("peak_source")


def report(d: dict) -> str:
    """The doctor's diagnosis as plain text (the CLI's output)."""
    m = d["machine"]
    lines = [f"run {d['run']} ({d['state']})"]
    if m:
        lines.append(f"machine: {m.get('device')} x{m.get('world', 1)}, {m.get('precision')}, "
                     f"{m.get('parameters', 0) / 1e6:.1f}M parameters")  # fmt: skip
    if not d["phases"]:
        lines.append("no training steps logged yet")
    for p in d["phases"]:
        mfu = format_mfu(p["mfu"], *phase_peak(p, m))
        split = f"; {format_split(p['split'])}" if p["split"] else " (no time split: a run from before the doctor)"
        lines.append(f"phase {p['phase']} ({p['objective']}), steps {p['steps'][0]}-{p['steps'][1]}: "
                     f"{'-' if p['tokens_per_s'] is None else format(p['tokens_per_s'], ',.0f')} tok/s, "
                     f"{mfu}{split}")  # fmt: skip
    if d["phases"] and d.get("tokens_per_s"):
        lines.append(f"run: {d['tokens_per_s']:,.0f} tok/s (median logged interval, each phase's first left out; "
                     "the Runs table's tok/s)")  # fmt: skip
    if d["split"]:
        s = d["split"]
        lines.append("time: " + ", ".join(f"{PART_LABELS[k]} {s[k]:.1f} s" for k in (*PARTS, "other")) +
                     f" of {s['wall']:.1f} s")  # fmt: skip
    if d["state"] == "running":
        lines.append(f"ETA: {d['eta'] if d['eta'] != '…' else 'unknown'} at the measured rate")
    lines.append("findings:" if d["findings"] else "findings: none (forward+backward holds the time)")
    lines += [f"  - {f}: {fix}" for f, fix in d["findings"]]
    return "\n".join(lines)


def launch_estimate(n_params: int, precision: str, device: str, objectives: dict[str, int], seq_len: int | None = None,
                    batch_size: int | None = None) -> str | None:  # fmt: skip
    """'~12 min at this machine's measured rate (4,210 tok/s MLM: median of 3 calm rates ...)', or None when this
    machine has not trained a model of this size yet. ``objectives``: tokens per objective of the planned run(s)."""
    from backend.engine.rates import describe, pick

    seconds, used = 0.0, []
    for objective, tokens in objectives.items():
        r = pick(n_params, precision, device, objective=objective, seq_len=seq_len, batch_size=batch_size)
        r = r or pick(n_params, precision, device, seq_len=seq_len, batch_size=batch_size)
        if r is None:
            return None
        seconds += tokens / r["tokens_per_s"]
        if r["objective"] == objective:
            used.append(f"{r['tokens_per_s']:,.0f} tok/s {objective.upper()}: {describe(r)}")
        else:  # never name a measurement that was not made: say whose rate stands in
            used.append(f"{objective.upper()} not measured here, taken at {str(r['objective']).upper()}'s "
                        f"{r['tokens_per_s']:,.0f} tok/s: {describe(r)}")  # fmt: skip
    return f"~{hms(seconds)} at this machine's measured rate ({'; '.join(used)})"


def parameter_count(config) -> int:
    """Parameters of the MLM model ``config`` describes (built on the meta device: no memory, no weights read);
    tied weights count once, as the training loop counts them."""
    import torch
    from transformers import AutoModelForMaskedLM

    with torch.device("meta"):
        model = AutoModelForMaskedLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def estimate_for_config(cfg: dict) -> str | None:
    """The Launch form's estimate for a validated config (a pair: both runs), or None when this machine has not
    measured a model of that size at that precision yet."""
    import torch

    from backend.detour.recipe import build_phases, split_pair, tokens_per_step
    from backend.engine.models import model_config_of
    from backend.engine.precision import resolve_precision

    device = "cuda" if torch.cuda.is_available() else "cpu"
    precision = resolve_precision(cfg["train"]["precision"], device)[0]
    config = model_config_of(cfg["model"])
    tokens: dict[str, int] = {}
    for _, run_cfg in split_pair(cfg):
        for phase in build_phases(run_cfg):
            tokens[phase.objective] = tokens.get(phase.objective, 0) + phase.steps * tokens_per_step(run_cfg)
    t = cfg["train"]
    return launch_estimate(parameter_count(config), precision, device, tokens, t["seq_len"], t["batch_size"])


def evaluation_throughput(results: dict) -> list[dict]:
    """Per model of an evaluation's ``results.json``: finished seeds, seconds per seed (fine-tuning only) and the
    fine-tuning rate in examples/s and tokens/s. The runs record no token count, so tokens/s is the padded bound
    (examples x ``max_len``): what the GPU or CPU processed, an upper bound on the real tokens."""
    max_len = (results.get("hparams") or {}).get("max_len")
    out = []
    for m in results.get("models", []):
        done = [r for r in m.get("runs", []) if r.get("train_time_s")]
        seconds = sum(r["train_time_s"] for r in done)
        examples = sum((r.get("n_train") or 0) * (r.get("epochs_run") or 0) for r in done)
        rate = examples / seconds if seconds else None
        out.append({
            "label": m.get("label"),
            "seeds_done": len(done),
            "seeds": len(m.get("runs", [])),
            "seconds_per_seed": seconds / len(done) if done else None,
            "examples_per_s": rate,
            "padded_tokens_per_s": rate * max_len if rate and max_len else None,
            "device": next((r.get("device") for r in done if r.get("device")), None),
        })  # fmt: skip
    return out


def evaluation_report(results: dict) -> str:
    """``evaluation_throughput`` as plain text (the doctor pointed at an evaluation folder)."""
    lines = [f"evaluation {results.get('task')} ({results.get('status')}), max_len {results['hparams'].get('max_len')}"]
    for e in evaluation_throughput(results):
        if not e["seeds_done"]:
            lines.append(f"{e['label']}: no seed finished yet")
            continue
        lines.append(f"{e['label']}: {e['seeds_done']}/{e['seeds']} seeds, {e['seconds_per_seed']:.0f} s per seed, "
                     f"{e['examples_per_s']:.1f} examples/s, <= {e['padded_tokens_per_s'] or 0:,.0f} tokens/s "
                     f"(padded to max_len) on {e['device']}")  # fmt: skip
    return "\n".join(lines)

"""What the Reports tab says beside its study buttons: the quick study's time here (the last finished one's, with
its machine load, else its plan from this machine's measured rates), the smallest difference it can detect and where
that was measured, and the second study's time."""

from __future__ import annotations

from backend.core.errors import DetourError
from backend.core.paths import reports_dir


def quick_measurement() -> dict:
    """The detour study's quick preset time: ``{"seconds", "how", "load", "cpus", "rate"}``. ``how`` is "measured"
    (the wall time of the newest finished quick study on this machine, with the mean of its load at start and end)
    or "estimated" (its runs at this machine's last measured training rate plus the fine-tunes at the plan's rates;
    ``seconds`` None before a rate is measured here, or when its data is absent)."""
    from backend.core import atomic
    from backend.replication import budget_study as bs

    default = bs.BUDGET_PRESETS["quick"]
    from app.study_status import list_reports

    for name in list_reports():
        d = reports_dir() / name
        s, tm = atomic.read_json(d / "settings.json"), atomic.read_json(d / "timing.json")
        ok = isinstance(s, dict) and isinstance(tm, dict) and s.get("study") == "detour-budgets"
        # only a study the button would launch: the quick preset as it is (not its budgets, seeds or arms changed)
        same = ok and all(s.get(k) == default[k] for k in ("budgets", "seeds", "finetune", "train"))
        if same and s.get("preset") == "quick" and s.get("arms") == list(bs.ARMS) and tm.get("wall_s") \
                and (d / "report.md").exists():  # fmt: skip
            loads = [(tm.get(k) or {}).get("load_1m") for k in ("load_start", "load_end")]
            loads = [x for x in loads if x is not None]
            load = sum(loads) / len(loads) if loads else None
            return {"seconds": float(tm["wall_s"]), "how": "measured", "load": load, "cpus": tm.get("cpus"),
                    "rate": None}  # fmt: skip
    try:
        p = bs.plan(bs.resolve_budget_study("quick"))
    except DetourError:  # no base model, no data: the launch says so; the button has no time to give
        return {"seconds": None, "how": "estimated", "load": None, "cpus": None, "rate": None}
    from backend.engine.rates import describe

    return {"seconds": p["total_s"], "how": "estimated", "load": None, "cpus": None, "rate": p["rate"],
            "rate_source": describe(p["rate_pick"]) if p["rate_pick"] else None,
            "finetune_source": p["finetune_text"]}  # fmt: skip


def quick_duration() -> tuple[float | None, str]:
    """(seconds or None, "measured" | "estimated") for the quick preset (``quick_measurement``)."""
    m = quick_measurement()
    return m["seconds"], m["how"]


def _minutes(seconds: float | None) -> str:
    return "time not measured here yet" if seconds is None else f"~{max(1, round(seconds / 60))} min"


def button_label(m: dict | None = None) -> str:
    """The launch button: the last measured time of the quick study here, else its estimate at this machine's
    training rate, else that none is measured yet (``m``: a ``quick_measurement`` read already)."""
    return f"Run the detour study (quick, {_minutes((m or quick_measurement())['seconds'])})"


def time_note(m: dict | None = None) -> str:
    """Where the launch button's time comes from, in one sentence, with the machine load it was measured under."""
    m = m or quick_measurement()
    seconds = m["seconds"]
    if m["how"] == "measured":
        if m["load"] is None:
            under = " (the machine load was not recorded)"
        else:
            cpus = f" on {m['cpus']} CPUs" if m["cpus"] else ""
            under = f" under a machine load of {m['load']:.1f}{cpus}"
        return f"The last quick detour study here took {int(seconds) // 60} min {int(seconds) % 60:02d} s{under}."
    if m.get("rate"):
        return (f"The plan estimates {_minutes(seconds)}: training at {m['rate']:,.0f} tokens/s for the base "
                f"({m['rate_source']}), fine-tuning at {m['finetune_source']} (`python -m backend replicate "
                "--plan` prints the breakdown).")  # fmt: skip
    return ("No training rate for the base is measured on this machine yet, so the quick study's time is not "
            "estimated (`python -m backend replicate --plan` prints its runs and fine-tunes).")  # fmt: skip


_POWER: dict = {}


def power_note() -> str:
    """The quick study's smallest detectable difference and where its variance was measured (``replicate --plan``
    says it in full), read again at most once a minute (it reads the earlier studies' results)."""
    import time

    if _POWER.get("at", 0) > time.time() - 60 and _POWER.get("root") == str(reports_dir()):
        return _POWER["text"]
    from backend.replication import budget_study as bs
    from backend.replication.study_power import detour_power, pilot_command

    try:
        p = detour_power(bs.resolve_budget_study("quick"))
    except DetourError:
        return ""
    d = p["design"]
    at = f"{d['pretraining_seeds']} pretraining seeds x {d['finetune_seeds']} fine-tuning seed(s) x {d['tasks']} tasks"
    if p["mde"] is None:
        text = (f"**Detectable difference:** not measured at the quick preset's settings yet; "
                f"`{pilot_command('detour', 'quick')}` measures it.")  # fmt: skip
    else:
        src = ", ".join(f"`{x}`" for x in p["sources"])
        text = (f"**Detectable difference:** ±{p['mde']:.1f} points (80% power, 95% level) at {at}, from the seed "
                f"noise measured in {src}; the paper's gains are +0.3 to +2.8 points. To detect 1 point would take "
                f"{p['take']['pretraining_seeds'] or 'over 10,000'} pretraining seeds at these settings "
                "(`replicate --plan` lists the other ways).")  # fmt: skip
    _POWER.update(at=time.time(), root=str(reports_dir()), text=text)
    return text


def hybrid_time_note() -> str:
    from backend.replication.hybrid import estimate_text, hybrid_estimate

    return estimate_text(hybrid_estimate("quick"))


def hybrid_button_label() -> str:
    """The second study's button: its time from this machine's measured rate (``hybrid_estimate``), or none."""
    from backend.replication.hybrid import hybrid_estimate

    est = hybrid_estimate("quick")
    when = f"~{max(1, round(est['total_s'] / 60))} min" if est["total_s"] else "time not measured here yet"
    return f"Run the second paper's study (quick, {when})"


EMPTY = (
    "**No report yet.** A report is a small replication of the paper on this machine: from the bundled base it "
    "trains MLM, the CLM detour, a seed-noise control and two freeze interventions over two token budgets and "
    "five pretraining seeds, fine-tunes each on a biomedical NER suite, compares their layers (CKA), and says in "
    "plain words whether each finding replicated and from how many tokens the detour pays (if it does within "
    "them). Make one with **{button}** above, or from a terminal: `python -m backend replicate`."
)


def _time_text(power: bool = True, m: dict | None = None) -> str:
    """The quick study's time and (once the page has loaded: it reads the earlier studies) its detectable
    difference, with where the presets go further (``m``: a ``quick_measurement`` read already)."""
    said = power_note() if power else ""
    return (
        f"{time_note(m)} {said} The quick preset shows the study at a CPU's scale; `--preset standard` (CPU) and "
        "`--preset gpu` give numbers to read (`python -m backend replicate --preset standard --plan` gives their time "
        f"and power). The second paper's study: {hybrid_time_note()}"
    )

"""The replication report: ``report.json`` (every number), ``report.md`` (summary and tables, what the app
shows), ``report.html`` (self-contained: plotly.js inlined once, no network), ``figures/*.json`` (plotly
figures for the app) and ``figures/*.png`` (through kaleido and a local Chromium).

Everything is read from a replication folder (``backend.replication.replicate``), so a report can be rebuilt at any time
(``python -m backend replicate --report-only --out DIR``) and a partial run gives a partial report that says
what is missing. Verdicts follow fixed rules, written in the report itself:

* finding 1 (detour > MLM downstream): *replicated* when the paired 95% t interval of detour − MLM on test F1
  lies above 0, *not replicated* when it lies below 0, *inconclusive (CI crosses 0)* otherwise;
* finding 2 (low-layer divergence well above seed noise): geometric mean of the divergence ratio
  r_l = div(detour, MLM) / div(MLM 2nd seed, MLM) over the blocks of the lower third: *replicated* at >= 5
  (the paper's smallest low-layer ratio), *partly replicated* at >= 2, *not replicated* below 2;
* finding 3 (freeze low removes the gain, freeze mid keeps it): *inconclusive* unless finding 1 replicated
  (no gain to remove); otherwise "removed" = freeze-low − MLM not above 0 and below the detour,
  "kept" = freeze-mid − MLM above 0, or not distinguishable from the detour and positive on average;
  *replicated* when both, *partly replicated* when one, *not replicated* when neither.
"""

from __future__ import annotations

import html
import json
import math
import os
import shutil
import time
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from backend.analysis.plots import PALETTE, eval_loss_figure, train_loss_figure
from backend.core import atomic

REPORT_VERSION = 1
RUN_ORDER = ["mlm", "detour", "mlm_s2", "freeze_low", "freeze_mid"]
COLORS = {
    "base": "#7f7f7f",
    "mlm": PALETTE[0],
    "detour": PALETTE[1],
    "mlm_s2": PALETTE[2],
    "freeze_low": PALETTE[3],
    "freeze_mid": PALETTE[4],
}
PAPER = {
    "f1": (
        "+0.3 to +0.8 pp (English, 11 biomedical tasks, 5 seeds) and +1.2 to +2.8 pp (French, 8 tasks, 9 seeds) "
        "over MLM trained on identical data and compute (10B-50B tokens, 150M-350M parameters)"
    ),
    "cka": (
        "divergence ratio r_l = div(CLM, MLM) / div(MLM seed B, MLM seed A) of 5-44x in layers 0-7 of 22; "
        "control CKA at layer 0 ~ 0.9968; the change persists through the MLM decay"
    ),
    "freeze": (
        "22-layer French base (+2.8 pp detour gain): freezing layers 0-7 during CLM eliminated the gain, "
        "freezing layers 8-14 preserved it"
    ),
}
DEVIATIONS = [
    "Scale: tens to hundreds of thousands of tokens per run instead of 10B-50B, a 6-layer d=256 base instead of "
    "22-28 layers, one small domain corpus (by default CRAFT, PMC Open Access articles) and one NER task (by "
    "default NCBI-disease) instead of 8-11 tasks. A null result here is not evidence against the paper.",
    "Seed-noise control: as in the paper, the two MLM runs share their data order (train.data_seed) and differ "
    "only in their masking seed; the base has no dropout, so masks are the only difference.",
    "Fine-tuning: a higher learning rate and fewer epochs than the paper's (5e-5, 20 epochs for NER) to suit a "
    "tiny model on a CPU, on a subset of the sentences (dev and test subsets too); best epoch by dev F1 as in the "
    "paper.",
    "Freezing excludes the frozen blocks from the update (bit-identical weights); embeddings and head train "
    "as in the paper's layer freeze.",
]


# ---------------------------------------------------------------------------------------------- reading
def _json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _pp(x, signed: bool = True, digits: int = 2) -> str:
    if x is None:
        return "n/a"
    return f"{100 * x:+.{digits}f}" if signed else f"{100 * x:.{digits}f}"


def _ci(ci) -> str:
    return "n/a" if not ci else f"[{100 * ci[0]:+.2f}, {100 * ci[1]:+.2f}]"


def _f(x, digits: int = 4) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _x(r) -> str:
    return "n/a" if r is None else (f"{r:.1f}x" if r < 100 else f"{r:.0f}x")


def _gmean(vals) -> float | None:
    v = [x for x in vals if x is not None and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else None


def _runs_info(out: Path, settings: dict) -> dict:
    from backend.engine.rundir import read_config, read_metrics, read_status
    from backend.replication.replicate import LABELS, run_names

    names = run_names()
    info = {}
    for key in RUN_ORDER:
        d = out / "runs" / names[key]
        entry = {"key": key, "label": LABELS[key], "name": names[key], "dir": str(d), "state": "not prepared"}
        entry["recipe"] = "mlm" if key.startswith("mlm") else "clm_detour"
        if (d / "config.yaml").exists():
            st = read_status(d)
            cfg = read_config(d)
            rows = read_metrics(d)
            evals = [r for r in rows if r.get("type") == "eval"]
            trains = [r for r in rows if r.get("type") == "train"]
            started, finished = st.get("started_at"), st.get("finished_at")
            entry.update(
                {
                    "state": st.get("state"),
                    "error": st.get("error"),
                    "seed": cfg["train"]["seed"],
                    "freeze_main": cfg["phases"]["main"]["freeze"].get("layers"),
                    "tokens_seen": st.get("tokens_seen"),
                    "total_tokens": st.get("total_tokens"),
                    "steps": st.get("total_steps"),
                    "train_time_s": (finished - started) if started and finished else None,
                    "tokens_per_s": (
                        sum(r["tokens_per_s"] for r in trains[1:]) / len(trains[1:]) if len(trains) > 1 else None
                    ),
                    "final_eval_mlm_loss": evals[-1].get("eval_mlm_loss") if evals else None,
                    "final_eval_clm_loss": evals[-1].get("eval_clm_loss") if evals else None,
                    "start_eval_mlm_loss": evals[0].get("eval_mlm_loss") if evals else None,
                    "metrics": rows,
                }
            )
        info[key] = entry
    return info


def _ner(out: Path) -> dict | None:
    from backend.evaluation.stats import paired_comparison
    from backend.replication.replicate import LABELS

    res = _json(out / "ner" / "results.json")
    if not res:
        return None
    metric = res.get("primary_metric", "f1")
    per = {}
    models = []
    for m in res["models"]:
        vals = {
            r["seed"]: r["test"][metric] for r in m["runs"] if r.get("status") == "ok" and metric in r.get("test", {})
        }
        per[m["label"]] = vals
        s = m.get("summary", {}).get(metric, {})
        models.append(
            {
                "key": m["label"],
                "label": LABELS.get(m["label"], m["label"]),
                "mean": s.get("mean"),
                "std": s.get("std"),
                "n": s.get("n", len(vals)),
                "seeds": sorted(vals),
                "values": [vals[k] for k in sorted(vals)],
                "failed": m.get("n_failed", 0),
            }
        )
    pairs = [
        ("mlm", "detour"),
        ("mlm_s2", "detour"),
        ("mlm", "mlm_s2"),
        ("mlm", "freeze_low"),
        ("mlm", "freeze_mid"),
        ("detour", "freeze_low"),
        ("detour", "freeze_mid"),
        ("base", "mlm"),
        ("base", "detour"),
    ]
    comps = []
    for a, b in pairs:
        if a in per and b in per:
            c = paired_comparison(per[a], per[b])
            comps.append({"a": a, "b": b, "label": f"{LABELS.get(b, b)} − {LABELS.get(a, a)}", **c})
    return {
        "metric": metric,
        "data": res.get("data"),
        "data_sizes": res.get("data_sizes"),
        "hparams": res.get("hparams"),
        "seeds": res.get("seeds"),
        "status": res.get("status"),
        "models": models,
        "comparisons": comps,
        "failures": res.get("failures", []),
    }


def _cka(out: Path, settings: dict) -> dict | None:
    raw = _json(out / "analysis" / "cka.json")
    if not raw or "detour_vs_mlm" not in raw:
        return None
    main = raw["detour_vs_mlm"]
    layers = main["layers_a"]
    ctrl = main.get("control_divergence") or [None] * len(layers)

    def ratio(div):
        return [None if (d is None or c is None or c <= 1e-12) else d / c for d, c in zip(div, ctrl)]

    low = [i + 1 for i in settings["layers"]["low"]]
    mid = [i + 1 for i in settings["layers"]["mid"]]
    upper = [i for i in range(1, len(layers)) if i not in low and i not in mid]
    out_d = {
        "layers": layers,
        "low_indices": low,
        "mid_indices": mid,
        "upper_indices": upper,
        "n_texts": main["inputs"]["n"],
        "seeds": main["inputs"]["seeds"],
        "max_len": main["inputs"]["max_len_effective"],
        "divergence": main.get("divergence"),
        "divergence_std": main.get("divergence_std"),
        "control_divergence": ctrl,
        "control_cka": main.get("control_divergence") and [None if c is None else 1 - c for c in ctrl],
        "ratio": main.get("ratio"),
        "matrix": main.get("matrix"),
        "control_matrix": (raw.get("control") or {}).get("matrix"),
        "notes": main.get("notes", []),
    }
    for k in ("freeze_low_vs_mlm", "freeze_mid_vs_mlm", "end_main_detour_vs_mlm"):
        if raw.get(k):
            div = raw[k].get("divergence")
            out_d[k] = {"divergence": div, "ratio": ratio(div) if div else None}
    for name, idx in (("low", low), ("mid", mid), ("upper", upper)):
        r = out_d["ratio"] or []
        out_d[f"ratio_gmean_{name}"] = _gmean([r[i] for i in idx if i < len(r)]) if idx else None
        for k in ("freeze_low_vs_mlm", "freeze_mid_vs_mlm", "end_main_detour_vs_mlm"):
            if out_d.get(k) and out_d[k]["ratio"]:
                out_d[k][f"ratio_gmean_{name}"] = _gmean([out_d[k]["ratio"][i] for i in idx]) if idx else None
    return out_d


def _weights(out: Path) -> dict | None:
    raw = _json(out / "analysis" / "weights.json")
    if not raw:
        return None
    fb = raw.get("from_base", {})
    any_run = next(iter(fb.values()), None)
    if not any_run:
        return None
    return {
        "layers": ["embeddings", *any_run["layer_names"]],
        "from_base": {k: [v.get("embeddings"), *v["layers"]] for k, v in fb.items()},
        "detour_vs_mlm": [raw["detour_vs_mlm"].get("embeddings"), *raw["detour_vs_mlm"]["layers"]],
        "control": [raw["control"].get("embeddings"), *raw["control"]["layers"]],
    }


def _steps(out: Path) -> list[dict]:
    from backend.replication.replicate import build_plan

    settings = _json(out / "settings.json")
    names = [s.name for s in build_plan(settings)] if settings else []
    rows = []
    for n in names:
        done = _json(out / "steps" / f"{n}.json")
        fail = _json(out / "steps" / f"{n}.failed.json")
        if done:
            rows.append({"step": n, "state": "done", "elapsed_s": done.get("elapsed_s")})
        elif fail:
            rows.append({"step": n, "state": "failed", "error": fail.get("error")})
        else:
            rows.append({"step": n, "state": "this report" if n == "report" else "not run"})
    return rows


# ---------------------------------------------------------------------------------------------- findings
def _comp(ner: dict | None, a: str, b: str) -> dict | None:
    if not ner:
        return None
    return next((c for c in ner["comparisons"] if c["a"] == a and c["b"] == b), None)


def _sig(c: dict | None) -> str:
    """'up' (t CI above 0), 'down' (below 0), 'ns' (crosses 0), 'na'."""
    if not c or not c.get("ci95_t") or c.get("mean_diff") is None:
        return "na"
    lo, hi = c["ci95_t"]
    return "up" if lo > 0 else "down" if hi < 0 else "ns"


def _comp_text(c: dict | None, what: str) -> str:
    if not c:
        return f"{what}: not measured"
    return (
        f"{what} = {_pp(c['mean_diff'])} pp, 95% CI {_ci(c['ci95_t'])} (paired t), {_ci(c['ci95_bootstrap'])} "
        f"(bootstrap), wins {c['wins_b']}/{c['n']} seeds"
    )


def _model(ner, key):
    return next((m for m in ner["models"] if m["key"] == key), None) if ner else None


def assess(ner: dict | None, cka: dict | None, settings: dict, runs: dict | None = None) -> list[dict]:
    L = settings["layers"]
    findings = []
    loss_d = ((runs or {}).get("detour") or {}).get("final_eval_mlm_loss")
    loss_m = ((runs or {}).get("mlm") or {}).get("final_eval_mlm_loss")

    # 1 - downstream
    c = _comp(ner, "mlm", "detour")
    s = _sig(c)
    f1 = {"id": "downstream", "title": "The CLM detour beats MLM downstream", "paper": PAPER["f1"]}
    if s == "na":
        f1.update(verdict="not run", measured="no paired NER scores for both models", text="NER was not completed.")
    else:
        md, mm = _model(ner, "detour"), _model(ner, "mlm")
        c2 = _comp(ner, "mlm_s2", "detour")
        f1["measured"] = (
            f"{_task_name(ner)} test F1: detour {_pp(md['mean'], False)} ± {_pp(md['std'], False)}, MLM "
            f"{_pp(mm['mean'], False)} ± {_pp(mm['std'], False)} ({c['n']} seeds); "
            + _comp_text(c, "detour − MLM")
            + ("; " + _comp_text(c2, "detour − MLM 2nd seed") if c2 else "")
        )
        diff = _pp(c["mean_diff"])
        if s == "up":
            f1["verdict"] = "replicated"
            f1["text"] = (
                f"The detour scored {diff} pp over MLM and the 95% interval lies above zero: at this small scale, the "
                "detour helps downstream, as in the paper."
            )
        elif s == "down":
            f1["verdict"] = "not replicated"
            f1["text"] = (
                f"The detour scored {diff} pp against MLM and the 95% interval lies below zero: MLM did better, "
                "the opposite of the paper, at this scale."
            )
        else:
            f1["verdict"] = "inconclusive (CI crosses 0)"
            lean = "higher" if c["mean_diff"] > 0 else "lower"
            f1["text"] = (
                f"The detour scored {abs(100 * c['mean_diff']):.2f} pp {lean} than MLM on average, but the 95% "
                f"interval crosses zero: with "
                f"{c['n']} seeds at this scale the difference is within fine-tuning noise. This is neither a "
                "confirmation nor a refutation."
            )
        if loss_d is not None and loss_m is not None:
            f1["measured"] += f"; held-out MLM loss at the end: detour {loss_d:.3f}, MLM {loss_m:.3f}"
            if s != "up" and loss_d > loss_m + 0.05:
                f1["text"] += (
                    f" The detour ends with a higher held-out MLM loss than MLM ({loss_d:.2f} vs {loss_m:.2f}): at "
                    "this budget its decay (10% of the main phase) has not brought it back to MLM quality, a likely "
                    "reason."
                )
    findings.append(f1)

    # 2 - low-layer divergence above seed noise
    f2 = {"id": "low_layers", "title": "CLM changes the low layers far beyond seed noise", "paper": PAPER["cka"]}
    if not cka or not cka.get("ratio") or cka.get("ratio_gmean_low") is None:
        f2.update(verdict="not run", measured="no CKA with the seed-noise control", text="CKA was not completed.")
    else:
        r = cka["ratio"]
        names = cka["layers"]
        low_txt = ", ".join(f"{names[i]} {_x(r[i])}" for i in cka["low_indices"])
        g_low, g_mid, g_up = cka["ratio_gmean_low"], cka.get("ratio_gmean_mid"), cka.get("ratio_gmean_upper")
        peak = max(range(1, len(r)), key=lambda i: r[i] if r[i] is not None else -1)
        ctrl_cka = (cka.get("control_cka") or [None, None])[1]
        f2["measured"] = (
            f"ratio div(detour, MLM) / div(MLM 2nd seed, MLM), lower third ({L['low_range']}): {low_txt} "
            f"(geometric mean {_x(g_low)}); middle third {_x(g_mid)}; upper {_x(g_up)}; largest at {names[peak]} "
            f"({_x(r[peak])}); control CKA at block_0 {_f(ctrl_cka)}; {cka['n_texts']} held-out paragraphs, "
            f"{len(cka['seeds'])} sampling seed(s)"
        )
        em = cka.get("end_main_detour_vs_mlm")
        if em and em.get("ratio_gmean_low") is not None:
            f2["measured"] += (
                f"; before the decay the lower-third ratio was {_x(em['ratio_gmean_low'])} (after: {_x(g_low)})"
            )
        if g_low >= 5:
            f2["verdict"] = "replicated"
            f2["text"] = (
                f"In the lower third the detour's representations differ from MLM's {_x(g_low)} more than two MLM "
                "runs differ from each other: well above seed noise, in the paper's 5-44x range."
            )
        elif g_low >= 2:
            f2["verdict"] = "partly replicated"
            f2["text"] = (
                f"In the lower third the detour differs from MLM {_x(g_low)} more than seed noise: above noise, but "
                "below the paper's 5-44x."
            )
        else:
            f2["verdict"] = "not replicated"
            f2["text"] = (
                f"In the lower third the detour differs from MLM only {_x(g_low)} as much as two MLM seeds do: "
                "not clearly above seed noise at this scale."
            )
        if g_low is not None and g_up is not None and g_low < g_up:
            f2["text"] += " Note: the upper layers diverge more than the lower ones here, unlike in the paper."
    findings.append(f2)

    # 3 - freeze interventions
    f3 = {"id": "freeze", "title": "Freezing low layers removes the gain; freezing middle layers keeps it"}
    f3["paper"] = PAPER["freeze"]
    cl, cm = _comp(ner, "mlm", "freeze_low"), _comp(ner, "mlm", "freeze_mid")
    dl, dm = _comp(ner, "detour", "freeze_low"), _comp(ner, "detour", "freeze_mid")
    if not (cl and cm and c):
        f3.update(verdict="not run", measured="no NER scores for the freeze runs", text="NER was not completed.")
    else:
        f3["measured"] = "; ".join(
            [
                _comp_text(c, "detour − MLM"),
                _comp_text(cl, f"low-frozen ({L['low_range']}) − MLM"),
                _comp_text(cm, f"mid-frozen ({L['mid_range']}) − MLM"),
                _comp_text(dl, "low-frozen − detour"),
                _comp_text(dm, "mid-frozen − detour"),
            ]
        )
        if cka and cka.get("freeze_low_vs_mlm", {}).get("ratio_gmean_low") is not None:
            f3["measured"] += (
                f"; lower-third divergence from MLM: detour {_x(cka['ratio_gmean_low'])} seed noise, low-frozen "
                f"{_x(cka['freeze_low_vs_mlm']['ratio_gmean_low'])}, mid-frozen "
                f"{_x((cka.get('freeze_mid_vs_mlm') or {}).get('ratio_gmean_low'))}"
            )
        removed = _sig(cl) != "up" and dl is not None and (dl["mean_diff"] or 0) < 0
        kept = _sig(cm) == "up" or (_sig(dm) == "ns" and (cm["mean_diff"] or 0) > 0)
        if _sig(c) != "up":
            f3["verdict"] = "inconclusive (no detour gain to remove)"
            f3["text"] = (
                "The detour's own gain over MLM is not established here (finding 1), so there is no gain for the "
                "freezes to remove or keep; the numbers are shown for completeness."
            )
        elif removed and kept:
            f3["verdict"] = "replicated"
            f3["text"] = (
                "With the low layers frozen during CLM the gain over MLM disappears, with the middle layers frozen "
                "it stays: the benefit needs the low layers, as in the paper."
            )
        elif removed or kept:
            f3["verdict"] = "partly replicated"
            f3["text"] = (
                "Freezing the low layers " + ("removes" if removed else "does not remove") + " the gain and freezing "
                "the middle layers " + ("keeps" if kept else "does not keep") + " it: only half of the paper's "
                "pattern."
            )
        else:
            f3["verdict"] = "not replicated"
            f3["text"] = (
                "Freezing the low layers does not remove the gain and freezing the middle layers does not keep it: "
                "the opposite of the paper's pattern."
            )
    findings.append(f3)
    return findings


# ---------------------------------------------------------------------------------------------- figures
def _layout(fig: go.Figure, title: str, height: int = 380) -> go.Figure:
    fig.update_layout(
        title={"text": title, "x": 0.01},
        height=height,
        margin={"l": 60, "r": 30, "t": 50, "b": 50},
        legend={"orientation": "h", "y": -0.2},
        template="plotly_white",
    )
    return fig


def _shade_thirds(fig: go.Figure, layers: list[str], low: list[int], mid: list[int], row=None, col=None) -> None:
    for idx, name, color in (
        (low, "lower third", "rgba(239,85,59,0.10)"),
        (mid, "middle third", "rgba(99,110,250,0.10)"),
    ):
        if idx:
            fig.add_vrect(
                x0=idx[0] - 0.5,
                x1=idx[-1] + 0.5,
                fillcolor=color,
                line_width=0,
                layer="below",
                annotation_text=name,
                annotation_position="top left",
                row=row,
                col=col,
            )


def divergence_profile_figure(cka: dict) -> go.Figure:
    layers = cka["layers"]
    x = list(range(len(layers)))
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.6, 0.4])
    series = [
        ("CLM detour vs MLM", cka.get("divergence"), COLORS["detour"], "solid"),
        (
            "low-frozen detour vs MLM",
            (cka.get("freeze_low_vs_mlm") or {}).get("divergence"),
            COLORS["freeze_low"],
            "dash",
        ),
        (
            "mid-frozen detour vs MLM",
            (cka.get("freeze_mid_vs_mlm") or {}).get("divergence"),
            COLORS["freeze_mid"],
            "dash",
        ),
        ("detour vs MLM before decay", (cka.get("end_main_detour_vs_mlm") or {}).get("divergence"), "#bbbbbb", "dot"),
        ("seed-noise control (MLM 2nd seed vs MLM)", cka.get("control_divergence"), COLORS["mlm_s2"], "solid"),
    ]
    for name, y, color, dash in series:
        if y:
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    name=name,
                    mode="lines+markers",
                    line={"color": color, "dash": dash},
                    customdata=layers,
                    hovertemplate="%{customdata}: %{y:.5f}<extra>" + name + "</extra>",
                ),
                row=1,
                col=1,
            )
    ratios = [
        ("detour", cka.get("ratio"), COLORS["detour"]),
        ("low-frozen", (cka.get("freeze_low_vs_mlm") or {}).get("ratio"), COLORS["freeze_low"]),
        ("mid-frozen", (cka.get("freeze_mid_vs_mlm") or {}).get("ratio"), COLORS["freeze_mid"]),
    ]
    for name, y, color in ratios:
        if y:
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    name=f"ratio: {name}",
                    mode="lines+markers",
                    line={"color": color},
                    showlegend=False,
                    hovertemplate="%{y:.1f}x<extra>" + name + "</extra>",
                ),
                row=2,
                col=1,
            )
    fig.add_hline(y=1, line={"color": "#888", "dash": "dot"}, row=2, col=1)
    fig.add_hline(
        y=5,
        line={"color": "#d62728", "dash": "dot", "width": 1},
        row=2,
        col=1,
        annotation_text="paper's lowest low-layer ratio (5x)",
        annotation_position="top right",
    )
    _shade_thirds(fig, layers, cka["low_indices"], cka["mid_indices"], row=1, col=1)
    fig.update_xaxes(tickvals=x, ticktext=layers, row=2, col=1)
    fig.update_yaxes(title_text="1 − CKA (same layer)", row=1, col=1)
    rvals = [v for _, y, _ in ratios if y for v in y if v is not None and v > 0]
    lo, hi = min([*rvals, 0.5]), max([*rvals, 10.0])
    ticks = [t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if lo / 1.5 <= t <= hi * 1.5]
    fig.update_yaxes(
        title_text="ratio to seed noise",
        type="log",
        row=2,
        col=1,
        range=[math.log10(lo) - 0.15, math.log10(hi) + 0.15],
        tickvals=ticks,
        ticktext=[f"{t:g}x" for t in ticks],
    )
    return _layout(fig, "Divergence per layer from MLM, against seed noise", 560)


def heatmaps_figure(cka: dict) -> go.Figure:
    layers = cka["layers"]
    panels = [("CLM detour (rows) vs MLM (columns)", cka.get("matrix"))]
    if cka.get("control_matrix"):
        panels.append(("control: MLM 2nd seed (rows) vs MLM (columns)", cka["control_matrix"]))
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[p[0] for p in panels], horizontal_spacing=0.12)
    for j, (_, m) in enumerate(panels, 1):
        fig.add_trace(
            go.Heatmap(
                z=m,
                x=layers,
                y=layers,
                coloraxis="coloraxis",
                hovertemplate="row %{y} · col %{x}<br>CKA %{z:.4f}<extra></extra>",
            ),
            row=1,
            col=j,
        )
        fig.update_yaxes(autorange="reversed", row=1, col=j)
    lo = min((v for _, m in panels for row in m for v in row if v is not None), default=0.0)
    cmin = max(0.0, math.floor(lo * 20) / 20)  # the contrast where the values are, from a 0.05 step
    fig.update_layout(coloraxis={"colorscale": "Viridis", "cmin": cmin, "cmax": 1, "colorbar": {"title": "CKA"}})
    return _layout(fig, "Layer × layer linear CKA", 460)


def weight_change_figure(w: dict) -> go.Figure:
    from backend.replication.replicate import LABELS

    fig = go.Figure()
    for key in RUN_ORDER:
        if key in w["from_base"]:
            fig.add_trace(go.Bar(x=w["layers"], y=w["from_base"][key], name=LABELS[key], marker_color=COLORS[key]))
    fig.update_layout(barmode="group", yaxis_title="‖W − W_base‖ / ‖W_base‖", xaxis_title="layer")
    return _layout(fig, "Relative weight change per layer from the base model")


def _task_name(ner: dict) -> str:
    name = Path(str(ner.get("data") or "")).name or "NER"
    return {"ncbi_disease": "NCBI-disease"}.get(name, name)


def f1_figure(ner: dict) -> go.Figure:
    """Mean ± std per model (big marker, error bar) and each fine-tuning seed (small dots)."""
    fig = go.Figure()
    models = [m for m in ner["models"] if m["mean"] is not None]
    for m in models:
        color = COLORS.get(m["key"], "#999")
        fig.add_trace(
            go.Scatter(
                x=[m["label"]],
                y=[100 * m["mean"]],
                error_y={"type": "data", "array": [100 * (m["std"] or 0)], "color": color, "thickness": 2},
                mode="markers+text",
                marker={"color": color, "size": 14, "symbol": "diamond"},
                text=[f"{100 * m['mean']:.2f}"],
                textposition="middle right",
                name=m["label"],
                hovertemplate=f"{m['label']}<br>mean %{{y:.2f}}<extra></extra>",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=[m["label"]] * len(m["values"]),
                y=[100 * v for v in m["values"]],
                mode="markers",
                marker={"color": color, "size": 7, "opacity": 0.55, "line": {"width": 1, "color": "#333"}},
                showlegend=False,
                customdata=m["seeds"],
                hovertemplate="seed %{customdata}: %{y:.2f}<extra></extra>",
            )
        )
    fig.update_yaxes(title_text="test F1 (%)")
    fig.update_layout(showlegend=False)
    n = len(ner.get("seeds") or [])
    return _layout(fig, f"{_task_name(ner)} NER test F1: mean ± std (diamond) and each of {n} fine-tuning seeds")


def f1_table_figure(ner: dict) -> go.Figure:
    comps = ner["comparisons"]
    cols = ["comparison (Δ = first − second)", "Δ F1 (pp)", "95% CI (paired t)", "95% CI (bootstrap)", "wins", "n"]
    cells = [
        [c["label"] for c in comps],
        [_pp(c["mean_diff"]) for c in comps],
        [_ci(c["ci95_t"]) for c in comps],
        [_ci(c["ci95_bootstrap"]) for c in comps],
        [f"{c['wins_b']}-{c['wins_a']}" + (f" ({c['ties']} ties)" if c["ties"] else "") for c in comps],
        [c["n"] for c in comps],
    ]
    fills = []
    for c in comps:
        s = _sig(c)
        fills.append("#d9f2d9" if s == "up" else "#f8d7d7" if s == "down" else "#ffffff")
    fig = go.Figure(
        go.Table(
            header={"values": cols, "fill_color": "#e8e8f0", "align": "left", "font": {"size": 12}},
            cells={"values": cells, "align": "left", "fill_color": [fills] * len(cols), "font": {"size": 12}},
            columnwidth=[3.2, 1, 1.6, 1.6, 1, 0.5],
        )
    )
    fig.update_layout(margin={"l": 10, "r": 10, "t": 45, "b": 10}, height=80 + 28 * max(len(comps), 1))
    fig.update_layout(title={"text": "Paired comparisons on test F1 (green: CI above 0, red: below 0)", "x": 0.01})
    return fig


def build_figures(rep: dict) -> dict[str, go.Figure]:
    from backend.replication.replicate import LABELS

    figs: dict[str, go.Figure] = {}
    runs = {LABELS[k]: v.get("metrics", []) for k, v in rep["runs"].items() if v.get("metrics")}
    if runs:
        figs["loss_curves"] = eval_loss_figure(runs)
        figs["loss_curves"].update_layout(
            title={
                "text": "Held-out MLM loss (15% masking, fixed masks): comparable "
                "across recipes; dashed lines: phase switches"
            }
        )
        figs["train_loss"] = train_loss_figure(runs)
    if rep.get("cka"):
        figs["divergence"] = divergence_profile_figure(rep["cka"])
        if rep["cka"].get("matrix"):
            figs["cka_heatmaps"] = heatmaps_figure(rep["cka"])
    if rep.get("weights"):
        figs["weight_change"] = weight_change_figure(rep["weights"])
    if rep.get("ner") and rep["ner"]["models"]:
        figs["f1"] = f1_figure(rep["ner"])
        if rep["ner"]["comparisons"]:
            figs["f1_table"] = f1_table_figure(rep["ner"])
    return figs


FIGURE_TITLES = {
    "loss_curves": "Loss curves (held-out MLM loss)",
    "train_loss": "Training loss",
    "divergence": "Divergence profile with the seed-noise control",
    "cka_heatmaps": "CKA heatmaps",
    "weight_change": "Weight change per layer",
    "f1": "NER F1 per model",
    "f1_table": "Paired comparisons (table)",
}


def _find_browser() -> str | None:
    if os.environ.get("BROWSER_PATH"):
        return os.environ["BROWSER_PATH"]
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def export_pngs(figs: dict[str, go.Figure], out_dir: Path, timeout: float = 120) -> tuple[list[str], str | None]:
    """Write ``<name>.png`` for each figure with kaleido (one Chromium for all). Returns (files, error)."""
    if not figs:
        return [], None
    browser = _find_browser()
    if browser is None:
        return [], "no Chromium/Chrome found for kaleido (install chromium or set BROWSER_PATH); PNGs skipped"
    os.environ.setdefault("BROWSER_PATH", browser)  # choreographer (kaleido's browser driver) reads it
    try:
        import kaleido
    except ImportError:
        return [], "kaleido is not installed; PNGs skipped"
    out_dir.mkdir(parents=True, exist_ok=True)
    items = []
    for name, fig in figs.items():
        h = int(fig.layout.height or 400)
        items.append({"fig": fig, "path": str(out_dir / f"{name}.png"), "opts": {"width": 1000, "height": h}})
    try:
        kaleido.write_fig_from_object_sync(items, kopts={"timeout": timeout, "mathjax": False})
    except Exception as exc:  # noqa: BLE001 - a report without PNGs is still a report
        return [str(p) for p in (out_dir / f"{n}.png" for n in figs) if p.exists()], f"PNG export failed: {exc}"
    written = [str(out_dir / f"{n}.png") for n in figs if (out_dir / f"{n}.png").exists()]
    missing = [n for n in figs if not (out_dir / f"{n}.png").exists()]
    return written, (f"PNG export wrote no file for: {', '.join(missing)}" if missing else None)


# ---------------------------------------------------------------------------------------------- text
BADGE = {
    "replicated": "#1a7f37",
    "partly replicated": "#9a6700",
    "not replicated": "#cf222e",
    "not run": "#6e7781",
}


def _badge_color(verdict: str) -> str:
    for k, v in BADGE.items():
        if verdict.startswith(k):
            return v
    return "#6e7781"  # inconclusive


def summary_markdown(rep: dict) -> str:
    s = rep["settings"]
    lines = [
        f"# Mini replication ({s.get('preset')}): a CLM detour improves encoder continued pretraining",
        "",
        f"Base `{s['model']}` ({s['layers']['n']} layers; lower third {s['layers']['low_range']}, middle third "
        f"{s['layers']['mid_range']}), corpus `{s['corpus']}`, NER `{s['ner_data']}`. "
        f"{s['train']['main_tokens']:,} main-phase tokens per run + {s['train']['decay_fraction']:.0%} decay; "
        f"{s['eval']['seeds']} fine-tuning seeds. Status: **{rep['status']}**.",
        "",
        "## Findings",
        "",
    ]
    for i, f in enumerate(rep["findings"], 1):
        lines += [
            f"**{i}. {f['title']}: {f['verdict'].upper()}.** {f.get('text', '')}",
            "",
            f"- measured: {f.get('measured', 'n/a')}",
            f"- paper: {f['paper']}",
            "",
        ]
    lines += ["Verdict rules and the differences from the paper's setup are listed at the end.", ""]
    ner = rep.get("ner")
    if ner:
        lines += ["## NER test F1 (%)", "", "| model | mean ± std | n | per seed |", "|---|---|---|---|"]
        for m in ner["models"]:
            vals = ", ".join(f"{100 * v:.2f}" for v in m["values"])
            lines.append(f"| {m['label']} | {_pp(m['mean'], False)} ± {_pp(m['std'], False)} | {m['n']} | {vals} |")
        lines += [
            "",
            "| comparison | Δ F1 (pp) | 95% CI (t) | 95% CI (bootstrap) | wins | n |",
            "|---|---|---|---|---|---|",
        ]
        for c in ner["comparisons"]:
            ties = f" ({c['ties']} ties)" if c["ties"] else ""
            lines.append(
                f"| {c['label']} | {_pp(c['mean_diff'])} | {_ci(c['ci95_t'])} | {_ci(c['ci95_bootstrap'])} | "
                f"{c['wins_b']}-{c['wins_a']}{ties} | {c['n']} |"
            )
        lines.append("")
    cka = rep.get("cka")
    if cka:
        w = rep.get("weights") or {}
        wl = dict(zip(w.get("layers", []), (w.get("from_base") or {}).get("detour", [])))
        lines += [
            "## Divergence per layer (1 − CKA of matching layers, vs MLM)",
            "",
            "| layer | detour | control | ratio | low-frozen | mid-frozen | ΔW detour |",
            "|---|---|---|---|---|---|---|",
        ]
        fl = (cka.get("freeze_low_vs_mlm") or {}).get("divergence") or []
        fm = (cka.get("freeze_mid_vs_mlm") or {}).get("divergence") or []
        for i, name in enumerate(cka["layers"]):
            third = " (low)" if i in cka["low_indices"] else " (mid)" if i in cka["mid_indices"] else ""
            lines.append(
                f"| {name}{third} | {_f((cka['divergence'] or [None] * (i + 1))[i], 5)} | "
                f"{_f(cka['control_divergence'][i], 5)} | {_x((cka['ratio'] or [None] * (i + 1))[i])} | "
                f"{_f(fl[i] if i < len(fl) else None, 5)} | {_f(fm[i] if i < len(fm) else None, 5)} | "
                f"{_f(wl.get(name), 4)} |"
            )
        lines.append("")
    lines += _runs_markdown(rep)
    if rep.get("failures"):
        lines += ["## Failures", ""] + [f"- `{f['step']}`: {f['error']}" for f in rep["failures"]] + [""]
    lines += ["## How to read this", ""] + [f"- {r}" for r in VERDICT_RULES] + [""]
    lines += ["## Differences from the paper's setup", ""] + [f"- {d}" for d in DEVIATIONS] + [""]
    return "\n".join(lines)


VERDICT_RULES = [
    "Finding 1: replicated when the paired 95% t interval of detour − MLM (test F1, paired by fine-tuning seed) "
    "lies above 0; not replicated when below 0; inconclusive when it crosses 0.",
    "Finding 2: geometric mean over the lower-third blocks of r_l = div(detour, MLM) / div(MLM 2nd seed, MLM): "
    "replicated at >= 5x (the paper's smallest low-layer ratio), partly at >= 2x, not replicated below.",
    "Finding 3: needs finding 1 (a gain to remove). Gain removed: low-frozen − MLM not above 0 and below the "
    "detour on average; gain kept: mid-frozen − MLM above 0, or indistinguishable from the detour and positive.",
    "div = 1 − linear CKA of the same layer over held-out paragraphs (mean pooling, float64), never trained on.",
]


def _runs_markdown(rep: dict) -> list[str]:
    lines = [
        "## Runs",
        "",
        "| run | recipe | seed | frozen in main | tokens | time | held-out MLM loss start → end |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rep["runs"].values():
        t = r.get("train_time_s")
        lines.append(
            f"| {r['label']} (`{r['name']}`) | {r['recipe']} | {r.get('seed', '')} | {r.get('freeze_main') or '-'} | "
            f"{r.get('tokens_seen') or 0:,} | {'' if t is None else f'{t:.0f}s'} | "
            f"{_f(r.get('start_eval_mlm_loss'), 3)} → {_f(r.get('final_eval_mlm_loss'), 3)} |"
        )
    lines.append("")
    steps = rep.get("steps", [])
    if steps:
        lines += ["| step | state | time |", "|---|---|---|"]
        for st in steps:
            el = st.get("elapsed_s")
            lines.append(f"| {st['step']} | {st['state']} | {'' if el is None else f'{el:.0f}s'} |")
        lines.append("")
    return lines


CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;max-width:1100px;margin:24px auto;padding:0 16px;
color:#1f2328;line-height:1.45}
h1{font-size:1.6em}h2{border-bottom:1px solid #d0d7de;padding-bottom:4px;margin-top:32px}
table{border-collapse:collapse;margin:8px 0;font-size:0.92em}td,th{border:1px solid #d0d7de;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#f6f8fa}
.badge{display:inline-block;color:#fff;border-radius:10px;padding:1px 10px;font-size:0.85em;font-weight:600}
.finding{border:1px solid #d0d7de;border-radius:6px;padding:10px 14px;margin:12px 0}.muted{color:#57606a}
pre{background:#f6f8fa;padding:8px;overflow:auto;font-size:0.85em}code{font-size:0.92em}
"""


def _md_table_to_html(lines: list[str]) -> str:
    """The few Markdown tables this module writes -> HTML (header row, separator, rows)."""
    rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines if not set(ln) <= set("|-: ")]
    if not rows:
        return ""
    out = ["<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in rows[0]) + "</tr>"]
    for r in rows[1:]:
        out.append("<tr>" + "".join(f"<td>{html.escape(c).replace('`', '')}</td>" for c in r) + "</tr>")
    return "\n".join(out) + "</table>"


def _md_section_tables(md: str, heading: str) -> str:
    """HTML of the tables under ``## heading`` in our own Markdown."""
    blocks, cur, inside = [], [], False
    for ln in md.splitlines():
        if ln.startswith("## "):
            inside = ln[3:].strip().startswith(heading)
            continue
        if not inside:
            continue
        if ln.startswith("|"):
            cur.append(ln)
        elif cur:
            blocks.append(_md_table_to_html(cur))
            cur = []
    if cur:
        blocks.append(_md_table_to_html(cur))
    return "\n".join(blocks)


def render_html(rep: dict, figs: dict[str, go.Figure], md: str) -> str:
    from plotly.offline import get_plotlyjs

    s = rep["settings"]
    e = html.escape
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>Detour Lab mini replication ({e(str(s.get('preset')))})</title>",
        f"<style>{CSS}</style>",
        # plotly.js, inlined once: the file opens offline, from disk, anywhere.
        f"<script type='text/javascript'>{get_plotlyjs()}</script>",
        "</head><body>",
        "<h1>Mini replication: a causal-LM detour improves encoder continued pretraining</h1>",
        f"<p class='muted'>Preset <b>{e(str(s.get('preset')))}</b> · generated {e(rep['generated_at'])} · status "
        f"<b>{e(rep['status'])}</b> · base <code>{e(s['model'])}</code> ({s['layers']['n']} layers: lower third "
        f"{e(s['layers']['low_range'])}, middle third {e(s['layers']['mid_range'])}) · corpus <code>{e(s['corpus'])}"
        f"</code> · NER <code>{e(s['ner_data'])}</code> · {s['train']['main_tokens']:,} main-phase tokens per run · "
        f"{s['eval']['seeds']} fine-tuning seeds.</p>",
        "<p>Paper: Touchent &amp; de la Clergerie 2026, <i>A Causal Language Modeling Detour Improves Encoder "
        "Continued Pretraining</i>. This is a small-scale replication run on a CPU; read every verdict with the "
        "scale in mind (see <a href='#deviations'>differences</a>).</p>",
        "<h2>Findings</h2>",
    ]
    for i, f in enumerate(rep["findings"], 1):
        parts.append(
            f"<div class='finding'><b>{i}. {e(f['title'])}</b> <span class='badge' style='background:"
            f"{_badge_color(f['verdict'])}'>{e(f['verdict'])}</span><p>{e(f.get('text', ''))}</p>"
            "<div class='muted'><b>Measured:</b><ul>"
            + "".join(f"<li>{e(part)}</li>" for part in str(f.get("measured", "n/a")).split("; "))
            + f"</ul><b>Paper:</b> {e(f['paper'])}</div></div>"
        )
    if rep.get("failures"):
        parts.append("<h2>Failures</h2><ul>")
        parts += [f"<li><code>{e(f['step'])}</code>: {e(f['error'])}</li>" for f in rep["failures"]]
        parts.append("</ul>")
    config = {"displaylogo": False, "responsive": True}
    order = ["f1", "divergence", "cka_heatmaps", "weight_change", "loss_curves", "train_loss"]
    for name in [n for n in order if n in figs]:
        parts.append(f"<h2>{e(FIGURE_TITLES.get(name, name))}</h2>")
        if name == "f1":
            parts.append(_md_section_tables(md, "NER test F1"))
        if name == "divergence":
            parts.append(_md_section_tables(md, "Divergence per layer"))
        parts.append(
            pio.to_html(figs[name], full_html=False, include_plotlyjs=False, config=config, div_id=f"fig-{name}")
        )
    parts.append("<h2>Runs and steps</h2>")
    parts.append(_md_section_tables(md, "Runs"))
    if rep.get("png_error"):
        parts.append(f"<p class='muted'>{e(rep['png_error'])}</p>")
    parts.append("<h2>How to read this</h2><ul>" + "".join(f"<li>{e(r)}</li>" for r in VERDICT_RULES) + "</ul>")
    parts.append("<h2 id='deviations'>Differences from the paper's setup</h2><ul>")
    parts += [f"<li>{e(d)}</li>" for d in DEVIATIONS]
    parts.append("</ul><h2>Settings</h2>")
    parts.append(f"<pre>{e(json.dumps(s, indent=2))}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------- build
def build_report(out: str | Path, *, png: bool = True, log=print) -> dict:
    """Read a replication folder and write report.json / report.md / report.html / figures. Returns the report."""
    out = Path(out)
    settings = _json(out / "settings.json")
    if not settings:
        from backend.core.errors import DetourError

        raise DetourError(f"{out}: no settings.json: not a replication folder")
    t0 = time.time()
    steps = _steps(out)
    failures = [{"step": st["step"], "error": st["error"]} for st in steps if st["state"] == "failed"]
    runs = _runs_info(out, settings)
    ner = _ner(out)
    cka = _cka(out, settings)
    weights = _weights(out)
    pending = [st["step"] for st in steps if st["state"] != "done" and st["step"] != "report"]
    status = (
        "complete"
        if not pending
        else (
            "incomplete (failed: " + ", ".join(f["step"] for f in failures) + ")"
            if failures
            else "incomplete (not run yet: " + ", ".join(pending) + ")"
        )
    )
    rep = {
        "kind": "replication_report",
        "version": REPORT_VERSION,
        "generated_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "out": str(out.resolve()),
        "status": status,
        "settings": settings,
        "data": _json(out / "data" / "info.json"),
        "runs": runs,
        "ner": ner,
        "cka": cka,
        "weights": weights,
        "steps": steps,
        "failures": failures,
        "timings": {st["step"]: st.get("elapsed_s") for st in steps if st.get("elapsed_s") is not None},
    }
    rep["findings"] = assess(ner, cka, settings, runs)
    figs = build_figures(rep)
    fig_dir = out / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    for name, fig in figs.items():
        atomic.write_text(fig_dir / f"{name}.json", fig.to_json())
    pngs, png_error = export_pngs(figs, fig_dir) if png else ([], "PNG export not requested")
    if png_error:
        log(f"report: {png_error}")
    rep["png_error"] = png_error
    rep["figures"] = {
        n: {"json": f"figures/{n}.json", "png": f"figures/{n}.png" if str(fig_dir / f"{n}.png") in pngs else None}
        for n in figs
    }
    md = summary_markdown(rep)
    rep["summary_markdown"] = md
    rep["files"] = {"json": "report.json", "html": "report.html", "md": "report.md"}
    atomic.write_text(out / "report.md", md)
    atomic.write_text(out / "report.html", render_html(rep, figs, md))
    slim = {**rep, "runs": {k: {kk: vv for kk, vv in v.items() if kk != "metrics"} for k, v in runs.items()}}
    slim["loss_curves"] = {
        k: [
            {kk: r.get(kk) for kk in ("step", "tokens_seen", "phase", "eval_mlm_loss", "eval_clm_loss")}
            for r in v.get("metrics", [])
            if r.get("type") == "eval"
        ]
        for k, v in runs.items()
    }
    atomic.write_json(out / "report.json", slim)
    log(f"report: {out / 'report.html'} ({len(figs)} figures, {len(pngs)} PNGs) in {time.time() - t0:.0f}s")
    return slim


def load_report(out: str | Path) -> dict | None:
    return _json(Path(out) / "report.json")


def load_figure(out: str | Path, name: str) -> go.Figure | None:
    p = Path(out) / "figures" / f"{name}.json"
    if not p.exists():
        return None
    try:
        return pio.from_json(p.read_text())
    except (ValueError, OSError):
        return None

"""What a replication folder holds, read into the plain dicts the report is made of: the five runs (state,
seeds, freezes, losses, metrics), the NER results with their paired comparisons, the CKA divergence profile with
its seed-noise ratios, the weight change per layer, and each step's state. Reading only: no verdicts, no plots,
so a partial folder reads as far as it goes (a missing part is None).
"""

from __future__ import annotations

import math
from pathlib import Path

from backend.core.atomic import read_json
from backend.engine.rundir import read_config, read_metrics, read_status
from backend.evaluation.stats import paired_comparison
from backend.replication.plan import LABELS, RUNS, STEP_NAMES, run_names


def _gmean(vals) -> float | None:
    v = [x for x in vals if x is not None and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else None


def runs_info(out: Path, settings: dict) -> dict:

    names = run_names()
    info = {}
    for key in RUNS:
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


def ner_results(out: Path) -> dict | None:

    res = read_json(out / "ner" / "results.json")
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


def cka_results(out: Path, settings: dict) -> dict | None:
    raw = read_json(out / "analysis" / "cka.json")
    if not raw or "detour_vs_mlm" not in raw:
        return None
    main = raw["detour_vs_mlm"]
    layers = main["layers_a"]
    ctrl = main.get("control_divergence") or [None] * len(layers)

    def ratio(div):  # another run's divergence from MLM, over the same seed noise
        from backend.analysis.api import seed_noise_ratio  # torch: only when a report is built

        return [seed_noise_ratio(d, c) for d, c in zip(div, ctrl)]

    low = [i + 1 for i in settings["layers"]["low"]]
    mid = [i + 1 for i in settings["layers"]["mid"]]
    upper = [i for i in range(1, len(layers)) if i not in low and i not in mid]
    out_d = {
        "layers": layers,
        "low_indices": low,
        "mid_indices": mid,
        "upper_indices": upper,
        "n_texts": main["inputs"]["n"],
        "measure": main.get("measure", "linear"),  # results written before measures existed were linear CKA
        "samples": main.get("samples"),
        "hidden_sizes": main.get("hidden_sizes"),
        "baseline": main.get("baseline"),
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


def weight_results(out: Path) -> dict | None:
    raw = read_json(out / "analysis" / "weights.json")
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


def step_rows(out: Path) -> list[dict]:

    names = STEP_NAMES if read_json(out / "settings.json") else []
    rows = []
    for n in names:
        done = read_json(out / "steps" / f"{n}.json")
        fail = read_json(out / "steps" / f"{n}.failed.json")
        if done:
            rows.append({"step": n, "state": "done", "elapsed_s": done.get("elapsed_s")})
        elif fail:
            rows.append({"step": n, "state": "failed", "error": fail.get("error")})
        else:
            rows.append({"step": n, "state": "this report" if n == "report" else "not run"})
    return rows

"""The verdicts of a replication report: what the paper found (``PAPER``), how this setup differs from it
(``DEVIATIONS``), and the fixed rules that turn measured numbers into a verdict per finding (``assess``), written
in the report itself (``VERDICT_RULES``) so a reader can check them. Also the number formats the report's
text, tables and figures share. The rules:

* finding 1 (detour > MLM downstream): *replicated* when the 95% interval of detour − MLM on test F1 (the one rule
  the suite aggregate and the sweep report use, ``evaluation.delta_verdict``: here a paired t over fine-tuning seeds)
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

from pathlib import Path

from backend.evaluation.delta_verdict import delta_verdict

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
VERDICT_RULES = [
    "Finding 1: replicated when the 95% interval of detour − MLM (test F1, paired by fine-tuning seed; the one rule "
    "the suite aggregate and the sweep report use, here a paired t) lies above 0; not replicated when below 0; "
    "inconclusive when it crosses 0. One pretraining seed per arm: pretraining variance is not measured, so the "
    "verdict is about these two checkpoints.",
    "Finding 2: geometric mean over the lower-third blocks of r_l = div(detour, MLM) / div(MLM 2nd seed, MLM): "
    "replicated at >= 5x (the paper's smallest low-layer ratio), partly at >= 2x, not replicated below.",
    "Finding 3: needs finding 1 (a gain to remove). Gain removed: low-frozen − MLM not above 0 and below the "
    "detour on average; gain kept: mid-frozen − MLM above 0, or indistinguishable from the detour and positive.",
    "div = 1 − CKA of the same layer over held-out paragraphs (mean pooling, float64), never trained on; the "
    "measure is the report's `cka.measure` (debiased CKA by default; `linear` is the paper's biased CKA, the one "
    "its 5-44x were measured with).",
]


# ---------------------------------------------------------------------------------------------- formats
def fmt_pp(x, signed: bool = True, digits: int = 2) -> str:
    if x is None:
        return "n/a"
    return f"{100 * x:+.{digits}f}" if signed else f"{100 * x:.{digits}f}"


def fmt_ci(ci) -> str:
    return "n/a" if not ci else f"[{100 * ci[0]:+.2f}, {100 * ci[1]:+.2f}]"


def fmt_num(x, digits: int = 4) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def fmt_ratio(r) -> str:
    return "n/a" if r is None else (f"{r:.1f}x" if r < 100 else f"{r:.0f}x")


def task_name(ner: dict) -> str:
    name = Path(str(ner.get("data") or "")).name or "NER"
    return {"ncbi_disease": "NCBI-disease"}.get(name, name)


# ---------------------------------------------------------------------------------------------- findings
def comparison(ner: dict | None, a: str, b: str) -> dict | None:
    if not ner:
        return None
    return next((c for c in ner["comparisons"] if c["a"] == a and c["b"] == b), None)


def rule(c: dict | None) -> dict | None:
    """The one verdict rule (``delta_verdict``) on a paired comparison's differences (``b − a`` per seed)."""
    if not c or not c.get("diffs") or c.get("mean_diff") is None:
        return None
    return delta_verdict({"task": dict(zip(c["seeds"], c["diffs"], strict=True))})


def significance(c: dict | None) -> str:
    """'up' (the rule's interval above 0), 'down' (below 0), 'ns' (crosses 0, or too few seeds), 'na'."""
    r = rule(c)
    if r is None or r["ci95"] is None:
        return "na"
    return {"up": "up", "down": "down"}.get(r["direction"], "ns")


def _comp_text(c: dict | None, what: str) -> str:
    if not c:
        return f"{what}: not measured"
    return (
        f"{what} = {fmt_pp(c['mean_diff'])} pp, 95% CI {fmt_ci(c['ci95_t'])} (paired t), {fmt_ci(c['ci95_bootstrap'])} "
        f"(bootstrap, descriptive: too narrow at a few seeds), wins {c['wins_b']}/{c['n']} seeds"
    )


def _model(ner, key):
    return next((m for m in ner["models"] if m["key"] == key), None) if ner else None


def assess(ner: dict | None, cka: dict | None, settings: dict, runs: dict | None = None) -> list[dict]:
    L = settings["layers"]
    findings = []
    loss_d = ((runs or {}).get("detour") or {}).get("final_eval_mlm_loss")
    loss_m = ((runs or {}).get("mlm") or {}).get("final_eval_mlm_loss")

    # 1 - downstream
    c = comparison(ner, "mlm", "detour")
    s = significance(c)
    f1 = {"id": "downstream", "title": "The CLM detour beats MLM downstream", "paper": PAPER["f1"]}
    if s == "na":
        f1.update(verdict="not run", measured="no paired NER scores for both models", text="NER was not completed.")
    else:
        md, mm = _model(ner, "detour"), _model(ner, "mlm")
        c2 = comparison(ner, "mlm_s2", "detour")
        f1["measured"] = (
            f"{task_name(ner)} test F1: detour {fmt_pp(md['mean'], False)} ± {fmt_pp(md['std'], False)}, MLM "
            f"{fmt_pp(mm['mean'], False)} ± {fmt_pp(mm['std'], False)} ({c['n']} seeds); "
            + _comp_text(c, "detour − MLM")
            + ("; " + _comp_text(c2, "detour − MLM 2nd seed") if c2 else "")
            + "".join(f"; {u}" for u in rule(c)["unmeasured"])
        )
        diff = fmt_pp(c["mean_diff"])
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
        low_txt = ", ".join(f"{names[i]} {fmt_ratio(r[i])}" for i in cka["low_indices"])
        g_low, g_mid, g_up = cka["ratio_gmean_low"], cka.get("ratio_gmean_mid"), cka.get("ratio_gmean_upper")
        peak = max(range(1, len(r)), key=lambda i: r[i] if r[i] is not None else -1)
        ctrl_cka = (cka.get("control_cka") or [None, None])[1]
        f2["measured"] = (
            f"ratio div(detour, MLM) / div(MLM 2nd seed, MLM), lower third ({L['low_range']}): {low_txt} "
            f"(geometric mean {fmt_ratio(g_low)}); middle third {fmt_ratio(g_mid)}; upper {fmt_ratio(g_up)}; "
            f"largest at {names[peak]} ({fmt_ratio(r[peak])}); control CKA at block_0 {fmt_num(ctrl_cka)}; "
            f"{cka['n_texts']} held-out paragraphs, "
            f"{len(cka['seeds'])} sampling seed(s)"
        )
        em = cka.get("end_main_detour_vs_mlm")
        if em and em.get("ratio_gmean_low") is not None:
            f2["measured"] += (
                f"; before the decay the lower-third ratio was {fmt_ratio(em['ratio_gmean_low'])} "
                f"(after: {fmt_ratio(g_low)})"
            )
        if g_low >= 5:
            f2["verdict"] = "replicated"
            f2["text"] = (
                f"In the lower third the detour's representations differ from MLM's {fmt_ratio(g_low)} more than "
                "two MLM runs differ from each other: well above seed noise, in the paper's 5-44x range."
            )
        elif g_low >= 2:
            f2["verdict"] = "partly replicated"
            f2["text"] = (
                f"In the lower third the detour differs from MLM {fmt_ratio(g_low)} more than seed noise: above "
                "noise, but below the paper's 5-44x."
            )
        else:
            f2["verdict"] = "not replicated"
            f2["text"] = (
                f"In the lower third the detour differs from MLM only {fmt_ratio(g_low)} as much as two MLM seeds do: "
                "not clearly above seed noise at this scale."
            )
        if g_low is not None and g_up is not None and g_low < g_up:
            f2["text"] += " Note: the upper layers diverge more than the lower ones here, unlike in the paper."
    findings.append(f2)

    # 3 - freeze interventions
    f3 = {"id": "freeze", "title": "Freezing low layers removes the gain; freezing middle layers keeps it"}
    f3["paper"] = PAPER["freeze"]
    cl, cm = comparison(ner, "mlm", "freeze_low"), comparison(ner, "mlm", "freeze_mid")
    dl, dm = comparison(ner, "detour", "freeze_low"), comparison(ner, "detour", "freeze_mid")
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
                f"; lower-third divergence from MLM: detour {fmt_ratio(cka['ratio_gmean_low'])} seed noise, low-frozen "
                f"{fmt_ratio(cka['freeze_low_vs_mlm']['ratio_gmean_low'])}, mid-frozen "
                f"{fmt_ratio((cka.get('freeze_mid_vs_mlm') or {}).get('ratio_gmean_low'))}"
            )
        removed = significance(cl) != "up" and dl is not None and (dl["mean_diff"] or 0) < 0
        kept = significance(cm) == "up" or (significance(dm) == "ns" and (cm["mean_diff"] or 0) > 0)
        if significance(c) != "up":
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

"""The budget studies (``replicate --budgets``): the sign-change statement, the report built from a sweep's small
files through the suite aggregate, the plan's times, the command line's checks, and one tiny real run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.core.errors import ConfigError
from backend.replication import budget_study
from backend.replication.crossover import crossover


def _pts(*spec):
    return [{"tokens": t, "value": v, "ci95": list(ci)} for t, v, ci in spec]


# ---- the statement ---------------------------------------------------------------------------------------------


def test_a_flip_is_bracketed_by_the_last_budget_of_the_old_sign_and_the_first_of_the_new():
    st = crossover(_pts((1e6, -2.0, (-3, -1)), (1e7, 0.2, (-0.5, 0.9)), (1e8, 1.5, (0.4, 2.6))))
    assert st["change"] and st["between"] == [1e6, 1e8] and (st["from"], st["to"]) == ("worse", "better")
    assert "between 1M and 100M tokens" in st["text"] and "not measured" in st["text"]


def test_unsorted_budgets_are_read_in_token_order():
    st = crossover(_pts((30_000, 1.0, (0.1, 2)), (3_000, -1.0, (-2, -0.1))))
    assert st["between"] == [3_000, 30_000] and st["from"] == "worse"


def test_no_flip_says_not_within_the_budgets_tried():
    st = crossover(_pts((1e4, -3.0, (-4, -2)), (1e5, -2.0, (-3, -1)), (1e6, -1.0, (-1.5, -0.5))))
    assert not st["change"] and st["between"] is None
    assert "not within the budgets tried" in st["text"] and "worse at every budget" in st["text"]


def test_a_point_estimate_that_flips_inside_straddling_intervals_is_no_finding():
    st = crossover(_pts((1e4, -1.0, (-3, 1)), (1e5, 0.5, (-1, 2)), (1e6, 1.2, (-0.1, 2.5))))
    assert not st["change"] and "not within the budgets tried" in st["text"]
    assert "no budget's 95% interval excludes 0" in st["text"]


def test_settling_on_one_side_after_straddling_is_not_a_flip():
    st = crossover(_pts((1e4, 0.1, (-1, 1)), (1e5, 1.0, (0.2, 1.8))))
    assert not st["change"] and "better at 100k" in st["text"]


# ---- the report from a sweep's small files, through the suite aggregate -----------------------------------------


CONTROL_DIV = [0.0, 0.010, 0.012, 0.020, 0.022, 0.030, 0.032]  # embeddings, then the six blocks (low: 1-2)


def _divergence(arm: str, seed: int) -> list[float] | None:
    """Constructed 1 - CKA per layer against MLM: the detour's lower third 6x the control's (seed jitter +-10%), the
    low-frozen arm's 1.2x, the mid-frozen arm's 5x; the upper blocks 1.5x for every arm."""
    low = {"clm_detour": 6.0, "freeze-low": 1.2, "freeze-mid": 5.0, "mlm-control": 1.0}.get(arm)
    if low is None:
        return None
    j = [1.0, 1.1, 0.9][seed]
    return [0.0] + [d * j * (low if i <= 2 else (1.0 if arm == "mlm-control" else 1.5))
                    for i, d in enumerate(CONTROL_DIV) if i > 0]  # fmt: skip


def _constructed_sweep(out: Path, effect: dict[int, float]) -> dict:
    """A real manifest (every arm x budgets x 3 pretraining seeds on the bio-ner suite) with constructed results: the
    detour's and the mid-frozen arm's scores are MLM's plus ``effect[budget]`` points, the low-frozen arm's and the
    control's MLM's, each plus a seed jitter (+-0.3; +-1.5 where the effect is 0, so that interval holds 0)."""
    from backend.sweeps import report as sweep_report
    from backend.sweeps.manifest import write_manifest
    from tests.conftest import require_shared

    for name in ("craft_pmc_oa_text", "ncbi_disease", "anatem", "bc2gm"):
        require_shared(name)
    s = budget_study.resolve_budget_study("quick", budgets=list(effect), seeds=3)
    m = budget_study.manifest({**s, "cka": None})  # the corpus as it is: no held-out split written for a report
    write_manifest(out, m)
    for c in m["cells"]:
        arm = c["values"]["arm"]
        budget = c["values"]["phases.main.tokens"]
        gain = effect[budget] if arm in ("clm_detour", "freeze-mid") else 0.0
        for seed, run in c["runs"].items():
            jitter = [0.3, -0.3, 0.0][int(seed)] * (5 if gain == 0 else 1)
            scores = {}
            for i, task in enumerate(("ncbi_disease", "anatem", "bc2gm")):
                base = 30 + 5 * i + int(seed)
                scores[task] = {"0": (base + (0.0 if arm == "mlm" else gain + jitter)) / 100}
            causal = arm not in ("mlm", "mlm-control")
            rec = {
                "suite_scores": scores,
                "suite_metrics": dict.fromkeys(scores, "f1"),
                "heldout_mlm_loss": 5.0 + (0.8 if causal else 0.0),
                "heldout_clm_loss": 7.0 - (2 if causal else 0),
            }
            div = _divergence(arm, int(seed))
            if div:
                rec.update(cka_divergence=sum(div) / len(div), cka_measure="debiased",
                           cka_by_measure={"debiased": {"mean": sum(div) / len(div), "layers": div}})  # fmt: skip
            (out / "results").mkdir(parents=True, exist_ok=True)
            (out / "results" / f"{run}.json").write_text(json.dumps(rec))
    sweep_report.write_report(out, png=False)
    return {**s, "cka": {**s["cka"], "measures": ["debiased"]}}


def test_the_report_names_the_flip_from_constructed_results(tmp_path):
    effect = {2_560: -3.0, 8_192: 0.0, 25_600: 3.0}
    s = _constructed_sweep(tmp_path / "sweep", effect)
    (tmp_path / "settings.json").write_text(json.dumps(s))
    rep = budget_study.write_report(tmp_path)
    st = rep["statements"]["CLM detour"]["mean_delta"]
    assert st["change"] and st["between"] == [2_560, 25_600] and st["from"] == "worse"
    pts = rep["panels"]["CLM detour"]
    assert [p["tokens"] for p in pts] == [2_560, 8_192, 25_600]
    assert pts[0]["mean_delta"]["value"] == pytest.approx(-3.0, abs=0.3) and pts[0]["verdict"] == "worse"
    assert pts[-1]["verdict"] == "better" and pts[-1]["poi"]["value"] == pytest.approx(1.0)
    assert {"MLM", "CLM detour"} <= set(rep["losses"]["heldout_clm_loss"])
    md = (tmp_path / "report.md").read_text()
    assert "The sign changes between 2.56k and 25.6k tokens" in md and "+1.2 to +2.8" in md
    assert "## From how many tokens does the detour pay on this base?\n\nFrom somewhere between 2.56k and 25.6k" in md
    assert "CKA divergence of CLM detour from MLM" in md
    assert rep["cka"]["CLM detour"][0]["mean"] == pytest.approx(sum(_divergence("clm_detour", 0)) / 7, rel=0.15)
    assert (tmp_path / "figures" / "crossover.html").exists()


def test_the_three_findings_per_budget_from_constructed_results(tmp_path):
    """Finding 2 from the control arm's divergence (6x in the lower third, replicated at every budget; the
    low-frozen arm near 1x), finding 3 only where the detour has a gain, the control's own verdict inconclusive."""
    s = _constructed_sweep(tmp_path / "sweep", {2_560: -3.0, 8_192: 0.0, 25_600: 3.0})
    (tmp_path / "settings.json").write_text(json.dumps(s))
    rows = {r["tokens"]: r for r in budget_study.write_report(tmp_path)["findings"]["budgets"]}
    for r in rows.values():
        low = r["low_layers"]["debiased"]
        assert low["ratio"] == pytest.approx(6.0, rel=0.01) and low["n"] == 3 and low["verdict"] == "replicated"
        assert low["ci95"][0] > 1 and r["freeze_low_ratio"]["debiased"]["ratio"] == pytest.approx(1.2, rel=0.01)
        assert r["control"]["verdict"] == "inconclusive"
    assert rows[25_600]["downstream"]["verdict"] == "better" and rows[25_600]["freeze"]["verdict"] == "replicated"
    assert rows[2_560]["freeze"]["verdict"] == "inconclusive"  # no gain to remove where the detour is worse
    md = (tmp_path / "report.md").read_text()
    assert "## The paper's three findings, per budget" in md and "6.0x [" in md and "5-44x" in md


def test_the_report_says_no_flip_when_the_detour_never_catches_up(tmp_path):
    s = _constructed_sweep(tmp_path / "sweep", {2_560: -4.0, 8_192: -3.0, 25_600: -2.0})
    (tmp_path / "settings.json").write_text(json.dumps(s))
    rep = budget_study.write_report(tmp_path)
    assert "not within the budgets tried" in rep["statements"]["CLM detour"]["mean_delta"]["text"]
    md = (tmp_path / "report.md").read_text()
    assert "Not within the budgets tried (2.56k-25.6k tokens): the detour is worse at 2.56k, 8.19k, 25.6k." in md


# ---- the plan, the presets and the command line ----------------------------------------------------------------


def test_every_preset_plans_runs_tokens_and_fine_tunes_and_says_when_no_rate_is_measured():
    from tests.conftest import require_shared

    require_shared("craft_pmc_oa_text")
    for name in budget_study.BUDGET_PRESETS:
        s = budget_study.resolve_budget_study(name)
        p = budget_study.plan(s, "cpu")
        assert p["runs"] == len(s["arms"]) * len(s["budgets"]) * s["seeds"] and len(s["arms"]) == 5
        assert p["tokens"] == int(sum(5 * s["seeds"] * b * 1.1 for b in s["budgets"]))
        assert p["finetunes"] == p["runs"] * 3 * (s["finetune"].get("seeds") or 3)
        assert p["total_s"] is None and "no training rate measured" in budget_study.plan_text(p)


def _rate(
    n_params: int,
    precision: str,
    device: str,
    tokens_per_s: float,
    seq_len: int,
    batch_size: int,
    threads: int = 1,
    load: float = 0.5,
    objective: str = "clm",
) -> None:
    """One measurement in this test's rate book, as the training loop records it."""
    from backend.engine import rates

    rates.record("train", n_params=n_params, size=rates.size_key(n_params), precision=precision, device=device,
                 objective=objective, seq_len=seq_len, batch_size=batch_size, world=1, threads=threads, steps=100,
                 seconds=10.0, tokens_per_s=tokens_per_s, load=load)  # fmt: skip


def test_the_plan_times_training_at_this_machines_measured_rate():
    from tests.conftest import require_shared

    require_shared("craft_pmc_oa_text")
    s = budget_study.resolve_budget_study("gpu")
    t = s["train"]
    _rate(budget_study.n_params(s), "bf16", "cuda", 500_000.0, t["seq_len"], t["batch_size"])
    p = budget_study.plan(s, "cuda")
    assert p["rate"] == 500_000.0
    assert p["train_s"] == pytest.approx(p["tokens"] / 500_000.0 + 8 * p["runs"])
    assert p["total_s"] == pytest.approx(p["train_s"] + p["finetune_s"])
    assert "500,000 tokens/s" in budget_study.plan_text(p) and "the 1 calm rate" in budget_study.plan_text(p)


def test_runs_side_by_side_add_up_only_where_each_had_part_of_the_cores(monkeypatch):
    """The quick study trains two runs at once on a 2-core CPU, one thread each: a rate recorded by a one-thread run
    counts twice, a rate recorded on both cores once (it already was the machine's whole throughput)."""
    from backend.engine.precision import resolve_precision
    from backend.replication import study_time
    from tests.conftest import require_shared

    require_shared("craft_pmc_oa_text")
    monkeypatch.setattr(study_time.os, "cpu_count", lambda: 2)
    s = budget_study.resolve_budget_study("quick")
    prec, t = resolve_precision("auto", "cpu")[0], s["train"]
    for threads, together in ((1, 2), (2, 1)):
        _rate(budget_study.n_params(s), prec, "cpu", 2_000.0, t["seq_len"], t["batch_size"], threads=threads)
        p = budget_study.plan(s, "cpu")
        assert p["together"] == together
        assert p["train_s"] == pytest.approx((p["tokens"] / 2_000.0 + 8 * p["runs"]) / together)
    assert "side by side" not in budget_study.plan_text(p)


def test_budgets_parse_and_refuse_clearly():
    assert budget_study.parse_budgets(["1e6", "1e7,1e8"]) == [1_000_000, 10_000_000, 100_000_000]
    for bad in (["1e6", "lots"], ["2.5"], ["-5"]):
        with pytest.raises(ConfigError, match="--budgets"):
            budget_study.parse_budgets(bad)
    with pytest.raises(ConfigError, match="from 2,560"):  # the decay (10%) must hold one step of 256 tokens
        budget_study.check_budgets([1_000, 20_000], 2_560)
    with pytest.raises(ConfigError, match="once"):
        budget_study.check_budgets([5_000, 5_000], 2_560)


def test_the_command_line_refuses_a_bad_budget_in_one_line(capsys):
    from backend.__main__ import main

    assert main(["replicate", "--budgets", "1e6", "lots", "--plan"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--budgets" in err[0] and "Traceback" not in err[0]


@pytest.mark.parametrize(
    "extra, says",
    [
        ([], "quick: 50 runs"),  # the default: every arm x 2 budgets x 5 pretraining seeds
        (["--no-interventions"], "quick: 20 runs"),  # the MLM / detour pair alone
        (["--suite", "configs/suites/ncbi-disease.yaml"], "50 fine-tunes"),  # one task: a suite of one
    ],
)
def test_replicate_plans_the_study_on_sweeps_with_its_suite(capsys, extra, says):
    from backend.__main__ import main
    from tests.conftest import require_shared

    for name in ("craft_pmc_oa_text", "ncbi_disease", "anatem", "bc2gm"):
        require_shared(name)
    assert main(["replicate", "--plan", *extra]) in (0, None)
    assert says in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--preset", "mini"], "--preset mini belonged to the retired one-task pipeline"),
        (["--study", "hybrid-splits", "--cka", "linear"], "--cka: the hybrid-splits study does not take it"),
        (["--study", "hybrid-splits", "--model", "x"], "--model: the hybrid-splits study does not take it"),
    ],
)
def test_a_flag_the_chosen_pipeline_would_not_read_is_refused(capsys, argv, says):
    from backend.__main__ import main

    assert main(["replicate", *argv, "--plan"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]


# ---- one tiny real run ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_default_study_runs_every_arm_end_to_end_and_keeps_only_small_files(tmp_path):
    """One budget, one pretraining seed, every arm (MLM, detour, control, both freezes) trained, fine-tuned on a
    suite (of one task: the default's three only multiply the fine-tunes, ~50 s of the suite) and measured with both
    CKA measures; the report then comes back from the small files alone."""
    from backend.__main__ import main
    from tests.conftest import require_shared

    for name in ("craft_pmc_oa_text", "ncbi_disease"):
        require_shared(name)
    out = tmp_path / "study"
    small = [
        "train.seq_len=32",
        "train.batch_size=2",
        "finetune.max_train_examples=8",
        "finetune.max_eval_examples=8",
        "finetune.max_len=32",
        "cka.n_texts=16",
        "cka.max_len=32",
    ]  # 640 tokens: one decay step of 64
    args = ["replicate", "--budgets", "640", "--pretrain-seeds", "1", "--seeds", "1", "--drop-weights",
            "--suite", "configs/suites/ncbi-disease.yaml", "--out", str(out)]  # fmt: skip
    args += [a for s in small for a in ("--set", s)]
    assert main(args) in (0, None)
    rep = json.loads((out / "report.json").read_text())
    assert set(rep["panels"]) == {"CLM detour", "MLM, another seed (control)", "CLM detour, low third frozen",
                                  "CLM detour, mid third frozen"}  # fmt: skip
    row = rep["findings"]["budgets"][0]
    assert row["tokens"] == 640 and set(row["low_layers"]) == {"debiased", "linear"}
    assert all(r["ratio"] > 0 and r["n"] == 1 and r["ci95"] is None for r in row["low_layers"].values())
    runs = list((out / "sweep" / "runs").glob("c*-s0"))
    assert len(runs) == 5 and not any((r / "final").exists() or (r / "checkpoints").exists() for r in runs)
    assert (out / "figures" / "crossover.html").exists() and (out / "timing.json").exists()
    (out / "report.md").unlink()
    assert main(["replicate", "--report-only", "--out", str(out)]) in (0, None)
    md = (out / "report.md").read_text()
    assert "## The paper's three findings, per budget" in md and "(1 seed)" in md and "## Each arm against MLM" in md


def test_the_gpu_preset_plans_bf16_runs_that_drop_their_weights(tmp_path):
    from tests.conftest import require_shared

    for name in ("craft_pmc_oa_text", "ncbi_disease", "anatem", "bc2gm"):
        require_shared(name)
    s = budget_study.resolve_budget_study("gpu", budgets=budget_study.parse_budgets(["1e6", "1e7", "1e8"]))
    budget_study.prepare_data(s, tmp_path)  # CKA texts held out of the corpus by whole documents
    m = budget_study.manifest(s)  # every run config validated, as on the GPU box
    assert m["base"]["train"]["precision"] == "bf16" and m["evaluation"]["drop_weights"]
    assert sorted({c["values"]["phases.main.tokens"] for c in m["cells"]}) == [10**6, 10**7, 10**8]
    assert len(m["cells"]) == 15 and len(m["seeds"]) == 5 and m["reference"] == "mlm"
    ev = m["evaluation"]
    assert ev["cka_measures"] == ["debiased", "linear"] and Path(ev["cka_texts"]).read_text().strip()
    assert m["base"]["data"]["corpus"] == str(tmp_path / "data" / "train.txt")


def test_the_corpus_split_drops_held_out_paragraphs_that_are_training_text(tmp_path):
    """A paragraph every article repeats (a licence line, a caption) stays in training only: the held-out file then
    passes the trainer's held-out check instead of refusing the study's runs."""
    from backend.engine.heldout_guard import check_disjoint
    from backend.replication.corpus import split_corpus

    src = tmp_path / "corpus"
    src.mkdir()
    boiler = "This article is distributed under the terms of an open licence that permits use and reproduction."
    for i in range(10):
        words = " ".join(f"w{i}x{j}" for j in range(30))
        (src / f"doc{i}.txt").write_text(f"{words} first\n\n{boiler}\n\n{words} second\n")
    split_corpus(src, tmp_path / "d", 0.2, 20, 0)
    held = (tmp_path / "d" / "heldout.txt").read_text()
    assert boiler not in held and held.count("first") == 2
    check_disjoint(
        {
            "heldout_file": str(tmp_path / "d" / "heldout.txt"),
            "corpus": str(tmp_path / "d" / "train.txt"),
            "text_column": "text",
            "hub_split": "train",
            "max_documents": None,
        }
    )

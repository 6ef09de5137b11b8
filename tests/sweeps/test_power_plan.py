"""Power before the run, from the commands: the quick study's plan names its detectable difference and the studies
its seed noise was measured in (the ones published in bench/results/crossover), says when it stands on another
evaluation size or on nothing (then offers the pilot, whose settings the plan reads), and sweep --plan and
evaluate --suite --plan say the same for a sweep and for two models on a suite."""

from __future__ import annotations

import json

import pytest

from backend.__main__ import main
from backend.core.paths import sweeps_dir
from backend.replication import budget_study as bs
from backend.replication import study_power
from backend.sweeps import variance
from tests.conftest import require_shared


@pytest.fixture
def bio_ner():
    for name in ("craft_pmc_oa_text", "ncbi_disease", "anatem", "bc2gm"):
        require_shared(name)


def test_replicate_plan_names_the_quick_studys_detectable_difference_and_its_source(bio_ner, capsys):
    assert main(["replicate", "--plan"]) == 0
    out = capsys.readouterr().out
    power = next(ln for ln in out.splitlines() if ln.startswith("  power: "))
    assert "±7.6 points at 5 pretraining seeds x 1 fine-tuning seed x 3 tasks" in power
    assert "ncbi_disease 80, anatem 80, bc2gm 80 test sentences" in power
    assert "measured at these settings in `bench/results/crossover/detour-study" in power
    assert "To detect 1 point: " in power and "pretraining seeds as planned" in power
    assert "quick: 50 runs" in out and "detects ±7.6 points" in out  # every preset's line says its power too


def test_another_evaluation_size_is_an_approximation_and_no_source_offers_the_pilot(bio_ner):
    more = study_power.detour_power(bs.resolve_budget_study("quick", overrides=["finetune.max_eval_examples=400"]))
    quick = study_power.detour_power(bs.resolve_budget_study("quick"))
    assert more["how"] == "near" and quick["how"] == "measured" and more["mde"] < quick["mde"]
    from backend.sweeps.power_plan import text

    assert "at other evaluation sentences" in text(more) and "(an approximation)" in text(more)
    none = study_power.detour_power(bs.resolve_budget_study("quick", overrides=["finetune.epochs=3"]))
    assert none["mde"] is None
    said = text(none, study_power.pilot_command("detour", "quick"))
    assert "not known yet" in said and "`python -m backend replicate --preset quick --pilot`" in said


def test_the_pilot_measures_the_studys_own_settings_at_both_seed_levels(bio_ner):
    s = bs.resolve_budget_study("quick")
    p = study_power.pilot_detour(s)
    assert p["arms"] == ["mlm", "clm_detour"] and p["budgets"] == s["budgets"][:1]
    assert p["seeds"] == 3 and p["finetune"]["seeds"] == 2 and p["cka"] is None
    same = lambda x: variance.signature(variance.finetune_tasks(x["suite"], x["finetune"]), x["model"])  # noqa: E731
    assert same(p) == same(s)  # its sweep is a source measured at the study's settings
    m = bs.manifest(p)
    assert len(m["cells"]) == 2 and len(m["seeds"]) == 3 and m["evaluation"]["hparams"]["seeds"] == 2


def test_sweep_plan_gives_the_same_power_for_the_same_design(bio_ner, capsys):
    sets = ["--eval-set", "seeds=1", "--eval-set", "epochs=2", "--eval-set", "lr=1e-3", "--eval-set", "max_len=64",
            "--eval-set", "max_train_examples=128", "--eval-set", "max_eval_examples=80"]  # fmt: skip
    argv = ["sweep", "--grid", "recipe=mlm,clm_detour", "--grid", "phases.main.tokens=2560,25600", "--seeds", "5",
            "--eval-suite", "configs/suites/bio-ner.yaml", *sets, "--set", "train.seq_len=64",
            "--set", "train.batch_size=4", "--plan"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "4 cells x 5 seeds = 20 runs" in out and "60 fine-tunes" in out
    assert "±7.6 points at 5 pretraining seeds x 1 fine-tuning seed x 3 tasks" in out
    assert not sweeps_dir().exists() or not any(sweeps_dir().iterdir())  # nothing queued


def _suite_folder(root, tasks, hparams, scores):
    """An earlier suite's small files: per task, two models' test F1 per seed."""
    d = root / "earlier"
    (d / "tasks").mkdir(parents=True)
    (d / "suite.json").write_text(json.dumps({"suite": "bio-ner"}))
    for t in tasks:
        models = [{"label": m, "runs": [{"seed": s, "status": "ok", "test": {"f1": v}} for s, v in enumerate(vals)]}
                  for m, vals in scores.items()]  # fmt: skip
        (d / "tasks" / t).mkdir()
        (d / "tasks" / t / "results.json").write_text(json.dumps({"primary_metric": "f1", "hparams": hparams,
                                                                  "models": models}))  # fmt: skip
    return d


def test_evaluate_suite_plan_reads_an_earlier_suite_at_the_same_settings(bio_ner, capsys):
    from backend.core import paths
    from backend.evaluation.suite import load_suite

    caps = ["--seeds", "3", "--epochs", "1", "--max-train-examples", "64", "--max-eval-examples", "40"]
    # one model twice: named apart, as a run needs
    argv = ["evaluate", "--suite", "configs/suites/bio-ner.yaml", "--models", "detour-tiny-en", "detour-tiny-en",
            "--labels", "A", "B", *caps, "--plan"]  # fmt: skip
    assert main(argv) == 0
    assert "Detectable difference: not known yet" in capsys.readouterr().out  # no suite ran here at these settings
    hp = {**load_suite("configs/suites/bio-ner.yaml")["tasks"][0]["hparams"], "epochs": 1,
          "max_train_examples": 64, "max_eval_examples": 40}  # fmt: skip
    _suite_folder(paths.evals_dir(), ["ncbi_disease", "anatem", "bc2gm"], hp,
                  {"A": [0.20, 0.24, 0.18, 0.22], "B": [0.17, 0.25, 0.15, 0.21]})  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Smallest detectable difference between two of these models" in out
    assert "3 fine-tuning seeds x 3 tasks" in out
    assert "earlier" in out and "These checkpoints only: pretraining variance is not part of it" in out

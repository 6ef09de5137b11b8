"""A recipe is a timeline of phases (issue 26): the list form, the presets that expand to it, and what validate
refuses. No training here (see test_timeline_bitwise.py for weights)."""

from __future__ import annotations

import pytest

from backend.core.errors import ConfigError
from backend.detour.recipe import build_phases, expand_phases, split_pair
from backend.engine.config import load_config

SMALL = ["train.seq_len=64", "train.batch_size=4"]  # 256 tokens per step
TPS = 256


def _list(phases: list[dict], *sets: str, **top) -> dict:
    return load_config({"phases": phases, **top}, [*SMALL, *sets])


def test_a_list_without_recipe_is_the_recipe_and_phases_keep_their_order_and_settings():
    cfg = _list(
        [
            {"objective": "mlm", "tokens": 512, "mlm_probability": 0.3, "shape": "warmup_constant", "warmup_steps": 1},
            {"name": "detour", "objective": "clm", "steps": 4, "freeze": {"layers": "0-1", "embeddings": True}},
            {"objective": "mlm", "fraction": 0.25, "mlm_probability": 0.15, "shape": "linear", "final_lr_ratio": 0.2},
        ],
        "train.total_tokens=2048",
    )
    assert cfg["recipe"] == "custom"
    a, b, c = build_phases(cfg, num_layers=4)
    assert [(p.name, p.objective, p.causal, p.steps) for p in (a, b, c)] == [
        ("p1-mlm", "mlm", False, 2),
        ("detour", "clm", True, 4),
        ("p3-mlm", "mlm", False, 2),
    ]
    assert (a.lr_factor(0), a.lr_factor(1)) == (1.0, 1.0)  # warm-up of one step
    assert b.freeze_layers == (0, 1) and b.freeze_embeddings and not b.freeze_head and b.lr_factor(0) == 1.0
    assert c.lr_factor(1) == pytest.approx(0.2 + 0.8 * 0.5) and c.mlm_probability == 0.15
    with pytest.raises(ConfigError) as err:  # freeze ranges are checked against the model
        build_phases(cfg, num_layers=1)
    assert err.value.key == "phases[1].freeze.layers"


def test_expand_phases_is_contiguous_plain_data_with_the_lr_curve():
    cfg = load_config(None, [*SMALL, "recipe=clm_detour", "phases.main.steps=20", "phases.decay.steps=4"])
    tl = expand_phases(cfg)
    assert [(d["name"], d["attention"], d["mlm_probability"]) for d in tl] == [
        ("main", "causal", None),
        ("decay", "bidirectional", 0.15),
    ]
    assert tl[0]["start_tokens"] == 0 and tl[0]["end_tokens"] == tl[1]["start_tokens"] == 20 * TPS
    assert tl[1]["end_tokens"] == 24 * TPS and tl[1]["tokens"] == 4 * TPS
    assert tl[0]["lr"][0] == [0, pytest.approx(0.5)] and tl[1]["lr"][0] == [20 * TPS, 1.0]  # 2 warm-up steps
    assert tl[1]["lr"][-1] == [24 * TPS, pytest.approx(0.1)]
    assert expand_phases(load_config(None, [*SMALL, "phases.main.steps=10"]))[0]["objective"] == "clm"  # pair


@pytest.mark.parametrize("share", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_hybrid_splits_share_budget_and_lr_warmup_and_drop_empty_parts(share):
    cfg = load_config(None, [*SMALL, "recipe=hybrid", f"hybrid.clm_share={share}", "hybrid.tokens=25600"])
    phases = build_phases(cfg)
    assert sum(p.steps for p in phases) == 100
    assert [p.objective for p in phases] == ["clm"] * (share > 0) + ["mlm"] * (share < 1)
    assert phases[0].steps == (round(share * 100) or 100) and phases[0].warmup_steps == 10  # same LR for every split
    assert all(p.mlm_probability == 0.40 for p in phases if p.objective == "mlm")  # the seed paper's CPT rate


def test_hybrid_decay_and_model_from_a_run_or_scratch_both_allowed():
    scratch = ["model.name=from_scratch", "model.from_scratch={num_hidden_layers: 2}", "model.tokenizer=detour-tiny-en"]
    cfg = load_config(None, [*SMALL, "recipe=hybrid", "hybrid.clm_share=0.5", "hybrid.tokens=25600",
                             "hybrid.decay_fraction=0.1", *scratch])  # fmt: skip
    clm, mlm, decay = build_phases(cfg)
    assert (clm.steps, mlm.steps, decay.steps) == (50, 40, 10)
    assert decay.objective == "mlm" and decay.schedule == "1-sqrt" and decay.mlm_probability == 0.4
    with pytest.raises(ConfigError) as err:  # a decay longer than the MLM part would change objective mid-decay
        build_phases(load_config(None, [*SMALL, "recipe=hybrid", "hybrid.clm_share=0.95", "hybrid.tokens=25600",
                                        "hybrid.decay_fraction=0.1"]))  # fmt: skip
    assert err.value.key == "hybrid.decay_fraction"
    with pytest.raises(ConfigError) as err:  # CLM part shorter than the shared LR warm-up
        build_phases(load_config(None, [*SMALL, "recipe=hybrid", "hybrid.clm_share=0.05", "hybrid.tokens=25600"]))
    assert err.value.key == "hybrid.clm_share"


def test_mask_schedule_splits_the_budget_over_the_rates():
    cfg = load_config(None, [*SMALL, "recipe=mask_schedule", "mask_schedule.tokens=76800"])
    a, b, c = build_phases(cfg)
    assert [(p.name, p.mlm_probability, p.steps) for p in (a, b, c)] == [
        ("mask30", 0.30, 100),
        ("mask15", 0.15, 100),
        ("mask5", 0.05, 100),
    ]
    assert a.warmup_steps == 30 and b.schedule == "constant" and c.schedule == "1-sqrt"
    shares = load_config(None, [*SMALL, "recipe=mask_schedule", "mask_schedule.tokens=76800",
                                "mask_schedule.rates=[0.3,0.1]", "mask_schedule.shares=[0.75,0.25]"])  # fmt: skip
    assert [p.steps for p in build_phases(shares)] == [225, 75]
    with pytest.raises(ConfigError) as err:
        load_config(None, ["recipe=mask_schedule", "mask_schedule.shares=[0.5,0.4,0.1,0.0]"])
    assert err.value.key == "mask_schedule.shares[3]"


def test_pair_with_a_list_trains_its_baseline_clm_replaced_by_mlm_same_budget_and_lr():
    cfg = _list(
        [
            {"objective": "clm", "tokens": 2560, "shape": "warmup_constant", "warmup_tokens": 512},
            {"objective": "mlm", "tokens": 512, "mlm_probability": 0.15, "shape": "1-sqrt"},
        ],
        "pair.mlm_probability=0.4",
        recipe="pair",
    )
    (r1, detour), (r2, mlm) = split_pair(cfg)
    assert (r1, r2, detour["recipe"], mlm["recipe"]) == ("detour", "mlm", "custom", "custom")
    pd, pm = build_phases(detour), build_phases(mlm)
    assert [p.objective for p in pd] == ["clm", "mlm"] and [p.objective for p in pm] == ["mlm", "mlm"]
    assert pm[0].mlm_probability == 0.4 and pm[1].mlm_probability == 0.15
    assert [(p.steps, p.schedule, p.warmup_steps) for p in pd] == [(p.steps, p.schedule, p.warmup_steps) for p in pm]


def test_sweep_keys_are_settable_with_set():
    cfg = load_config(None, ["recipe=hybrid", "hybrid.clm_share=0.25", "hybrid.tokens=1e6", "train.seed=3"])
    assert (cfg["hybrid"]["clm_share"], cfg["hybrid"]["tokens"], cfg["train"]["seed"]) == (0.25, 1_000_000, 3)
    listed = _list([{"objective": "clm", "tokens": 512}, {"objective": "mlm", "tokens": 512, "mlm_probability": 0.3}],
                   "phases.1.mlm_probability=0.2", "phases.0.name=cl")  # fmt: skip
    assert listed["phases"][1]["mlm_probability"] == 0.2 and build_phases(listed)[0].name == "cl"
    with pytest.raises(ConfigError) as err:
        _list([{"objective": "clm", "tokens": 512}], "phases.main.tokens=5")
    assert "index" in str(err.value)


MLM = {"objective": "mlm", "tokens": 512, "mlm_probability": 0.3}


@pytest.mark.parametrize(
    ("phases", "sets", "key", "says"),
    [
        ([], [], "phases", "empty list"),
        ([{"objective": "mlm", "mlm_probability": 0.3}], [], "phases[0]", "an empty phase"),
        ([{**MLM, "tokens": 0}], [], "phases[0].tokens", "(0, 1000000000000000]"),
        ([{"objective": "mlm", "tokens": 512}], [], "phases[0].mlm_probability", "needs its masking rate"),
        ([{"objective": "clm", "tokens": 512, "mlm_probability": 0.3}], [], "phases[0].mlm_probability", "CLM"),
        ([MLM, {"objective": "bogus", "tokens": 5}], [], "phases[1].objective", "allowed: mlm"),
        ([{**MLM, "shape": "cosine"}], [], "phases[0].shape", "allowed: warmup_constant"),
        ([{**MLM, "steps": 3}], [], "phases[0].steps", "one budget"),
        ([{**MLM, "tokens": None, "fraction": 0.5}], [], "phases[0].fraction", "train.total_tokens"),
        ([MLM, {**MLM, "tokens": None, "fraction": 0.5}], ["train.total_tokens=2048"], "train.total_tokens",
         "add up to 1,536"),
        ([MLM, {**MLM, "name": "p1-mlm"}], [], "phases[1].name", "another phase"),
        ([{**MLM, "warmup_tokens": 5}], [], "phases[0].warmup_tokens", "warmup_constant"),
        ([{**MLM, "lr": 3}], [], "phases[0].lr", "unknown key"),
    ],
)  # fmt: skip
def test_validate_refuses_a_bad_list_naming_the_key(phases, sets, key, says):
    with pytest.raises(ConfigError) as err:
        _list(phases, *sets)
    assert err.value.key == key and says in str(err.value)


def test_recipe_and_phases_must_agree():
    with pytest.raises(ConfigError) as err:
        _list([MLM], recipe="clm_detour")
    assert err.value.key == "recipe" and "custom" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_config(None, ["recipe=custom"])
    assert err.value.key == "phases"


def test_a_causal_phase_on_a_model_that_cannot_be_causal_is_refused(tmp_path):
    from transformers import DistilBertConfig, DistilBertForMaskedLM

    from backend.runs.preflight import check

    # a whole model (weights too): a name is checked whole where it is resolved, before its family is read
    config = DistilBertConfig(n_layers=2, dim=32, hidden_dim=64, n_heads=2, vocab_size=128)
    DistilBertForMaskedLM(config).save_pretrained(tmp_path)
    cfg = _list([MLM, {"objective": "clm", "tokens": 512, "name": "detour"}], f"model.name={tmp_path}")
    with pytest.raises(ConfigError) as err:
        check(cfg, check_data=False)
    assert err.value.key == "model.name" and "phase 'detour' is CLM" in str(err.value)


def test_the_example_config_trains_the_five_splits_on_one_budget():
    from backend.core.paths import REPO_ROOT

    path = REPO_ROOT / "configs" / "hybrid_splits.yaml"
    splits = [build_phases(load_config(path, [f"hybrid.clm_share={x}"])) for x in (0, 0.25, 0.5, 0.75, 1)]
    assert len({sum(p.steps for p in s) for s in splits}) == 1
    assert [[p.objective for p in s] for s in splits] == [["mlm"]] + [["clm", "mlm"]] * 3 + [["clm"]]
    assert len({(s[0].schedule, s[0].warmup_steps) for s in splits}) == 1  # one LR shape for every split


def test_a_list_survives_the_launch_command_and_fractions_must_cover_the_total():
    import shlex

    from backend.runs.jobs import command_preview

    cfg = _list([{"objective": "clm", "tokens": 1000, "name": "a"},
                 {**MLM, "freeze": {"layers": "0-1"}}], recipe="pair")  # fmt: skip
    argv = shlex.split(command_preview(cfg)["python"])
    again = load_config(None, [argv[i + 1] for i, a in enumerate(argv) if a == "--set"])
    assert again["recipe"] == "pair" and build_phases(split_pair(again)[1][1]) == build_phases(split_pair(cfg)[1][1])
    with pytest.raises(ConfigError) as err:
        _list([{**MLM, "tokens": None, "fraction": 0.5}, {**MLM, "tokens": None, "fraction": 0.4}],
              "train.total_tokens=1000")  # fmt: skip
    assert err.value.key == "train.total_tokens" and "add up to 900" in str(err.value)


@pytest.mark.slow
def test_a_listed_pair_trains_its_baseline_on_the_same_data(tiny_modernbert_dir, one_torch_thread):
    from backend.engine.rundir import read_metrics
    from backend.runs.train import prepare_runs, train_run
    from conftest import tiny_train_cfg

    base = tiny_train_cfg(tiny_modernbert_dir, "lp", recipe="pair")
    base["phases"] = [{"objective": "clm", "steps": 3, "name": "detour"},
                      {"objective": "mlm", "steps": 2, "mlm_probability": 0.15, "shape": "1-sqrt"}]  # fmt: skip
    runs = prepare_runs(load_config(base))
    assert [r.name for r in runs] == ["lp-detour", "lp-mlm"]
    rows = {}
    for run in runs:
        assert train_run(run)["state"] == "done"
        rows[run.name] = read_metrics(run)
    phases = {n: [(r["phase"], r["objective"], r["mlm_probability"]) for r in m if r["type"] == "phase"]
              for n, m in rows.items()}  # fmt: skip
    assert phases == {"lp-detour": [("detour", "clm", None), ("p2-mlm", "mlm", 0.15)],
                      "lp-mlm": [("detour", "mlm", 0.3), ("p2-mlm", "mlm", 0.15)]}  # fmt: skip
    hashes = {n: [(r["step"], r["data_hash"], r["lr"]) for r in m if r["type"] == "train"] for n, m in rows.items()}
    assert hashes["lp-detour"] == hashes["lp-mlm"]  # same batches, same LR, step by step

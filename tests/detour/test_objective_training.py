"""The new objectives and presets train end to end: each phase's rows say its objective, attention and settings;
every objective the run trains gets its held-out loss (``eval_<name>_loss``) next to the MLM and CLM ones."""

from __future__ import annotations

import math

import pytest

from backend.engine.config import load_config


@pytest.mark.slow
def test_a_list_of_the_new_objectives_trains_with_a_held_out_loss_each(tiny_modernbert_dir, one_torch_thread):
    from backend.engine.rundir import read_metrics
    from backend.runs.train import prepare_runs, train_run
    from conftest import tiny_train_cfg

    base = tiny_train_cfg(tiny_modernbert_dir, "objs", recipe="mlm", logging__eval_every=100)
    base["recipe"] = "custom"
    base["phases"] = [{"objective": "mntp", "steps": 2}, {"objective": "prefix", "steps": 2, "prefix_share": 0.25},
                      {"objective": "mixed", "steps": 2, "causal_share": 0.5}]  # fmt: skip
    [run] = prepare_runs(load_config(base))
    assert train_run(run)["state"] == "done", (run / "train.log").read_text()[-2000:]
    rows = read_metrics(run)
    phases = [(r["objective"], r["attention"], r["prefix_share"], r["causal_share"]) for r in rows
              if r["type"] == "phase"]  # fmt: skip
    assert phases == [("mntp", "bidirectional", None, None), ("prefix", "prefix", 0.25, None),
                      ("mixed", "per-sequence", None, 0.5)]  # fmt: skip
    last = [r for r in rows if r["type"] == "eval"][-1]
    keys = {"eval_mlm_loss", "eval_mlm_accuracy", "eval_clm_loss", "eval_mntp_loss", "eval_mntp_accuracy",
            "eval_prefix_loss", "eval_mixed_loss"}  # fmt: skip
    assert keys <= set(last) and all(math.isfinite(last[k]) and last[k] >= 0 for k in keys)
    assert last["eval_mixed_loss"] != last["eval_mlm_loss"] and last["eval_prefix_loss"] != last["eval_clm_loss"]


def test_the_presets_expand_and_refuse_bad_blocks():
    from backend.core.errors import ConfigError
    from backend.detour.recipe import build_phases

    sets = ["train.seq_len=32", "train.batch_size=2", "train.warmup_tokens=64"]
    alt = build_phases(load_config(None, ["recipe=alternate", "alternate.tokens=1536", *sets]))
    assert [(p.name, p.objective, p.steps) for p in alt] == [
        ("b1-clm", "clm", 4),
        ("b2-mlm", "mlm", 16),
        ("b3-clm", "clm", 4),
    ]  # AntLM's 4 / 16 / 4
    assert alt[1].settings == {"mlm_probability": 0.15} and alt[-1].schedule == "1-sqrt"
    mixed = build_phases(load_config(None, ["recipe=mixed", "mixed.tokens=6400", "mixed.causal_share=0.25", *sets]))
    assert [(p.objective, p.steps, p.schedule) for p in mixed] == [("mixed", 90, "warmup_constant"),
                                                                   ("mixed", 10, "1-sqrt")]  # fmt: skip
    assert mixed[0].settings == {"causal_share": 0.25, "mlm_probability": 0.15} and mixed[0].warmup_steps == 1
    for blocks, says in (("clm", "weight after a colon"), ("bert:4", "'bert' is no objective"), ("", "e.g.")):
        with pytest.raises(ConfigError, match=says) as err:
            load_config(None, ["recipe=alternate", f"alternate.blocks={blocks}"])
        assert err.value.key == "alternate.blocks"


def test_per_row_attention_takes_sdpa_under_auto_and_refuses_an_explicit_flex(monkeypatch):
    """A phase attending per row needs dense masks: ``auto`` (flex or flash on CUDA) resolves to sdpa for it, saying
    why; an explicit flex_attention is refused naming the phase; the two existing objectives keep flex."""
    from backend.core.errors import ConfigError
    from backend.engine.models import model_config_of
    from backend.runs import preflight

    monkeypatch.setattr(
        preflight,
        "resolve_attn_implementation",
        lambda req, conf: ("flex_attention", "auto: flex on CUDA") if req == "auto" else (req, "set in the config"),
    )  # as on a GPU
    cfg = load_config(None, ["recipe=mixed", "train.seq_len=32", "train.batch_size=2"])
    mconf = model_config_of(cfg["model"])
    impl, why = preflight.resolve_run_attention(cfg, mconf)
    assert impl == "sdpa" and "phase 'mixed' (Mixed (GPT-BERT)) attends per row" in why
    flex = load_config(None, ["recipe=mixed", "model.attn_implementation=flex_attention"])
    with pytest.raises(ConfigError, match=r"phase 'mixed' \(Mixed \(GPT-BERT\)\) attends per row.*sdpa or eager"):
        preflight.resolve_run_attention(flex, mconf)
    assert preflight.resolve_run_attention(load_config(None, ["recipe=clm_detour"]), mconf)[0] == "flex_attention"

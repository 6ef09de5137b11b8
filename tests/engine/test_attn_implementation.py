"""model.attn_implementation auto: the fastest kernel the training machine has, decided there, logged and recorded;
explicit values that cannot train here are refused before a run starts; every loader accepts auto."""

from __future__ import annotations

import pytest
import yaml

from backend.core.errors import ConfigError
from backend.engine import models
from backend.engine.models import build_from_scratch, load_masked_lm, resolve_attn_implementation, scratch_config
from backend.runs.train import prepare_runs, train_run
from conftest import TINY_BERT, TINY_MODERNBERT, bundled_tokenizer, tiny_train_cfg

MODERNBERT = scratch_config(TINY_MODERNBERT)


def _flash(ok: bool):
    return lambda: (True, "flash_attn 2.8.3") if ok else (False, "flash_attn does not import (ImportError: no)")


@pytest.mark.parametrize(
    ("config", "flash", "want"),
    [
        (MODERNBERT, True, "flash_attention_2"),
        (MODERNBERT, False, "flex_attention"),
        (scratch_config(TINY_BERT), True, "sdpa"),  # the BERT causal switch is a 4D mask
        (scratch_config({**TINY_MODERNBERT, "attention_dropout": 0.1}), False, "sdpa"),  # flex has no dropout
    ],
)
def test_auto_on_cuda(monkeypatch, config, flash, want):
    monkeypatch.setattr(models, "flash_attn_status", _flash(flash))
    got, why = resolve_attn_implementation("auto", config, device="cuda")
    assert got == want and why.startswith("auto: ")
    if want == "flex_attention":
        assert "does not import" in why  # says why flash was not taken


def test_auto_on_cpu_is_sdpa_whatever_is_installed(monkeypatch):
    monkeypatch.setattr(models, "flash_attn_status", _flash(True))
    assert resolve_attn_implementation("auto", MODERNBERT, device="cpu") == (
        "sdpa",
        "auto: no CUDA device (flex_attention has no backward on CPU)",
    )


def test_explicit_values_are_kept_where_they_can_train(monkeypatch):
    monkeypatch.setattr(models, "flash_attn_status", _flash(True))
    for impl, device in [("sdpa", "cpu"), ("eager", "cpu"), ("flex_attention", "cuda"), ("flash_attention_2", "cuda")]:
        assert resolve_attn_implementation(impl, MODERNBERT, device) == (impl, "set in the config")


@pytest.mark.parametrize(
    ("impl", "device", "config", "says"),
    [
        ("flex_attention", "cpu", MODERNBERT, "no flex backward on CPU"),
        ("flex_attention", "cuda", scratch_config({**TINY_MODERNBERT, "attention_dropout": 0.1}), "dropout"),
        ("flash_attention_2", "cuda", MODERNBERT, "does not import"),
    ],
)
def test_explicit_values_that_cannot_train_here_are_refused(monkeypatch, impl, device, config, says):
    monkeypatch.setattr(models, "flash_attn_status", _flash(False))
    with pytest.raises(ConfigError, match="model.attn_implementation") as err:
        resolve_attn_implementation(impl, config, device)
    assert says in str(err.value) and "use auto or sdpa" in str(err.value)


def test_every_loader_accepts_auto(tiny_modernbert_dir):
    for model in (
        load_masked_lm(str(tiny_modernbert_dir), attn_implementation="auto"),
        build_from_scratch(TINY_MODERNBERT, bundled_tokenizer(), attn_implementation="auto"),
    ):
        assert model.config._attn_implementation == "sdpa"  # no CUDA here


def test_a_run_logs_and_records_the_choice(tiny_modernbert_dir):
    cfg = tiny_train_cfg(tiny_modernbert_dir, "attn", recipe="mlm", **{"phases.main.steps": 2, "phases.decay.steps": 0})
    assert cfg["model"]["attn_implementation"] == "auto"  # the default
    (run,) = prepare_runs(cfg)
    assert train_run(run)["state"] == "done"
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["model"]["attn_implementation"] == "auto"  # what was asked: a queued run may train elsewhere
    assert saved["_meta"]["attn_implementation"] == {
        "requested": "auto",
        "resolved": "sdpa",
        "why": "auto: no CUDA device (flex_attention has no backward on CPU)",
    }
    assert "attention: sdpa (auto: no CUDA device" in (run / "train.log").read_text()


def test_launch_refuses_flex_attention_without_cuda(tiny_modernbert_dir, isolated_runs_dir):
    cfg = tiny_train_cfg(tiny_modernbert_dir, "flex", **{"model.attn_implementation": "flex_attention"})
    with pytest.raises(ConfigError, match="flex_attention trains only on CUDA"):
        prepare_runs(cfg)
    assert not (isolated_runs_dir / "flex-detour").exists()  # nothing created

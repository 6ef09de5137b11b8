"""Bad input is refused before training with a specific message, and nothing is overwritten."""

from __future__ import annotations

import time

import pytest

from backend.core.errors import ConfigError, DataError, DetourError, ModelSpecError
from backend.engine.config import load_config
from backend.runs.train import prepare_runs
from conftest import backend_cli, tiny_train_cfg


@pytest.mark.parametrize(
    "override, key, words",
    [
        ("train.lr=0", "train.lr", "(0, 1]"),
        ("phases.main.mlm_probability=1.5", "phases.main.mlm_probability", "(0, 1)"),
        ("phases.decay.mlm_probability=0", "phases.decay.mlm_probability", "(0, 1)"),
        ("phases.main.tokens=0", "phases.main.tokens", "budget"),
        ("recipe=bert", "recipe", "clm_detour"),
        ("name=../escape", "name", "'/' or '..'"),
        ("name=a/b", "name", "'/' or '..'"),
        ("train.precision=fp8", "train.precision", "bf16"),
        ("phases.main.freeze.layers=7-3", "phases.main.freeze.layers", "low-high"),
        ("train.betas=[0.9]", "train.betas", "two numbers"),
        ("train.nope=1", "train.nope", "unknown key"),
        ("train.compile=yes please", "train.compile", "true or false"),
        ("train.data_seed=-1", "train.data_seed", "[0, 4294967295]"),
    ],
)
def test_config_errors_name_key_value_and_allowed(override, key, words):
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    assert e.value.key == key and words in str(e.value) and repr(e.value.value) in str(e.value)


def test_yaml_file_and_overrides(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("recipe: clm_detour\ntrain:\n  lr: 3.0e-4\n")
    cfg = load_config(p, ["train.lr=1e-4"])
    assert cfg["recipe"] == "clm_detour" and cfg["train"]["lr"] == 1e-4
    p.write_text("train: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(p)


def test_freeze_range_outside_model(tiny_modernbert_dir):
    with pytest.raises(ConfigError, match=r"4 layers \(0-3\)"):
        prepare_runs(tiny_train_cfg(tiny_modernbert_dir, **{"phases.main.freeze.layers": "2-7"}))


def test_compile_without_a_compiler_is_refused_before_the_run_exists(
    tiny_modernbert_dir, isolated_runs_dir, monkeypatch
):
    import shutil

    import torch

    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(shutil, "which", lambda _: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="C\\+\\+ compiler"):
        prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "nocc", **{"train.compile": "true"}))
    assert not (isolated_runs_dir / "nocc").exists()


def test_model_errors(tmp_path, monkeypatch):
    import huggingface_hub.constants

    (tmp_path / "notamodel").mkdir()
    with pytest.raises(ModelSpecError, match="not a model"):
        prepare_runs(load_config(None, [f"model.name={tmp_path / 'notamodel'}"]))
    with pytest.raises(ModelSpecError, match="no such path"):
        prepare_runs(load_config(None, ["model.name=./missing/model"]))
    # an unknown hub id while offline: a clear message, not a stack trace. huggingface_hub reads HF_HUB_OFFLINE once,
    # when it is imported (before this test in a full run): the variable alone left it trying the network for 23 s
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # backend.engine.hub_cache reads the variable
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # transformers asks huggingface_hub
    started = time.monotonic()
    with pytest.raises(ModelSpecError, match="hub"):
        prepare_runs(load_config(None, ["model.name=nobody/no-such-model-xyz"]))
    assert time.monotonic() - started < 10, "offline, the unknown hub id was still looked for on the network"


def test_architecture_that_cannot_be_causal_is_refused(tmp_path):
    from transformers import DistilBertConfig, DistilBertForMaskedLM

    from conftest import bundled_tokenizer

    tok = bundled_tokenizer()
    m = DistilBertForMaskedLM(DistilBertConfig(vocab_size=len(tok), dim=32, hidden_dim=64, n_layers=1, n_heads=2))
    m.save_pretrained(tmp_path / "distil")
    tok.save_pretrained(tmp_path / "distil")
    with pytest.raises(ConfigError, match="causal"):
        prepare_runs(load_config(None, [f"model.name={tmp_path / 'distil'}", "recipe=clm_detour"]))


@pytest.mark.parametrize(
    "content, words",
    [(b"", "no text"), (b"\x00\x01\x02binary" * 10, "binary"), (b"short text.", "fewer than one batch")],
)
def test_bad_corpora(tmp_path, tiny_modernbert_dir, content, words):
    f = tmp_path / "corpus.txt"
    f.write_bytes(content)
    with pytest.raises(DataError, match=words):
        prepare_runs(tiny_train_cfg(tiny_modernbert_dir, **{"data.corpus": str(f)}))


def test_wrong_column(tmp_path, tiny_modernbert_dir):
    f = tmp_path / "c.jsonl"
    f.write_text('{"body": "hello"}\n{"body": "world"}\n')
    with pytest.raises(DataError, match="columns found: body"):
        prepare_runs(tiny_train_cfg(tiny_modernbert_dir, **{"data.corpus": str(f)}))


def test_existing_run_is_never_overwritten(tiny_modernbert_dir, isolated_runs_dir):
    (d,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "same", recipe="mlm"))
    (d / "precious.txt").write_text("keep")
    with pytest.raises(ConfigError, match="try 'same-2'"):
        prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "same", recipe="mlm"))
    assert (d / "precious.txt").read_text() == "keep"


def test_cli_prints_one_clean_error_line(tmp_path):
    r = backend_cli("train", "--set", "phases.main.mlm_probability=2", timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: config key 'phases.main.mlm_probability': got 2; must be in (0, 1)"
    ]
    assert issubclass(ConfigError, DetourError)


def test_an_empty_or_foreign_tokenizer_folder_is_named_as_a_tokenizer_problem(tmp_path):
    """An empty tokenizer folder was reported as "not a model (no config.json)": the user looked for the wrong file."""
    from backend.engine.models import ModelSpecError, resolve_tokenizer

    empty = tmp_path / "tok"
    empty.mkdir()
    with pytest.raises(ModelSpecError, match="tokenizer '.*': the folder is empty"):
        resolve_tokenizer(str(empty))
    (empty / "notes.txt").write_text("x")
    with pytest.raises(ModelSpecError, match="no tokenizer.json or tokenizer_config.json"):
        resolve_tokenizer(str(empty))

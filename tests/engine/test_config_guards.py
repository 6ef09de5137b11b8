"""Issue 25, mechanism 2 for configs: values that parse but mean nonsense are refused up front, naming the line
or the key."""

from __future__ import annotations

import pytest

from backend.core.errors import ConfigError
from backend.engine.config import load_config


@pytest.mark.parametrize(
    "text, key, lines",
    [
        ("train:\n  lr: 1.0e-3\nname: x\ntrain:\n  seed: 3\n", "train", "lines 1 and 4"),  # a block twice
        ("train:\n  lr: 1.0e-3\n  batch_size: 4\n  lr: 2.0e-4\n", "lr", "lines 2 and 4"),  # a key twice in a block
        ("phases:\n  main:\n    tokens: 1000\n    tokens: 2000\n", "tokens", "lines 3 and 4"),  # nested deeper
    ],
)
def test_duplicate_yaml_keys_are_refused_naming_the_lines(tmp_path, text, key, lines):
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=f"key '{key}' appears twice \\({lines}\\)") as e:
        load_config(f)
    assert str(f) in str(e.value) and "\n" not in str(e.value)


def test_a_run_config_with_a_duplicate_key_is_refused(tmp_path):
    from backend.engine.rundir import read_config

    (tmp_path / "config.yaml").write_text("name: r\nrecipe: mlm\nname: s\n")
    with pytest.raises(ConfigError, match="key 'name' appears twice"):
        read_config(tmp_path)


def test_yaml_merge_keys_may_still_be_overridden():
    from backend.core.strict_yaml import load

    assert load("x: &x {a: 1}\ny:\n  <<: *x\n  a: 2\n") == {"x": {"a": 1}, "y": {"a": 2}}


def test_a_misspelt_key_gets_a_did_you_mean(tmp_path):
    with pytest.raises(ConfigError, match="unknown key; did you mean 'grad_accum'"):
        load_config(None, ["train.grad_acum=2"])
    f = tmp_path / "c.yaml"
    f.write_text("trian:\n  lr: 1.0e-3\n")
    with pytest.raises(ConfigError, match="did you mean 'train'"):
        load_config(f)


def test_a_key_set_twice_on_the_command_line_is_refused():
    with pytest.raises(ConfigError, match="'train.seq_len'.*given twice on the command line"):
        load_config(None, ["train.seq_len=64", "train.seq_len=128"])


def test_an_lr_warmup_longer_than_the_first_phase_is_refused(tiny_modernbert_dir):
    from backend.detour.budget import check_step_fits

    cfg = load_config(None, ["recipe=mlm", "train.warmup_tokens=1000000000"])
    with pytest.raises(ConfigError, match="train.warmup_tokens.*longer than the first phase 'main'"):
        check_step_fits(cfg)
    check_step_fits(load_config(None, ["recipe=mlm", "train.warmup_tokens=100000"]))

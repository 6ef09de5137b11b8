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

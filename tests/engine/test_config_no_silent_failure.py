"""Numbers and names the schema must refuse before anything runs (issue 19, cases 1, 3 and 4; issue 18 part 3).

NaN fails every comparison, so a range check written with ``<`` / ``>`` lets it through; a name pattern ending in
``$`` lets a trailing newline through; a pair name that fits alone may not fit with ``-detour`` appended.
"""

from __future__ import annotations

import pytest

from backend.core.errors import ConfigError
from backend.engine.config import load_config
from conftest import backend_cli


@pytest.mark.parametrize(
    "key",
    [
        "train.max_grad_norm",
        "phases.decay.final_lr_ratio",
        "train.weight_decay",
        "train.eps",
        "phases.main.mlm_probability",
        "phases.decay.fraction",
        "data.heldout_fraction",
        "train.lr",
        "phases.main.tokens",
    ],
)
@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_non_finite_numbers_are_refused_naming_the_key(key, value):
    with pytest.raises(ConfigError) as e:
        load_config(None, [f"{key}={value}"])
    assert e.value.key == key and "finite" in str(e.value)


def test_non_finite_number_inside_a_from_scratch_architecture_is_refused():
    arch = {"model_type": "bert", "num_hidden_layers": 2, "layer_norm_eps": float("nan")}
    with pytest.raises(ConfigError) as e:
        load_config({"model": {"name": "from_scratch", "from_scratch": arch, "tokenizer": "detour-tiny-en"}})
    assert e.value.key == "model.from_scratch.layer_norm_eps" and "finite" in str(e.value)


def test_validate_cli_prints_one_line_for_a_nan_that_used_to_end_in_a_traceback():
    """``phases.decay.fraction=.nan`` passed the schema and crashed in preflight (cannot convert float NaN)."""
    r = backend_cli("validate", "--set", "phases.decay.fraction=.nan")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "error: config key 'phases.decay.fraction': got nan; expected a finite number in [0, 1]"
    ]


@pytest.mark.parametrize("name", ["x\n", "x\r", "run\nname", " x", "x/"])
def test_run_name_must_match_whole(name):
    with pytest.raises(ConfigError) as e:
        load_config({"name": name})
    assert e.value.key == "name"


def test_pair_name_must_fit_with_its_suffix():
    """A 95-character name is a valid run name, but a pair would create '<name>-detour' (102 characters)."""
    load_config({"name": "n" * 95, "recipe": "mlm"})  # alone it fits
    with pytest.raises(ConfigError) as e:
        load_config({"name": "n" * 95, "recipe": "pair"})
    assert e.value.key == "name" and "at most 93" in str(e.value) and "-detour" in str(e.value)
    load_config({"name": "n" * 93, "recipe": "pair"})


@pytest.mark.parametrize("content, words", [(None, "is a folder"), ("", "the file is empty"), ("a: [1,\n", "YAML")])
def test_a_config_file_that_is_a_folder_empty_or_malformed_is_one_named_error(tmp_path, content, words):
    p = tmp_path / "c.yaml"
    p.mkdir() if content is None else p.write_text(content)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert e.value.key == "config" and str(p) in str(e.value) and words in str(e.value)
    assert "\n" not in str(e.value)  # one line in the CLI

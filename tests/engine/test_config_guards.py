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


# --- one value, one meaning: the schema decides types once, for YAML and --set alike ----------------------------

SMALL = ["train.batch_size=2", "train.seq_len=64"]  # 128 tokens per step
MLM = {"objective": "mlm", "tokens": 512, "mlm_probability": 0.3}


def _yaml(tmp_path, text: str, *sets: str) -> dict:
    f = tmp_path / "c.yaml"
    f.write_text(text)
    return load_config(f, list(sets))


def test_a_number_yaml_reads_as_text_means_what_set_means(tmp_path):
    cfg = _yaml(tmp_path, "train:\n  lr: 1e-4\n  warmup_tokens: 2.5e3\nhybrid:\n  tokens: 1_000\n")
    assert cfg["train"]["lr"] == load_config(None, ["train.lr=1e-4"])["train"]["lr"] == 1e-4
    assert cfg["train"]["warmup_tokens"] == 2500 and isinstance(cfg["train"]["warmup_tokens"], int)
    assert cfg["hybrid"]["tokens"] == 1000
    assert _yaml(tmp_path, "mask_schedule:\n  rates: [3e-1, 1.5e-1]\n")["mask_schedule"]["rates"] == [0.3, 0.15]
    with pytest.raises(ConfigError, match="'train.lr': got 'abc'; expected a number"):
        _yaml(tmp_path, "train:\n  lr: abc\n")
    # a text key keeps the text: a run may be named 1e5 or 007
    assert load_config(None, ["name=1e5"])["name"] == "1e5" and load_config(None, ["name=007"])["name"] == "007"
    assert _yaml(tmp_path, "name: 2024\n")["name"] == "2024"


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ("train.seed=9223372036854775807", "'train.seed': got 9223372036854775807; must be in [0, 4294967295]"),
        ("train.data_seed=4294967296", "must be in [0, 4294967295]"),
        ("phases.main.tokens=1e23", "got 100000000000000000000000; must be in [0, 1000000000000000]"),
        ("train.total_tokens=1.0e+17", "must be in [1, 1000000000000000]"),
        ("phases.main.tokens=2.5", "expected an integer"),
    ],
)
def test_integers_are_exact_and_bounded_where_they_are_used(item, says):
    with pytest.raises(ConfigError) as e:
        load_config(None, [item])
    assert says in str(e.value)
    assert load_config(None, ["phases.main.tokens=2.5e5"])["phases"]["main"]["tokens"] == 250000


def test_errors_name_the_key_the_user_wrote(tmp_path):
    with pytest.raises(ConfigError) as e:
        _yaml(tmp_path, "phases: 5\n")
    assert e.value.key == "phases"
    with pytest.raises(ConfigError) as e:
        _yaml(tmp_path, "train: 3\n")
    assert e.value.key == "train"


@pytest.mark.parametrize(
    ("phases", "recipe", "key", "says"),
    [
        ([{**MLM, "shape": "warmup_constant"}], "custom", "phases[0].shape", "needs warmup_tokens or warmup_steps"),
        ([{**MLM, "shape": "warmup_constant", "warmup_steps": 0}], "custom", "phases[0].shape", "> 0"),
        ([{**MLM, "shape": "warmup_constant", "warmup_tokens": 1024}], "custom", "phases[0].warmup_tokens",
         "(8 steps of 128 tokens) is longer than its phase (4 steps)"),
        ([{**MLM, "steps": None, "tokens": None, "fraction": 1.0, "shape": "warmup_constant", "warmup_steps": 9}],
         "custom", "phases[0].warmup_steps", "longer than its phase (8 steps)"),
        ([MLM, {**MLM, "mlm_probability": 0.15}], "pair", "recipe", "no CLM phase"),
    ],
)  # fmt: skip
def test_refused_instead_of_silently_changed(phases, recipe, key, says):
    with pytest.raises(ConfigError) as e:
        load_config({"phases": phases, "recipe": recipe}, [*SMALL, "train.total_tokens=1024"] if "fraction" in
                    str(phases) else SMALL)  # fmt: skip
    assert e.value.key == key and says in str(e.value)
    ok = [{**MLM, "shape": "warmup_constant", "warmup_tokens": 512}, {"objective": "clm", "tokens": 512}]
    assert load_config({"phases": ok, "recipe": "pair"}, SMALL)["phases"][0]["warmup_tokens"] == 512


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ("train.lr=abc", "'train.lr': got 'abc'; expected a number"),
        ("train.control_seed=9223372036854775807", "'train.control_seed'"),
        ("eval.max_train_examples=0", "'eval.max_train_examples'"),
    ],
)
def test_a_replication_plan_with_a_bad_value_is_refused_not_printed(capsys, item, says):
    from backend.__main__ import main

    assert main(["replicate", "--plan", "--set", item]) == 2
    out = capsys.readouterr()
    assert says in out.err and "plan" not in out.out.lower()

"""One schema: defaults, checks, validate --print and the Launch form all come from the same table."""

from __future__ import annotations

import pytest
import yaml

from backend.core.errors import ConfigError
from backend.engine import schema
from backend.engine.config import config_to_yaml, default_config, load_config


def test_defaults_are_valid_and_cover_every_schema_key():
    cfg = load_config(None)
    flat = {}

    def walk(node, prefix=""):
        for k, v in node.items():
            if isinstance(v, dict) and f"{prefix}{k}" not in schema.BY_KEY:
                walk(v, f"{prefix}{k}.")
            else:
                flat[f"{prefix}{k}"] = v

    walk(cfg)
    assert set(flat) == set(schema.BY_KEY)
    assert cfg["train"]["precision"] == "auto" and cfg["train"]["compile"] == "auto"


def test_annotated_yaml_round_trips_and_explains_every_key():
    cfg = load_config(None, ["phases.main.freeze.layers=0-2", "model.from_scratch={hidden_size: 64}"])
    text = config_to_yaml(cfg, annotated=True)
    assert yaml.safe_load(text) == cfg
    for k in schema.SCHEMA:
        assert k.help in text, k.key


@pytest.mark.parametrize(
    ("override", "key", "says"),
    [
        ("train.seq_len=4", "train.seq_len", "must be in [8, 65536]"),
        ("train.lr=0", "train.lr", "must be in (0, 1]"),
        ("train.batch_size=2.5", "train.batch_size", "expected an integer"),
        ("train.precision=fp8", "train.precision", "allowed: auto, fp32, bf16, fp16"),
        ("train.compile=maybe", "train.compile", "expected auto, true or false"),
        ("train.compile=1", "train.compile", "expected auto, true or false"),
        ("phases.main.freeze.layers=7-0", "phases.main.freeze.layers", "low-high"),
        ("train.betas=[0.9]", "train.betas", "two numbers"),
        ("data.heldout_fraction=0.5", "data.heldout_fraction", "must be in [0, 0.5)"),
    ],
)
def test_every_check_names_its_key_and_the_allowed_values(override, key, says):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert err.value.key == key and says in str(err.value)


def test_launch_form_fields_come_from_the_schema():
    from app import launch_tab

    keys = [f.key for f in launch_tab.FIELDS if f.key != "seeds"]
    assert keys == [k.key for k in schema.form_keys()]
    lr = launch_tab.FIELD_BY_KEY["train.lr"]
    assert lr.label == schema.BY_KEY["train.lr"].label and lr.kind == "sci"
    assert launch_tab.FIELD_BY_KEY["train.precision"].choices == list(schema.PRECISIONS)
    assert launch_tab.FIELD_BY_KEY["recipe"].choices == [
        "pair",
        "clm_detour",
        "mlm",
        "hybrid",
        "mask_schedule",
        "alternate",
        "mixed",
        "custom",
    ]
    # and the form's defaults are the schema's
    values = dict(zip(launch_tab.KEYS, launch_tab.config_to_values(default_config()), strict=True))
    assert values["train.precision"] == "auto" and values["phases.decay.fraction"] == 0.1


def test_compile_is_auto_true_or_false_in_yaml_overrides_and_the_form():
    from app import launch_tab

    assert [load_config(None, [f"train.compile={v}"])["train"]["compile"] for v in ("auto", "true", "False")] == [
        "auto",
        True,
        False,
    ]
    field = launch_tab.FIELD_BY_KEY["train.compile"]
    assert field.kind == "radio" and field.choices == ["auto", "true", "false"]
    for shown, want in (("auto", "auto"), ("true", True), ("false", False)):
        cfg = load_config(None, [f"train.compile={want}"])
        values = launch_tab.config_to_values(cfg)
        assert values[launch_tab.KEYS.index("train.compile")] == shown  # the radio shows text ...
        assert launch_tab.values_to_config(values)[0]["train"]["compile"] == want  # ... and the config gets it back


def test_every_shipped_config_is_valid():
    from backend.core.paths import REPO_ROOT

    configs = sorted((REPO_ROOT / "configs").glob("*.yaml"))
    assert configs
    for path in configs:
        cfg = load_config(path)  # schema checks only: models and corpora may live elsewhere
        assert cfg["train"]["precision"] == "auto" and cfg["train"]["compile"] == "auto", path.name

"""What every registered objective promises, checked for each one found in ``backend/objectives/`` (a new
module is covered here the moment it exists): deterministic batches per seed and step, labels and attention of the
right shape, settings checked by ``validate`` with errors naming the phase's key, a label and colour for drawing."""

from __future__ import annotations

import pytest
import torch

from backend import objectives
from backend.core.errors import ConfigError
from backend.detour.recipe import build_phases, expand_phases
from backend.engine.config import load_config
from conftest import bundled_tokenizer

NAMES = objectives.names()


def _batch(spec, seed: int):
    tok = bundled_tokenizer()
    ids = torch.randint(10, len(tok), (6, 40), generator=torch.Generator().manual_seed(7))
    ids[:, 0] = tok.cls_token_id
    starts = torch.zeros_like(ids, dtype=torch.bool)
    starts[:, 0] = True
    return ids, spec.batch(ids, starts, spec.held_out, objectives.masking_of(tok), torch.Generator().manual_seed(seed))


def _list_config(phase: dict, *sets: str):
    return load_config({"phases": [phase]}, ["recipe=custom", "train.seq_len=32", "train.batch_size=2", *sets])


@pytest.mark.parametrize("name", NAMES)
def test_a_batch_is_a_pure_function_of_the_seed(name):
    spec = objectives.get(name)
    ids, a = _batch(spec, 3)
    _, b = _batch(spec, 3)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.labels, b.labels)
    assert a.inputs.shape == a.labels.shape == ids.shape
    assert (a.labels != objectives.IGNORE).any()
    if isinstance(a.attention, torch.Tensor):
        assert a.attention.shape == (len(ids),) and torch.equal(a.attention, b.attention)
        assert spec.attention in ("prefix", "per-sequence")
    else:
        assert a.attention == (spec.attention == "causal")


@pytest.mark.parametrize("name", NAMES)
def test_a_phase_list_validates_its_objective_settings(name):
    spec = objectives.get(name)
    phase = {"objective": name, "steps": 2, **{s.name: s.default or 0.3 for s in spec.settings}}
    [p] = build_phases(_list_config(phase))
    assert p.objective == name and p.spec is spec and set(p.settings) == {s.name for s in spec.settings}
    [d] = expand_phases(_list_config(phase))
    assert d["attention"] == spec.attention and d["label"] == spec.text(p.settings)
    assert spec.colour.startswith("#") and spec.explanation and spec.title
    for s in spec.settings:  # out of range: the phase's own key is named
        with pytest.raises(ConfigError, match=rf"phases\[0\]\.{s.name}.*{s.range_text()[1:4]}"):
            _list_config({**phase, s.name: s.hi + 1})
    others = [k for k in objectives.setting_names() if k not in {s.name for s in spec.settings}]
    for k in others:  # another objective's setting is refused, naming this objective
        with pytest.raises(ConfigError, match=rf"phases\[0\]\.{k}.*objective {name}"):
            _list_config({**phase, k: 0.5})


def test_an_unknown_objective_lists_the_known_ones():
    with pytest.raises(ConfigError, match=r"phases\[0\]\.objective.*" + ".*".join(NAMES)):
        _list_config({"objective": "nope", "steps": 2})


# Code whose quoted words spelled like an objective are not one: a pair's run roles (its '-detour' and '-mlm' run
# folders) and the paper replication's runs.
NOT_OBJECTIVES = {"backend/engine/rundir.py": "a pair's run roles", "backend/replication": "the replication's runs"}


def test_no_code_outside_the_objectives_names_one():
    """Issue 29: the trainer, config checks, presets, explain, the CLI and the app read objectives from the registry
    (their names, words and colours); a quoted objective name in other code is a branch a new objective would miss."""
    import re

    from backend.core.paths import REPO_ROOT

    word = re.compile(r"""(["'])(""" + "|".join(map(re.escape, NAMES)) + r")\1")
    found = []
    for path in sorted([*(REPO_ROOT / "backend").rglob("*.py"), *(REPO_ROOT / "app").rglob("*.py")]):
        rel = path.relative_to(REPO_ROOT).as_posix()
        if rel.startswith("backend/objectives/") or any(rel.startswith(k) for k in NOT_OBJECTIVES):
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if word.search(line):
                found.append(f"{rel}:{i}: {line.strip()}")
    assert not found, "objective names outside backend/objectives/:\n" + "\n".join(found)


def test_every_preset_file_names_registered_objectives_and_presets():
    """The presets are data (``backend/presets/*.yaml``): each names objectives of the registry (a typo there
    would fail only when that preset is launched), a pair names two presets."""
    from backend import presets

    for name in presets.names()[:-1]:
        p = presets.get(name)
        named = p.get("objectives") or []
        named = list(named.values()) if isinstance(named, dict) else list(named)
        named += [p[k] for k in ("objective", "baseline", "detour") if k in p]
        assert set(named) <= set(NAMES), (name, named)
        assert set((p.get("runs") or {}).values()) <= set(presets.names()), name

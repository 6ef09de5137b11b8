"""Issue 24, "Models people already have": the encoders in the user's Hugging Face cache are offered in every model
picker (masked-LM models only, labelled by hub id and size), load offline by hub id, and a hub id that is neither
cached nor reachable is said plainly. The cache is built by the test from the bundled model, in the hub's layout
(blobs, snapshots of symlinks, refs/main) under a temporary HF_HUB_CACHE, with HF_HUB_OFFLINE=1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app import PathNotAllowed, check_model_spec, default_picks, model_choices
from backend.core.paths import BUNDLED_MODELS_DIR, DEFAULT_MODEL, REPO_ROOT
from tests import released_models

COMMIT = "0123456789abcdef0123456789abcdef01234567"
CACHED = "detour-lab/tiny-cached"


def put_in_hub_cache(cache: Path, repo_id: str, files: dict[str, bytes]) -> Path:
    """``files`` as the hub client stores a download (``tests.released_models.put_in_hub_cache``), at ``COMMIT``."""
    return released_models.put_in_hub_cache(cache, repo_id, files, COMMIT)


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "hf-hub"
    src = BUNDLED_MODELS_DIR / DEFAULT_MODEL
    files = {p.name: p.read_bytes() for p in src.iterdir() if p.suffix in (".json", ".safetensors")}
    put_in_hub_cache(cache, CACHED, files)
    gpt = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}  # a causal LM: not offered
    put_in_hub_cache(cache, "someone/a-gpt", {"config.json": json.dumps(gpt).encode()})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def _app_offline(code: str, cache: Path) -> subprocess.CompletedProcess:
    """The app's handler in a fresh process: huggingface_hub reads HF_HUB_CACHE when it is imported."""
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_cached_encoders_are_offered_by_hub_id_and_size_and_causal_lms_are_not(hub_cache):
    choices = model_choices()
    cached = [c for c in choices if c.startswith(CACHED)]
    assert len(cached) == 1 and cached[0].startswith(f"{CACHED} (cached, ") and cached[0].endswith("M params)"), choices
    assert not any("a-gpt" in c for c in choices)
    assert check_model_spec(cached[0]) == CACHED  # the label is the hub id
    assert check_model_spec(CACHED) == CACHED  # typed, as in every model field (allow_custom_value)
    assert default_picks(choices, 3)[0] == DEFAULT_MODEL  # the bundled base still comes first


def test_a_hub_id_neither_cached_nor_reachable_is_said_plainly(hub_cache):
    with pytest.raises(PathNotAllowed) as err:
        check_model_spec("nobody/not-downloaded", "model.name")
    msg = str(err.value)
    assert "not in your Hugging Face cache" in msg and str(hub_cache) in msg and "not reachable" in msg
    assert CACHED in msg  # and what the user does have


def test_a_cached_model_fills_masks_in_the_app_offline_and_a_missing_one_is_named(hub_cache):
    code = (
        "from app import fill_mask_tab, model_choices\n"
        "label = [c for c in model_choices() if c.startswith('detour-lab/')][0]\n"
        "figs, msg = fill_mask_tab.predict('The patient was given [MASK] daily.', [label, 'nobody/gone'], "
        "[False, False])\n"
        "print(figs[0] is not None, figs[1] is None)\nprint(msg)\n"
    )
    proc = _app_offline(code, hub_cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, *rest = proc.stdout.strip().splitlines()
    assert first == "True True", proc.stdout
    text = "\n".join(rest)
    assert f"**{CACHED}**" in text and "nobody/gone': not in your Hugging Face cache" in text, text
    assert "(cached," not in text  # a picker's label names no result


def test_the_trajectory_offers_runs_only_not_cached_models(hub_cache, isolated_runs_dir):
    from app import analyze_tab
    from backend.core import atomic
    from backend.engine.config import default_config

    run = isolated_runs_dir / "traj"
    (run / "checkpoints").mkdir(parents=True)
    atomic.write_yaml(run / "config.yaml", {**default_config(), "name": "traj"})
    atomic.write_json(run / "status.json", {"state": "done"})
    choices = model_choices()
    assert any(c.startswith(CACHED) for c in choices)  # offered where a model is asked for ...
    assert analyze_tab.run_choices(choices) == ["traj"]  # ... but the trajectory follows a run's checkpoints


def test_a_fresh_install_with_a_cached_model_does_not_say_only_one_model(hub_cache, isolated_runs_dir):
    """Analyze said "Only one model is available" on a fresh install while its pickers listed the bundled model and
    a cached one. B stays empty (a cached model may be a large one, not picked for the user) and the note names it."""
    from app import analyze_tab

    a, b, note = analyze_tab.default_models()
    assert (a, b) == (DEFAULT_MODEL, None)
    assert "Only one model" not in note and f"list {CACHED}" in note and "(cached," not in note, note

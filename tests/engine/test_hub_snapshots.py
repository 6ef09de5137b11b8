"""A bad snapshot in the Hugging Face cache is named and skipped, the other cached models stay listed; a cached model
that is not whole (no config.json, no weights, truncated weights) is named by ``validate``, before a run starts, not
reported as "not in your cache" or as a SafetensorError traceback once training loads it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from backend.__main__ import main
from backend.core.paths import BUNDLED_MODELS_DIR, DEFAULT_MODEL
from backend.engine import hub_cache
from tests.ui.test_cached_models import COMMIT, put_in_hub_cache

GOOD, BAD = "detour-lab/tiny-good", "detour-lab/tiny-bad"


def _files(drop: str | None = None) -> dict[str, bytes]:
    src = BUNDLED_MODELS_DIR / DEFAULT_MODEL
    return {p.name: p.read_bytes() for p in src.iterdir() if p.suffix in (".json", ".safetensors") and p.name != drop}


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    c = tmp_path / "hf-hub"
    put_in_hub_cache(c, GOOD, _files())
    monkeypatch.setenv("HF_HUB_CACHE", str(c))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return c


def _snap(cache: Path, repo_id: str) -> Path:
    return cache / f"models--{repo_id.replace('/', '--')}" / "snapshots" / COMMIT


def test_a_snapshot_that_links_to_itself_is_named_and_the_others_stay_listed(cache):
    snap = put_in_hub_cache(cache, BAD, _files())
    shutil.rmtree(snap)
    os.symlink(snap.name, snap)  # snapshots/<commit> -> itself
    assert [m.hub_id for m in hub_cache.cached_encoders()] == [GOOD]
    (problem,) = hub_cache.cache_problems()
    assert "models--detour-lab--tiny-bad" in problem and "skipped" in problem


def test_a_snapshot_file_that_links_out_of_its_model_folder_is_skipped(cache, tmp_path):
    snap = put_in_hub_cache(cache, BAD, _files())
    (snap / "config.json").unlink()
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    os.symlink(tmp_path / "config.json", snap / "config.json")
    assert [m.hub_id for m in hub_cache.cached_encoders()] == [GOOD]
    assert "outside" in hub_cache.cache_problems()[0]


def test_a_cache_that_is_a_file_is_said(tmp_path, monkeypatch):
    f = tmp_path / "hub-file"
    f.write_text("")
    monkeypatch.setenv("HF_HUB_CACHE", str(f))
    assert hub_cache.cached_encoders() == []
    assert "is a file, not a folder" in hub_cache.cache_problems()[0]


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        ("no-config", "has no config.json"),
        ("no-weights", "no .safetensors weights"),
        ("truncated", "truncated or not safetensors"),
    ],
)
def test_validate_names_a_cached_model_that_is_not_whole(cache, capsys, damage, says):
    snap = put_in_hub_cache(cache, BAD, _files("config.json" if damage == "no-config" else None))
    weights = snap / "model.safetensors"
    if damage == "no-weights":
        weights.unlink()
    if damage == "truncated":
        blob = weights.resolve()
        blob.write_bytes(blob.read_bytes()[: blob.stat().st_size // 2])
    assert main(["validate", "--set", f"model.name={BAD}"]) == 2
    err = capsys.readouterr().err
    assert f"model '{BAD}'" in err and says in err and "hf download" in err and "Traceback" not in err
    assert "not in your Hugging Face cache" not in err

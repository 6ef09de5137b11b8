"""Issue 31 section 4: a score belongs to the model that made it, not to the label it was shown under.

The issue's failing sequence: ``evaluate --out D --models detour-tiny-en`` then ``evaluate --out D --models runs/r1
--labels detour-tiny-en``. Before identities were recorded the second call found seed-0 of 'detour-tiny-en'
finished with the same settings, reused it, and results.json credited runs/r1 with the bundled model's scores."""

from __future__ import annotations

import json
import shutil

import pytest

from backend.__main__ import main as cli
from backend.core.paths import BUNDLED_MODELS_DIR
from backend.evaluation.identity import model_identity, same_model, weights_sha256

QUICK = ["--seeds", "1", "--epochs", "1", "--max-len", "32", "--max-train-examples", "8", "--max-eval-examples", "8"]
QUICK += ["--lr", "1e-3", "--batch-size", "8", "--no-keep-models"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def a_run_dir(tmp_path, model_dir):
    """A run directory (status.json + final/) holding other weights than the bundled model."""
    run = tmp_path / "runs" / "r1"
    shutil.copytree(model_dir, run / "final")
    (run / "status.json").write_text('{"state": "done"}')
    return run


def test_relabelled_merge_is_refused_and_identity_recorded(tmp_path, tiny_modernbert_dir, capsys):
    out = tmp_path / "D"
    assert cli(["evaluate", "--out", str(out), "--models", "detour-tiny-en", *QUICK]) == 0
    first = json.loads((out / "results.json").read_text())
    [entry] = first["models"]
    bundled_sha = weights_sha256(BUNDLED_MODELS_DIR / "detour-tiny-en", "detour-tiny-en")
    assert entry["identity"]["sha256"] == bundled_sha
    assert entry["identity"]["path"] == str(BUNDLED_MODELS_DIR / "detour-tiny-en")
    seed_metrics = json.loads((out / "models" / "detour-tiny-en" / "seed-0" / "metrics.json").read_text())
    assert seed_metrics["identity"]["sha256"] == bundled_sha
    assert bundled_sha[:12] in (out / "results.md").read_text()  # the report names the weights it measured
    capsys.readouterr()

    run = a_run_dir(tmp_path, tiny_modernbert_dir)
    rc = cli(["evaluate", "--out", str(out), "--models", str(run), "--labels", "detour-tiny-en", *QUICK])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0
    assert len(err) == 1 and "already holds 'detour-tiny-en' for another model" in err[0], err
    assert str(run / "final") in err[0]
    # nothing saved is lost or rewritten: the folder still credits the bundled model only
    assert json.loads((out / "results.json").read_text())["models"][0]["identity"]["sha256"] == bundled_sha


def test_same_weights_elsewhere_is_the_same_model(tmp_path, tiny_modernbert_dir):
    from backend.engine.models import resolve_model

    copy = shutil.copytree(tiny_modernbert_dir, tmp_path / "copy")
    a, b = model_identity(resolve_model(str(tiny_modernbert_dir))), model_identity(resolve_model(str(copy)))
    assert a["path"] != b["path"] and same_model(a, b)
    other = model_identity(resolve_model("detour-tiny-en"))
    assert not same_model(a, other)
    # results written before identities: the resolved path decides
    assert not same_model({"path": "/x", "sha256": None}, {"path": "/y", "sha256": "ab"})

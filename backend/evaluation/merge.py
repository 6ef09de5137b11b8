"""A second evaluation into an ``--out`` folder that already holds one adds to it, never shrinks it.

Before this, ``evaluate --models B --out D`` after ``--models A --out D`` rewrote results.json/results.md with B
alone: A's rows vanished from the summary (and from the NER tab) although its per-seed files stayed. Models are
merged when the settings that make their scores comparable match (task, data, metric, hyper-parameters and, for a
model kept from before, the seeds); otherwise the folder is refused by name. A label the folder already holds
for another model (by identity: resolved path + weights sha256, ``identity.py``) is refused too.
"""

from __future__ import annotations

import json
from pathlib import Path

from backend.core.errors import ConfigError
from backend.evaluation.identity import recorded_identity, refuse_relabel

SAME = ("task", "data_fingerprint", "primary_metric")


def merge_previous(results: dict, out_dir: Path) -> list[str]:
    """Add the models of ``out_dir/results.json`` that this evaluation does not train again to
    ``results["models"]`` (in place, in the folder's order; new models last); returns their labels. Raises
    ConfigError naming the folder when the earlier evaluation was made with other settings or its results.json is
    not one (nothing is written then)."""
    path = out_dir / "results.json"
    if not path.exists():
        return []
    fix = "use another --out folder, or the same settings to add models to this one"
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError("out", str(out_dir), f"its results.json is unreadable ({type(exc).__name__}); {fix}") from exc
    if not isinstance(old, dict) or not isinstance(old.get("models"), list):
        raise ConfigError("out", str(out_dir), f"its results.json is not an evaluation's results; {fix}")
    for i, e in enumerate(old["models"]):  # a model without its label was a KeyError below
        if not isinstance(e, dict) or not isinstance(e.get("label"), str) or not e["label"]:
            raise ConfigError("out", str(out_dir), f"its results.json lists model {i} without a label; {fix}")
    new_labels = {e["label"] for e in results["models"]}
    by_label = {e["label"]: e for e in results["models"]}
    for e in old["models"]:  # a label already here names one model: another model may not take it over
        if isinstance(e, dict) and e.get("label") in by_label:
            refuse_relabel(out_dir, e["label"], recorded_identity(e), by_label[e["label"]]["identity"])
    kept = [e for e in old["models"] if isinstance(e, dict) and e.get("label") not in new_labels]
    diffs = [k.replace("_fingerprint", "") for k in SAME if old.get(k) != results.get(k)]
    old_hp = old.get("hparams") if isinstance(old.get("hparams"), dict) else {}
    diffs += [k for k in results["hparams"] if old_hp.get(k) != results["hparams"][k]]
    if kept and old.get("seeds") != results["seeds"]:
        diffs.append("seeds")
    if diffs:
        held = ", ".join(str(e.get("label")) for e in old["models"] if isinstance(e, dict))
        raise ConfigError(
            "out",
            str(out_dir),
            f"it already holds an evaluation ({held}) made with different {', '.join(diffs)}; {fix}",
        )
    fresh = {e["label"]: e for e in results["models"]}
    olds = [e for e in old["models"] if isinstance(e, dict)]
    in_place = [fresh.pop(e["label"]) if e.get("label") in fresh else e for e in olds]  # the folder's order kept
    results["models"][:] = in_place + [e for e in results["models"] if e["label"] in fresh]
    results["started_at"] = old.get("started_at", results["started_at"])
    return [e["label"] for e in kept]

"""The one checking reader of an evaluation's ``results.json``: the doctor, the app's NER and throughput panels and
the sweep measurements read it here, and a torn, foreign or linked-out file is one line naming it and what is
wrong, never an AttributeError in whoever reads it next. Only the file's shape is checked (what the readers index);
what the fields mean stays with ``backend.evaluation.runner``, which writes it."""

from __future__ import annotations

from pathlib import Path

from backend.core.errors import DetourError
from backend.core.json_file import read_json_object

NAME = "results.json"


class ResultsFileError(DetourError):
    pass


SHAPE = {"task": str, "hparams": dict, "models": list}  # what the doctor and the panels index
SCORES = {"primary_metric": str, "models": list}  # what a report of scores indexes (a suite's, a sweep's)


def read_results(path: str | Path, shape: dict[str, type] = SHAPE) -> dict:
    """The evaluation results in ``path`` (a results.json, or the evaluation folder holding one), checked: the top
    keys of ``shape`` (``SCORES`` for a reader of scores only) and every model's label and runs."""
    path = Path(path)
    if path.is_dir():
        path = path / NAME
    # evaluate refuses to write over a results.json it cannot read as its own (merge.merge_previous): the advice
    # must not send the user back into that folder, or the two answers loop
    fix = "evaluate into another --out folder, or move this file away to reuse the folder"
    res = read_json_object(path, ResultsFileError, "an evaluation's results", fix, fix_when_unreadable=False)
    bad = [k for k, t in shape.items() if not isinstance(res.get(k), t)]
    if bad:
        raise ResultsFileError(f"{path}: not an evaluation's results: {', '.join(bad)} missing or wrong; {fix}")
    for i, m in enumerate(res["models"]):
        if (
            not isinstance(m, dict)
            or not isinstance(m.get("runs"), list)
            or not all(isinstance(r, dict) for r in m["runs"])
        ):
            raise ResultsFileError(f"{path}: model {i} is not an evaluated model (no list of runs); {fix}")
        if not isinstance(m.get("label"), str) or not m["label"]:  # every reader names a model by it
            raise ResultsFileError(f"{path}: model {i} has no label (the name its scores go by); {fix}")
    return res

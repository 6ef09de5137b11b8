"""Commands write only where the same kind of artifact may be (issue 38's reproduced cases): each refusal is one
line before any work, naming the path and a free alternative, and leaves every byte where it was."""

from __future__ import annotations

import json

import pytest

from backend.__main__ import main
from backend.core import atomic, catalogue, paths
from backend.engine import rundir
from backend.engine.config import default_config
from tests.catalogue.roots import roots  # noqa: F401  (autouse: each test's own sweeps/evals/reports)


def a_run(root, name: str = "base1"):
    d = root / name
    d.mkdir(parents=True)
    atomic.write_yaml(d / "config.yaml", {**default_config(), "name": name})
    rundir.write_status(d, state="done")
    return d


def suite_file(tmp_path, name: str):
    p = tmp_path / f"{name}.yaml"
    p.write_text(f"name: {name}\ndefaults:\n  seeds: 1\n  epochs: 1\ntasks:\n  - name: t1\n    task: ner\n"
                 f"    data: {paths.DEMO_NER_DIR}\n")  # fmt: skip
    return p


def one_error_line(capsys) -> str:
    cap = capsys.readouterr()
    lines = [ln for ln in cap.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in cap.err, cap.err
    return lines[0]


def test_cka_out_onto_a_runs_config_is_refused(isolated_runs_dir, capsys):
    run = a_run(isolated_runs_dir)
    before = (run / "config.yaml").read_bytes()
    rc = main(["cka", "--a", "detour-tiny-en", "--b", str(run), "--weights-only", "--out", str(run / "config.yaml")])
    line = one_error_line(capsys)
    assert rc == 2 and f"inside the run folder {run}" in line and "a free one: --out" in line
    assert (run / "config.yaml").read_bytes() == before  # was replaced by the weight-change JSON


def test_cka_out_onto_any_other_existing_file_is_refused(tmp_path, capsys):
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": 1}')
    rc = main(["cka", "--a", "detour-tiny-en", "--b", "detour-tiny-en", "--weights-only", "--out", str(notes)])
    line = one_error_line(capsys)
    assert rc == 2 and "is not a cka result" in line and str(tmp_path / "notes-2.json") in line
    assert notes.read_text() == '{"mine": 1}'


def test_cka_rewrites_its_own_result(tmp_path, capsys):
    out = tmp_path / "w.json"
    assert main(["cka", "--a", "detour-tiny-en", "--b", "detour-tiny-en", "--weights-only", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["kind"] == "weight_change"
    assert main(["cka", "--a", "detour-tiny-en", "--b", "detour-tiny-en", "--weights-only", "--out", str(out)]) == 0


def test_sweep_out_onto_a_folder_holding_a_users_report_is_refused(tmp_path, capsys):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "report.md").write_text("my own notes\n")
    assert main(["sweep", "--grid", "train.lr=1e-4,2e-4", "--out", str(folder)]) == 2
    line = one_error_line(capsys)
    assert f"--out {folder}: holds other files (report.md), not a sweep" in line and f"{folder}-2" in line
    assert (folder / "report.md").read_text() == "my own notes\n" and sorted(folder.iterdir()) == [folder / "report.md"]


def test_a_second_suite_into_the_same_out_is_refused(tmp_path, capsys):
    out = tmp_path / "SAME"
    out.mkdir()
    first = {"suite": "first", "cells": {}}
    atomic.write_json(out / "suite.json", first)  # what the first suite's report wrote
    (out / "suite.md").write_text("# Suite first\n")
    rc = main(["evaluate", "--suite", str(suite_file(tmp_path, "other")), "--models", "detour-tiny-en",
               "--out", str(out)])  # fmt: skip
    line = one_error_line(capsys)
    assert rc == 2 and "holds the suite 'first', not 'other'" in line
    assert json.loads((out / "suite.json").read_text()) == first and (out / "suite.md").read_text() == "# Suite first\n"
    assert sorted(p.name for p in out.iterdir()) == ["suite.json", "suite.md"]


def test_the_same_suite_resumes_into_its_own_out(tmp_path):
    from backend.evaluation.runner import check_output_dir

    out = catalogue.claim_folder(tmp_path / "SAME", "suite", "first")
    (out / "tasks").mkdir()
    check_output_dir(out, "suite", "first")  # no error: resuming the same suite
    with pytest.raises(catalogue.OutTaken):
        check_output_dir(out, "evaluation")  # an evaluation into a suite's folder


def test_an_evaluation_resumes_into_its_own_out(tmp_path):
    from backend.evaluation.runner import check_output_dir

    out = tmp_path / "ev"
    out.mkdir()
    atomic.write_json(out / "results.json", {"models": []})  # an evaluation written before the catalogue
    check_output_dir(out, "evaluation")


def test_sweep_report_into_a_link_to_a_sweep_is_refused(tmp_path, capsys):
    from backend.sweeps.sweep import plan_sweep, write_manifest

    real = tmp_path / "elsewhere" / "sw"
    real.mkdir(parents=True)
    write_manifest(real, plan_sweep(None, [], ["train.lr=1e-4,2e-4"], 1, name="sw"))
    link = tmp_path / "sweeps-link"
    link.symlink_to(real)
    assert main(["sweep", "--report", str(link)]) == 2
    assert "is a link" in one_error_line(capsys)
    assert not (real / "report.md").exists()


@pytest.mark.parametrize("study", ["detour", "hybrid-splits"])
def test_a_study_is_refused_a_folder_holding_another_study_or_torn_settings(study, tmp_path, capsys):
    """Each study's --plan and start refuse the other's folder (the hybrid study planned into the detour study's), and
    a settings.json that is not a mapping (the hybrid study read it with json.loads: a traceback)."""
    other = "detour-budgets" if study == "hybrid-splits" else "hybrid-splits"
    held = catalogue.claim_folder(tmp_path / "held", "report")
    atomic.write_json(held / "settings.json", {"study": other})
    torn = catalogue.claim_folder(tmp_path / "torn", "report")
    (torn / "settings.json").write_text('{"study": "hyb')
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    for out, words in ((held, f"holds another study ({other})"), (torn, "its settings.json is not a study's")):
        for extra in (["--plan"], ["--pilot"], []):
            assert main(["replicate", "--study", study, "--out", str(out), *extra]) == 2
            err = capsys.readouterr().err.strip()
            assert err.startswith("error: ") and words in err and "\n" not in err, err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_catalogue_describes_every_kind():
    assert set(catalogue.KINDS) == {"run", "pair", "sweep", "suite", "evaluation", "cka", "report", "upload", "export"}
    for k in catalogue.KINDS.values():
        assert k.what and k.naming and k.shape in ("folder", "file", "derived")
        assert k.root is None or k.root().is_absolute()

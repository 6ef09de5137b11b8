"""``python -m backend export``: a finished run out of the lab as a folder that transformers loads and
``huggingface_hub.ModelCard`` parses; every refusal one line before anything is written (an --out that holds
something, lies inside another artifact, a model the lab did not make, an unfinished run); a push refused offline,
and one that cannot reach the Hub, leave nothing half-written."""

from __future__ import annotations

import shutil

import pytest
from huggingface_hub import ModelCard

from backend.__main__ import main
from backend.core import atomic, catalogue
from backend.engine.rundir import write_status
from tests.conftest import backend_cli, free_port


@pytest.fixture
def run(detour_run_dir, isolated_runs_dir):
    """The finished tiny run all tests share, copied into this test's runs folder (its card may be rewritten here)."""
    d = isolated_runs_dir / detour_run_dir.name
    shutil.copytree(detour_run_dir, d)
    return d


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def test_a_finished_run_exports_to_a_folder_transformers_loads(run, tmp_path, tiny_modernbert_dir, capsys):
    from safetensors.torch import load_file
    from transformers import AutoModelForMaskedLM

    out = tmp_path / "shared" / "my-model"
    assert main(["export", run.name, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"exported {run.name} to {out}" in printed and "AutoModelForMaskedLM" in printed
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "model.safetensors", "tokenizer.json",
                                                     "tokenizer_config.json", "training_config.yaml"]  # fmt: skip
    model = AutoModelForMaskedLM.from_pretrained(out)
    assert type(model).__name__ == "ModernBertForMaskedLM"
    theirs, ours = load_file(out / "model.safetensors"), load_file(run / "final" / "model.safetensors")
    assert theirs.keys() == ours.keys() and all((theirs[k] == ours[k]).all() for k in ours)
    card = ModelCard.load(out / "README.md")
    assert card.data.base_model == tiny_modernbert_dir.name and card.data.pipeline_tag == "fill-mask"
    assert (out / "training_config.yaml").read_text() == (run / "config.yaml").read_text()
    assert not list(out.parent.glob(".*export*"))  # the staging folder is gone


def test_an_export_never_takes_what_is_not_its_own(run, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes\n")
    ev = catalogue.claim_folder(tmp_path / "ev", "evaluation")
    atomic.write_json(ev / "results.json", {"models": []})
    cases = [
        (["export", run.name, "--out", str(mine)], "holds other files (notes.txt), not an export"),
        (["export", run.name, "--out", str(run / "exported")], f"is inside the run folder {run}"),
        (["export", run.name, "--out", str(ev / "models" / "x")], f"is inside an evaluation {ev} ("),
        (["export", "detour-tiny-en", "--out", str(tmp_path / "a")], "is a bundled model, not one this lab made"),
        (["export", run.name], "give --out DIR (a new folder), --push-to-hub REPO, or both"),
    ]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    for argv, words in cases:
        assert main(argv) == 2, argv
        assert words in one_error_line(capsys), argv
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before  # nothing added or changed


def test_an_empty_out_is_refused_not_the_working_directory(run, tmp_path, monkeypatch, capsys):
    """``--out ''`` was the working directory: the export was written among whatever the user had there."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for blank in ("", "  "):
        assert main(["export", run.name, "--out", blank]) == 2
        assert "--out is empty; give a folder" in one_error_line(capsys)
    assert list(work.iterdir()) == []
    with pytest.raises(catalogue.OutTaken, match="--out is empty"):
        catalogue.check_out_file("", "cka")


def test_an_unfinished_run_is_not_exported(run, tmp_path, capsys):
    shutil.rmtree(run / "final")
    write_status(run, state="running", pid=None)
    assert main(["export", str(run), "--out", str(tmp_path / "x")]) == 2
    assert "has no final model yet" in one_error_line(capsys) and not (tmp_path / "x").exists()


def test_a_damaged_final_model_is_refused_by_its_seal(run, tmp_path, capsys):
    weights = run / "final" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # same size, one bit changed: only the sha256 in the manifest finds it
    weights.write_bytes(bytes(data))
    assert main(["export", run.name, "--out", str(tmp_path / "x")]) == 2
    assert "no longer matches the manifest" in one_error_line(capsys) and not (tmp_path / "x").exists()


@pytest.mark.slow  # a fresh CLI process: the Hub client reads its settings when it is imported
def test_a_push_is_refused_offline_in_one_line_with_nothing_written(run, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "to-push"
    r = backend_cli("export", run.name, "--out", str(out), "--push-to-hub", "someone/a-model")
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "HF_HUB_OFFLINE is set" in lines[0], r.stderr
    assert "nothing was exported or pushed" in lines[0] and not out.exists()
    assert not list(tmp_path.glob(".*export*"))


@pytest.mark.slow  # a fresh CLI process: the Hub client reads HF_ENDPOINT when it is imported
def test_a_push_that_cannot_reach_the_hub_leaves_the_export_whole_and_says_so(run, tmp_path, monkeypatch):
    """Online, with a token, but nothing answers where the Hub should be (a port nobody listens on, on this
    machine): the local export is whole, the push is one line, and no commit was made."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    out = tmp_path / "to-push"
    r = backend_cli("export", run.name, "--out", str(out), "--push-to-hub", "someone/a-model")
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "push to someone/a-model failed" in lines[0], r.stderr
    assert f"the export in {out} is whole" in lines[0]
    assert ModelCard.load(out / "README.md").data.base_model and (out / "model.safetensors").is_file()
    assert "no commit of this model was made there" in lines[0] and not list(tmp_path.glob(".*export*"))


def test_a_push_names_a_bad_repository_before_anything(run, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    assert main(["export", run.name, "--out", str(tmp_path / "x"), "--push-to-hub", "bad name//x"]) == 2
    assert "not a repository id" in one_error_line(capsys) and not (tmp_path / "x").exists()

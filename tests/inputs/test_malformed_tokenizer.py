"""A tokenizer.json that is not the tokenizers library's file ('{}', nested 3,000 deep, a field of the wrong type)
is one line naming the file in validate, train and fill-mask, whether it sits beside a model or alone in a
tokenizer folder: it was a KeyError, a RecursionError or a bare Exception from deep inside transformers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from backend.__main__ import main
from backend.core.paths import BUNDLED_MODELS_DIR, DEFAULT_MODEL

BROKEN = {
    "empty mapping": "{}",
    "nested 3000 deep": "[" * 3000 + "]" * 3000,
    "a string where a list belongs": '{"model": {}, "added_tokens": "x"}',
    "a model the library cannot parse": '{"model": [1], "added_tokens": []}',
}


def _model_with(tmp_path: Path, text: str) -> Path:
    d = tmp_path / "model"
    shutil.copytree(BUNDLED_MODELS_DIR / DEFAULT_MODEL, d)
    (d / "tokenizer.json").write_text(text)
    return d


def _tokenizer_alone(tmp_path: Path, text: str) -> Path:
    d = tmp_path / "tok"
    d.mkdir()
    (d / "tokenizer.json").write_text(text)
    return d


@pytest.mark.parametrize("content", list(BROKEN))
@pytest.mark.parametrize("where", ["validate model", "validate tokenizer", "train model", "fill-mask model"])
def test_a_malformed_tokenizer_json_is_one_line_naming_it(content, where, tmp_path, capsys, isolated_runs_dir):
    command, holder = where.split()
    folder = (_model_with if holder == "model" else _tokenizer_alone)(tmp_path, BROKEN[content])
    key = "model.name" if holder == "model" else "model.tokenizer"
    argv = {
        "validate": ["validate", "--set", f"{key}={folder}"],
        "train": ["train", "--set", f"{key}={folder}", "--name", "tok"],
        "fill-mask": ["fill-mask", "--model", str(folder), "The [MASK] binds the receptor."],
    }[command]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    assert str(folder) in err and "internal error" not in err
    assert not (isolated_runs_dir / "tok").exists() and not (isolated_runs_dir / "tok-detour").exists()

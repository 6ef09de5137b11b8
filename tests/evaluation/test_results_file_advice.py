"""A results.json that is not an evaluation's (``[]``, a torn file) gets one answer from every reader: the doctor and
the app once said "run the evaluation again into this folder" and ``evaluate`` then refused that folder, a loop."""

from __future__ import annotations

import pytest

from backend.core.errors import ConfigError
from backend.evaluation.merge import merge_previous
from backend.evaluation.results_file import ResultsFileError, read_results


@pytest.mark.parametrize("text", ["[]", '{"task": ', "{}", '{"task": "ner", "hparams": {}, "models": [1]}'])
def test_the_readers_advice_is_what_evaluate_accepts(tmp_path, text):
    (tmp_path / "results.json").write_text(text)
    with pytest.raises(ResultsFileError) as read:
        read_results(tmp_path)
    assert "another --out folder" in str(read.value) and "into this folder" not in str(read.value)
    with pytest.raises(ConfigError) as write:  # what evaluate --out says about the same folder
        merge_previous({"models": [], "hparams": {}, "seeds": [0]}, tmp_path)
    assert "another --out folder" in str(write.value)
    assert (tmp_path / "results.json").read_text() == text  # nothing written over

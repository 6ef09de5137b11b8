"""``prepare-data`` builds the store a run then opens; preflight streams the corpus instead of reading it all."""

from __future__ import annotations

import json

import pytest

from backend.__main__ import main
from backend.core.errors import DataError
from backend.runs.preflight import check
from backend.runs.train import prepare_runs, train_run
from conftest import tiny_train_cfg


def test_prepare_data_cli_builds_the_store_training_then_opens(tiny_modernbert_dir, isolated_runs_dir, capsys):
    sets = ["--set", f"model.name={tiny_modernbert_dir}", "--set", "data.heldout_fraction=0.1"]
    sets += ["--set", "train.seq_len=64"]
    assert main(["prepare-data", *sets]) == 0
    out = capsys.readouterr().out
    assert "token store: built" in out and "training sequences" in out
    path = next(ln for ln in out.splitlines() if ln.startswith("token store: /")).split()[2]
    assert main(["prepare-data", *sets]) == 0
    assert "already built" in capsys.readouterr().out
    short = {"phases.main.steps": 2, "phases.decay.steps": 0}
    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "after", recipe="mlm", **short))
    assert train_run(run)["state"] == "done"
    info = json.loads((run / "data_info.json").read_text())
    assert info["cache_hit"] is True and info["cache_path"] == path
    assert main(["prepare-data", *sets, "--set", "data.corpus=/no/such/corpus"]) == 2
    assert "data.corpus: no such file or folder: /no/such/corpus" in capsys.readouterr().err


def test_preflight_stops_reading_once_a_batch_is_filled(tiny_modernbert_dir, tmp_path):
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "a.txt").write_text("\n".join(f"sentence number {i} with a few more words in it" for i in range(3000)))
    (corpus / "b.txt").write_bytes(b"\x00binary")  # never reached: the first file fills a batch many times over
    cfg = tiny_train_cfg(tiny_modernbert_dir, "pf", **{"data.corpus": str(corpus)})
    facts = check(cfg)
    assert str(facts["documents"]).startswith(">= ")
    small = tmp_path / "small.txt"
    small.write_text("\n".join(f"doc {i}" for i in range(30)))
    with pytest.raises(DataError, match=f"data.corpus: {small} gives 0 training sequences"):
        check(tiny_train_cfg(tiny_modernbert_dir, "pf2", **{"data.corpus": str(small), "train.seq_len": 256}))

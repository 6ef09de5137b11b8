"""``python -m backend explain``: the Detour tab's three views as text or JSON."""

from __future__ import annotations

import json

from backend.__main__ import main


def test_masks_grid_and_json(tiny_modernbert_dir, capsys):
    assert main(["explain", "masks", "--model", str(tiny_modernbert_dir), "--seq-len", "12"]) == 0
    out = capsys.readouterr().out
    assert "local layers [1, 3], window 16 (|q-k| <= 8)" in out
    assert "CLM: 1-9 keys per query, never reads the right side; measured: agrees" in out
    assert "    ##########.." in out  # query 9, causal global layer: keys 0..9
    assert "    .#########.." in out  # query 9, causal local layer: keys 1..9 (q - k <= 8)
    assert main(["explain", "masks", "--model", str(tiny_modernbert_dir), "--seq-len", "8", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["kinds"][0]["clm"][0] == [1, 0, 0, 0, 0, 0, 0, 0]
    assert main(["explain", "masks", "--model", str(tiny_modernbert_dir), "--seq-len", "1"]) == 2
    assert "allowed 2-256" in capsys.readouterr().err


def test_surprise_and_checkpoints(tiny_modernbert_dir, detour_run_dir, capsys):
    assert main(["explain", "surprise", "The cell divides.", "--model", str(tiny_modernbert_dir), "--json"]) == 0
    (res,) = json.loads(capsys.readouterr().out)
    assert res["clm"][0] is None and res["clm_count"] == sum(v is not None for v in res["clm"])
    assert main(["explain", "checkpoints", str(detour_run_dir)]) == 0
    out = capsys.readouterr().out
    assert "5 saved models" in out and "step 6 · decay: MLM  (1536 tokens)   <- phase switch" in out

"""Per-layer relative weight change, and the CKA trajectory over a run's checkpoints."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch

from backend.analysis.api import cka_trajectory, weight_change_between
from backend.analysis.weight_change import normalize_name, param_group
from backend.core import atomic
from backend.core.errors import ModelSpecError
from backend.engine.models import load_encoder, load_masked_lm


def test_param_groups_modernbert_and_bert_names():
    assert param_group("model.embeddings.tok_embeddings.weight") == "embeddings"
    assert param_group("model.layers.11.attn.Wqkv.weight") == "block_11"
    assert param_group("layers.0.mlp_norm.weight") == "block_0"
    assert param_group("model.final_norm.weight") == "other"
    assert param_group("head.dense.weight") == "head" and param_group("decoder.bias") == "head"
    assert param_group("bert.embeddings.word_embeddings.weight") == "embeddings"
    assert param_group("bert.encoder.layer.2.attention.self.query.weight") == "block_2"
    assert param_group("cls.predictions.transform.dense.weight") == "head"
    assert param_group("bert.pooler.dense.weight") == "other"
    assert normalize_name("roberta.encoder.layer.0.output.dense.bias") == "encoder.layer.0.output.dense.bias"


def _perturbed_copy(src, dst, name, scale=0.05, seed=0):
    model = load_masked_lm(str(src))
    sd = dict(model.named_parameters())
    g = torch.Generator().manual_seed(seed)
    delta = scale * torch.randn(sd[name].shape, generator=g)
    with torch.no_grad():
        sd[name].add_(delta)
    model.save_pretrained(dst)
    shutil.copy(src / "tokenizer.json", dst / "tokenizer.json")
    shutil.copy(src / "tokenizer_config.json", dst / "tokenizer_config.json")
    return delta


def test_identical_is_zero_and_one_block_change_is_exact(tiny_modernbert_dir, tmp_path):
    same = weight_change_between(str(tiny_modernbert_dir), str(tiny_modernbert_dir))
    assert same["layer_names"] == ["block_0", "block_1", "block_2", "block_3"]
    assert same["layers"] == [0.0] * 4 and same["embeddings"] == 0.0 and same["head"] == 0.0
    assert same["total"] == 0.0 and same["other"] == 0.0
    json.dumps(same, allow_nan=False)

    name = "model.layers.2.attn.Wqkv.weight"
    delta = _perturbed_copy(tiny_modernbert_dir, tmp_path / "b", name)
    res = weight_change_between(str(tiny_modernbert_dir), str(tmp_path / "b"), detail=True)
    ref = load_masked_lm(str(tiny_modernbert_dir)).state_dict()
    block2_sq = sum(v.double().pow(2).sum().item() for k, v in ref.items() if k.startswith("model.layers.2."))
    expected = delta.double().norm().item() / math.sqrt(block2_sq)
    assert res["layers"][2] == pytest.approx(expected, rel=1e-9)
    assert res["layers"][:2] == [0.0, 0.0] and res["layers"][3] == 0.0 and res["embeddings"] == 0.0
    assert res["params"]["layers.2.attn.Wqkv.weight"] == pytest.approx(
        delta.double().norm().item() / ref[name].double().norm().item(), rel=1e-9
    )
    assert res["groups"]["block_2"]["n_params"] == sum(
        v.numel() for k, v in ref.items() if k.startswith("model.layers.2.")
    )


def test_bare_encoder_against_mlm_checkpoint(tiny_modernbert_dir, tmp_path):
    load_encoder(str(tiny_modernbert_dir)).save_pretrained(tmp_path / "bare")
    res = weight_change_between(str(tiny_modernbert_dir), str(tmp_path / "bare"))
    assert res["layers"] == [0.0] * 4 and res["embeddings"] == 0.0
    assert res["head"] is None and any(n.startswith("head.") for n in res["only_in_a"])


def test_bert_family_and_architecture_mismatch(tiny_bert_dir, tiny_modernbert_dir, tmp_path):
    from conftest import TINY_MODERNBERT, save_tiny_model

    res = weight_change_between(str(tiny_bert_dir), str(tiny_bert_dir))
    assert res["layer_names"] == ["block_0", "block_1", "block_2"] and res["head"] == 0.0
    with pytest.raises(ModelSpecError, match="same architecture"):
        weight_change_between(str(tiny_modernbert_dir), str(tiny_bert_dir))
    narrow = save_tiny_model(tmp_path / "narrow", {**TINY_MODERNBERT, "hidden_size": 32, "intermediate_size": 48})
    with pytest.raises(ModelSpecError, match="same architecture"):
        weight_change_between(str(tiny_modernbert_dir), str(narrow))
    with pytest.raises(ModelSpecError):
        weight_change_between(str(tiny_modernbert_dir), str(tmp_path / "missing"))


def _checkpoint(run, step, src, tag=None, complete=True):
    ck = run / "checkpoints" / f"step-{step:08d}"
    shutil.copytree(src, ck / "model")
    atomic.write_json(
        ck / "trainer_state.json", {"step": step, "tokens_seen": step * 1024, "tag": tag, "phase": "main"}
    )
    if complete:
        (ck / "COMPLETE").write_text("")
    return ck


def test_trajectory_over_checkpoints_and_cli(tiny_modernbert_dir, tmp_path):
    from backend.__main__ import main

    ref = tiny_modernbert_dir
    _perturbed_copy(ref, tmp_path / "changed", "model.layers.0.mlp.Wi.weight", scale=0.5)
    run = tmp_path / "runs" / "demo-detour"
    run.mkdir(parents=True)
    atomic.write_yaml(run / "config.yaml", {"name": "demo-detour"})
    atomic.write_json(run / "status.json", {"state": "done", "step": 30, "tokens_seen": 30720})
    _checkpoint(run, 10, ref)
    _checkpoint(run, 20, tmp_path / "changed", tag="end-main")
    _checkpoint(run, 25, tmp_path / "changed", complete=False)  # no COMPLETE marker: ignored
    shutil.copytree(tmp_path / "changed", run / "final")
    texts = [f"patient {i} had fever and renal dose {i % 5} after therapy" for i in range(12)]

    res = cka_trajectory(run, str(ref), texts, n_texts=10, max_len=32, batch_size=4)
    json.dumps(res, allow_nan=False)
    assert [p["name"] for p in res["points"]] == ["step-00000010", "step-00000020", "final"]
    assert res["steps"] == [10, 20, 30] and res["tokens_seen"] == [10240, 20480, 30720]
    assert res["points"][1]["tag"] == "end-main" and res["points"][2]["tag"] == "final"
    assert len(res["divergence"]) == 3 and all(len(d) == 5 for d in res["divergence"])
    assert res["divergence"][0] == pytest.approx([0.0] * 5, abs=1e-9)  # identical to the reference
    assert res["divergence"][1][0] == pytest.approx(0.0, abs=1e-9)  # embeddings untouched
    assert max(res["divergence"][1][1:]) > 1e-4  # block 0 changed: its output and everything after
    assert res["weight_change"][0] == [0.0] * 4
    assert res["weight_change"][1][0] > 0 and res["weight_change"][1][1:] == [0.0] * 3
    assert res["divergence"][2] == pytest.approx(res["divergence"][1], abs=1e-12)

    # a run directory is a valid model spec (its final/ model)
    assert weight_change_between(str(run), str(tmp_path / "changed"))["total"] == 0.0

    out = tmp_path / "traj.json"
    assert main(["cka", "--trajectory", str(run), "--a", str(ref), "--out", str(out)]) == 2  # no --texts
    tf = tmp_path / "t.txt"
    tf.write_text("\n".join(texts))
    rc = main(["cka", "--trajectory", str(run), "--a", str(ref), "--texts", str(tf), "--n-texts", "6",
               "--max-len", "32", "--no-weights", "--out", str(out)])  # fmt: skip
    assert rc == 0
    saved = json.loads(out.read_text())
    assert saved["kind"] == "cka_trajectory" and saved["weight_change"] is None and saved["inputs"]["n"] == 6
    empty = tmp_path / "runs" / "empty"
    (empty / "checkpoints").mkdir(parents=True)
    with pytest.raises(ModelSpecError, match="no complete checkpoint"):
        cka_trajectory(empty, str(ref), texts)

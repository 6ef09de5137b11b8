"""Nothing that ran wrong is marked done, nothing saved is overwritten, and every bad input is refused before the
run directory exists, with an error that names the key or the file (issue 19; issue 18 part 3)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from backend.core.errors import ConfigError, DetourError, ModelSpecError
from backend.core.paths import REPO_ROOT
from backend.engine.config import load_config
from backend.engine.rundir import read_metrics, read_status, write_status
from backend.runs.train import prepare_runs, train_run
from conftest import TINY_BERT, TINY_MODERNBERT, save_tiny_model, tiny_train_cfg


def _digest(folder: Path) -> dict[str, str]:
    files = (p for p in sorted(folder.rglob("*")) if p.is_file())
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def _cli(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "backend", *argv],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, tiny_modernbert_dir) -> Path:
    """One finished tiny MLM run (12 steps, checkpoints at 4, 8, 12), copied by each test that changes it."""
    root = tmp_path_factory.mktemp("trained")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DETOUR_CACHE_DIR", str(root / "cache"))
        (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "done-run", recipe="mlm"), root=root / "runs")
        assert train_run(run)["state"] == "done"
    return run


def _copy(run: Path, root: Path, name: str | None = None) -> Path:
    dst = root / (name or run.name)
    shutil.copytree(run, dst)
    return dst


# --- 1. NaN and infinity: a run that meets one stops failed, and no final/ is written from it -------------------


def test_a_diverging_run_stops_failed_naming_the_step_and_the_last_good_checkpoint(
    tiny_modernbert_dir, isolated_runs_dir, monkeypatch
):
    """The LR explodes after step 9 (checkpoints at 4 and 8): the next loss is NaN. The run must end failed, name
    the step, the value and step-00000008 with the resume command, and write neither final/ nor a NaN metric."""
    import backend.detour.trainer as trainer

    real_set_lr, calls = trainer.set_lr, {"n": 0}

    def exploding_lr(optimizer, lr):
        calls["n"] += 1
        real_set_lr(optimizer, lr if calls["n"] <= 9 else 1e30)

    monkeypatch.setattr(trainer, "set_lr", exploding_lr)
    (run,) = prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "nan", recipe="mlm"))
    st = train_run(run)
    assert st["state"] == "failed" and read_status(run)["state"] == "failed"
    error = read_status(run)["error"]
    assert error.startswith("NonFiniteError: non-finite training values at step 1")  # step 10 or 11
    assert "loss = nan" in error or "grad_norm = nan" in error or "inf" in error
    assert "last good checkpoint: step-00000008 (step 8)" in error and f"--run-dir {run} --resume" in error
    assert not (run / "final").exists()
    assert [c.name for c in sorted((run / "checkpoints").glob("step-*"))] == ["step-00000004", "step-00000008"]
    metrics = (run / "metrics.jsonl").read_text()
    assert '"step": 8' in metrics and "NaN" not in metrics and "Infinity" not in metrics
    assert read_status(run)["resumable"] is True


def test_a_model_with_nan_weights_fails_at_the_step_0_evaluation(tmp_path, isolated_runs_dir):
    """A NaN starting model fails before its first step, not 'done': refused where it is loaded (issue 25: every
    loader checks the weights), before the step-0 held-out evaluation that caught it earlier."""
    model_dir = save_tiny_model(tmp_path / "nan-model", TINY_MODERNBERT)
    from safetensors.torch import load_file, save_file

    weights = load_file(model_dir / "model.safetensors")
    name = next(n for n in weights if "layers.1.mlp" in n)
    weights[name][0, 0] = float("nan")
    save_file(weights, model_dir / "model.safetensors", metadata={"format": "pt"})
    (run,) = prepare_runs(tiny_train_cfg(model_dir, "nanstart", recipe="mlm"))
    st = train_run(run)
    assert st["state"] == "failed"
    assert "weights are not finite" in st["error"] and "layers.1.mlp" in st["error"], st["error"]
    assert not (run / "final").exists() and not list((run / "checkpoints").glob("step-*"))


def test_done_guarantees_finite_weights(tmp_path):
    """The last check before final/ (and before every checkpoint): every parameter finite, the bad ones named."""
    from backend.core.errors import NonFiniteError
    from backend.engine.finite import check_weights
    from backend.engine.precision import make_accelerator

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    check_weights(make_accelerator("fp32"), model, tmp_path, 12)  # finite: passes
    with torch.no_grad():
        model[1].bias[0] = float("inf")
    with pytest.raises(NonFiniteError, match=r"non-finite weights at step 12: NaN or infinity in 1\.bias;"):
        check_weights(make_accelerator("fp32"), model, tmp_path, 12)


# --- 2. --run-dir without --resume never retrains a run that has trained -----------------------------------------


def test_run_dir_without_resume_refuses_a_started_run_and_changes_nothing(trained_run, isolated_runs_dir):
    run = _copy(trained_run, isolated_runs_dir)
    before = {"final": _digest(run / "final"), "metrics": (run / "metrics.jsonl").read_text()}
    status = json.loads((run / "status.json").read_text())
    with pytest.raises(DetourError) as e:  # a finished run
        train_run(run)
    assert "has finished" in str(e.value) and f"train {run / 'config.yaml'} --name done-run-2" in str(e.value)
    assert _digest(run / "final") == before["final"] and (run / "metrics.jsonl").read_text() == before["metrics"]
    assert json.loads((run / "status.json").read_text()) == status

    # killed (kill -9) at step 10: newest checkpoint step 8, status still 'running' with a dead pid
    shutil.rmtree(run / "final")
    shutil.rmtree(run / "checkpoints" / "step-00000012")
    rows = [r for r in read_metrics(run) if r["step"] <= 10]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_status(run, state="running", pid=2**22 + 12345)
    with pytest.raises(DetourError) as e:
        train_run(run)
    msg = str(e.value)
    assert (
        "trained to step 8 (failed, newest checkpoint step-00000008)" in msg
        and f"--run-dir {run} --resume" in msg
        and "--name done-run-2" in msg
    )
    assert [r["step"] for r in read_metrics(run)] == [r["step"] for r in rows]  # not truncated
    assert (run / "checkpoints" / "step-00000008" / "COMPLETE").exists()

    r = _cli("train", "--run-dir", str(run))  # the CLI: one line, exit 2
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith(f"error: run '{run.name}' has already")
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr

    assert train_run(run, resume=True)["state"] == "done"  # what the user meant: the steps continue, no gap
    steps = [r["step"] for r in read_metrics(run) if r["type"] == "train"]
    assert steps == list(range(1, 13))


def test_resume_refuses_a_finished_run_and_changes_nothing(trained_run, isolated_runs_dir):
    """--resume on a run whose final/ is written would retrain from its last checkpoint and replace final/."""
    run = _copy(trained_run, isolated_runs_dir)
    before = {"final": _digest(run / "final"), "metrics": (run / "metrics.jsonl").read_text()}
    status = (run / "status.json").read_text()
    with pytest.raises(DetourError) as e:
        train_run(run, resume=True)
    assert "has finished" in str(e.value) and "nothing to resume" in str(e.value)
    assert _digest(run / "final") == before["final"] and (run / "metrics.jsonl").read_text() == before["metrics"]
    assert (run / "status.json").read_text() == status

    r = _cli("train", "--run-dir", str(run), "--resume")  # the CLI: one line, exit 2
    assert r.returncode == 2 and "nothing to resume" in r.stderr.strip().splitlines()[-1], r.stderr


def test_resume_with_every_checkpoint_damaged_refuses_instead_of_starting_over(trained_run, isolated_runs_dir):
    """Starting from step 0 would rewrite the metrics of steps 1-10 and prune the damaged checkpoints (whose steps
    are higher than the new ones): the run fails naming them, and its files stay as they were."""
    run = _copy(trained_run, isolated_runs_dir)
    shutil.rmtree(run / "final")  # killed before the end
    write_status(run, state="running", pid=2**22 + 12345)
    for ck in (run / "checkpoints").glob("step-*"):
        victim = ck / "model" / "model.safetensors"
        victim.write_bytes(victim.read_bytes()[:100])  # truncated
    before = {"checkpoints": _digest(run / "checkpoints"), "metrics": (run / "metrics.jsonl").read_text()}
    st = train_run(run, resume=True)
    assert st["state"] == "failed"
    assert "no usable checkpoint" in st["error"] and "step-00000004, step-00000008, step-00000012" in st["error"]
    assert _digest(run / "checkpoints") == before["checkpoints"]
    assert (run / "metrics.jsonl").read_text() == before["metrics"] and not (run / "final").exists()


# --- 3. two launches of one new name: the loser gets the clean message ----------------------------------------


def test_concurrent_launch_of_one_new_name_gives_the_clean_error_and_leaves_nothing(
    tiny_modernbert_dir, isolated_runs_dir, monkeypatch
):
    """Another launch of 'race' claims 'race-mlm' while this one runs its preflight (seconds: it reads the corpus):
    this one must say 'already exists' (not FileExistsError) and leave no 'race-detour' of its own behind."""
    import backend.runs.preflight as preflight

    real_check = preflight.check

    def check_while_another_launch_wins(cfg, *a, **k):
        facts = real_check(cfg, *a, **k)
        (isolated_runs_dir / "race-mlm").mkdir(parents=True)
        return facts

    monkeypatch.setattr(preflight, "check", check_while_another_launch_wins)
    with pytest.raises(ConfigError, match=r"a run named 'race-mlm' already exists; try 'race-2'"):
        prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "race", recipe="pair"))
    assert sorted(p.name for p in isolated_runs_dir.iterdir()) == ["race-mlm"]


# --- 4. what training would trip on is refused before the run directory exists ----------------------------------


@pytest.mark.parametrize("damage", ["no weights", "truncated", "bin only"])
def test_model_folder_with_missing_or_truncated_weights_is_refused_before_the_run_exists(
    damage, tmp_path, tiny_modernbert_dir, isolated_runs_dir
):
    model = tmp_path / "model"
    shutil.copytree(tiny_modernbert_dir, model)
    weights = model / "model.safetensors"
    if damage == "truncated":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif damage == "bin only":
        weights.rename(model / "pytorch_model.bin")
    else:
        weights.unlink()
    with pytest.raises(ModelSpecError) as e:
        prepare_runs(tiny_train_cfg(model, "noweights", recipe="mlm"))
    expected = {"truncated": f"{weights} is truncated", "no weights": "no .safetensors weights"}
    assert expected.get(damage, "found pytorch_model.bin") in str(e.value)
    assert not isolated_runs_dir.exists() or not any(isolated_runs_dir.iterdir())


def test_absolute_positions_shorter_than_seq_len_are_refused_naming_both_numbers(isolated_runs_dir):
    """Issue 18 part 3: BERT with 128 learned positions and train.seq_len 256 failed at the first step."""
    arch = {**TINY_BERT, "max_position_embeddings": 128}
    cfg = load_config(
        {
            "name": "bert128",
            "recipe": "pretrain",
            "model": {"name": "from_scratch", "from_scratch": arch, "tokenizer": "detour-tiny-en"},
            "train": {"seq_len": 256, "batch_size": 2, "precision": "fp32"},
            "phases": {"main": {"steps": 2}},
        }
    )
    with pytest.raises(ConfigError) as e:
        prepare_runs(cfg)
    assert e.value.key == "train.seq_len" and "256" in str(e.value) and "max_position_embeddings 128" in str(e.value)
    assert not (isolated_runs_dir / "bert128").exists()
    from backend.runs.preflight import check

    with pytest.raises(ConfigError, match="max_position_embeddings 128"):  # the Launch form's as-you-type check
        check(cfg, check_data=False)


def test_rotary_positions_beyond_the_trained_length_warn_instead(tiny_modernbert_dir, tmp_path):
    from backend.runs.preflight import check

    short = save_tiny_model(tmp_path / "mb64", {**TINY_MODERNBERT, "max_position_embeddings": 32})
    facts = check(tiny_train_cfg(short, "rot", recipe="mlm"), check_data=False)  # seq_len 64 > 32
    assert len(facts["warnings"]) == 1 and "train.seq_len 64" in facts["warnings"][0]
    assert "max_position_embeddings 32" in facts["warnings"][0]
    assert check(tiny_train_cfg(tiny_modernbert_dir, "rot", recipe="mlm"), check_data=False)["warnings"] == []


# --- 5. specific errors instead of tracebacks: run configs, run models --------------------------------------------


@pytest.mark.parametrize("content", ["", "train: [1, 2\n", "- just\n- a list\n"], ids=["empty", "malformed", "a-list"])
def test_resume_with_an_empty_or_malformed_config_names_the_file_and_marks_the_run_failed(
    content, trained_run, isolated_runs_dir
):
    run = _copy(trained_run, isolated_runs_dir)
    write_status(run, state="running", pid=2**22 + 12345)  # killed earlier
    (run / "config.yaml").write_text(content)
    with pytest.raises(ConfigError) as e:
        train_run(run, resume=True)
    assert str(run / "config.yaml") in str(e.value)
    st = read_status(run)
    assert st["state"] == "failed" and str(run / "config.yaml") in st["error"]


def test_final_model_is_sealed_and_a_damaged_one_is_refused_by_every_loader(trained_run, isolated_runs_dir):
    """final/ carries a manifest (sha256 of every file): a truncated or same-size altered file is named by
    fill-mask, CKA and weight change, and the CLI says so in one line (it printed 'nan%' with exit 0)."""
    from backend.analysis.api import cka_between, weight_change_between
    from backend.analysis.fill_mask import clear_cache, fill_mask

    run = _copy(trained_run, isolated_runs_dir)
    assert json.loads((run / "final" / "manifest.json").read_text())["model.safetensors"]["sha256"]
    texts = ["The protein binds the receptor.", "Cells divide.", "A gene is expressed.", "Enzymes act."]
    weights = run / "final" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-8:] = b"\xff\xff\xc0\x7f" * 2  # NaN bit patterns over the last float32 values: same size
    weights.write_bytes(bytes(data))
    clear_cache()
    for load in (
        lambda: fill_mask([str(run)], "The [MASK] binds.", top_k=3),
        lambda: cka_between(str(run), str(run), texts, n_texts=None, max_len=16),
        lambda: weight_change_between(str(run), str(run)),
    ):
        with pytest.raises(ModelSpecError, match=rf"file {weights} is corrupt \(sha256 mismatch\)"):
            load()
    r = _cli("fill-mask", "The [MASK] binds.", "--model", str(run))
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"error: model '{run}': file {weights} is corrupt (sha256 mismatch); it no longer matches the manifest "
        "written with it, so it is not loaded"
    ]
    weights.write_bytes(bytes(data[:1000]))  # truncated
    with pytest.raises(ModelSpecError, match="truncated"):
        fill_mask([str(run)], "The [MASK] binds.", top_k=3)


def test_an_old_final_model_without_manifest_still_loads_with_a_note(trained_run, isolated_runs_dir, caplog):
    from backend.analysis.fill_mask import clear_cache, fill_mask

    run = _copy(trained_run, isolated_runs_dir)
    (run / "final" / "manifest.json").unlink()
    (run / "final" / "COMPLETE").unlink()
    clear_cache()
    with caplog.at_level("WARNING"):
        (res,) = fill_mask([str(run)], "The [MASK] binds.", top_k=2)
    assert len(res["predictions"]) == 2
    assert "has no manifest.json" in caplog.text and "without a checksum" in caplog.text
    weights = run / "final" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # without a manifest, truncation is still named
    clear_cache()
    with pytest.raises(DetourError, match=f"{weights} is truncated"):
        fill_mask([str(run)], "The [MASK] binds.", top_k=2)


# --- other inputs the CLI and the app read ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "content, words",
    [(b"\x00\x01binary" * 50, "binary"), (b"Too short.", "shorter than one")],
    ids=["binary", "too-short"],
)
def test_a_held_out_file_that_is_binary_or_too_short_is_refused_before_the_run_exists(
    content, words, tmp_path, tiny_modernbert_dir, isolated_runs_dir
):
    """An empty held-out set logged a held-out loss of 0 at every evaluation; a binary one trained on garbage."""
    held = tmp_path / "held.txt"
    held.write_bytes(content)
    with pytest.raises(DetourError) as e:
        prepare_runs(tiny_train_cfg(tiny_modernbert_dir, "held", recipe="mlm", **{"data.heldout_file": str(held)}))
    assert str(e.value).startswith("data.heldout_file:") and words in str(e.value)
    assert not (isolated_runs_dir / "held").exists()


def test_from_scratch_layers_default_to_the_architecture_for_freeze_checks():
    """Without num_hidden_layers a BERT has 12 blocks: freezing 0-7 is valid (it was refused as '0 layers')."""
    from backend.runs.preflight import check

    arch = {"model_type": "bert", "hidden_size": 32, "intermediate_size": 32, "num_attention_heads": 2}
    cfg = load_config(
        {
            "recipe": "pretrain",
            "model": {"name": "from_scratch", "from_scratch": arch, "tokenizer": "detour-tiny-en"},
            "phases": {"main": {"freeze": {"layers": "0-7"}}},
        }
    )
    assert check(cfg, check_data=False)["num_layers"] == 12


@pytest.mark.parametrize(
    "content, words",
    [(b"\x00\x01\x02" * 400, "binary"), (b"caf\xe9 au lait\n" * 5, "UTF-8")],
    ids=["binary", "latin-1"],
)
def test_cka_texts_that_are_not_text_are_refused(content, words, tmp_path):
    """A binary file used to give 'wrote cka.json' from decoded garbage (errors='replace')."""
    from backend.analysis.api import read_texts

    f = tmp_path / "texts.txt"
    f.write_bytes(content)
    with pytest.raises(DetourError, match=words):
        read_texts(f)

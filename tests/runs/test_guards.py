"""Issue 25, mechanisms 1 and 2 for training: nothing asked is silently ignored, a resume continues what trained,
and values that parse but mean nonsense are refused up front."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from backend.core.errors import ConfigError
from backend.core.paths import REPO_ROOT
from backend.engine.rundir import read_status
from backend.runs.train import prepare_runs, train_run
from conftest import tiny_train_cfg

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "backend", *argv], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip


@pytest.fixture(scope="module")
def cut_run(tmp_path_factory, tiny_modernbert_dir) -> Path:
    """A tiny MLM run on a corpus file, cut after its step-8 checkpoint (as a kill would leave it)."""
    root = tmp_path_factory.mktemp("cut")
    corpus = root / "corpus.txt"
    shutil.copy(REPO_ROOT / "assets" / "demo" / "bio_corpus.txt", corpus)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DETOUR_CACHE_DIR", str(root / "cache"))
        cfg = tiny_train_cfg(tiny_modernbert_dir, "cut", recipe="mlm", data__corpus=str(corpus))
        (run,) = prepare_runs(cfg, root=root / "runs")
        assert train_run(run)["state"] == "done"
    shutil.rmtree(run / "final")
    shutil.rmtree(run / "checkpoints" / "step-00000012")
    return run


def _copy(run: Path, root: Path) -> Path:
    dst = root / run.name
    shutil.copytree(run, dst)
    return dst


def _edit(run: Path, **sets) -> None:
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    for key, v in sets.items():
        section, leaf = key.split("__")
        cfg[section][leaf] = v
    (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


def test_resume_with_set_or_name_is_refused_not_ignored(cut_run, isolated_runs_dir):
    run = _copy(cut_run, isolated_runs_dir)
    r = _cli("train", "--run-dir", str(run), "--resume", "--set", "train.lr=1e-3")
    assert r.returncode == 2, r.stderr
    last = r.stderr.strip().splitlines()
    assert len(last) == 1 and "--set" in last[0] and "train.lr=1e-3" in last[0] and "new run" in last[0], r.stderr
    assert read_status(run)["state"] == "done"  # untouched (the cut run's last status)


def test_resume_refuses_an_edited_config_naming_the_keys_and_keeps_data_info(cut_run, isolated_runs_dir):
    run = _copy(cut_run, isolated_runs_dir)
    info = (run / "data_info.json").read_text()
    _edit(run, train__seq_len=32, train__batch_size=2)
    with pytest.raises(ConfigError) as e:
        train_run(run, resume=True)
    msg = str(e.value)
    assert "train.batch_size 4 -> 2" in msg and "train.seq_len 64 -> 32" in msg and str(run / "config.yaml") in msg
    assert (run / "data_info.json").read_text() == info
    assert not (run / "final").exists()

    _edit(run, train__seq_len=64, train__batch_size=4, logging__log_every=2)  # what a resume may change
    assert train_run(run, resume=True)["state"] == "done"
    assert json.loads((run / "data_info.json").read_text())["fingerprint"] == json.loads(info)["fingerprint"]


def test_resume_refuses_a_corpus_that_changed_since_the_run_trained(cut_run, isolated_runs_dir):
    run = _copy(cut_run, isolated_runs_dir)
    info = (run / "data_info.json").read_text()
    corpus = Path(yaml.safe_load((run / "config.yaml").read_text())["data"]["corpus"])
    moved = isolated_runs_dir.parent / "corpus.txt"
    moved.write_text(corpus.read_text() + "\n\nA new paragraph appended after the run had trained.\n")
    _edit(run, data__corpus=str(moved))  # the config names a file that now reads differently
    with pytest.raises(ConfigError, match="data.corpus"):  # the path itself changed: the config check names it
        train_run(run, resume=True)
    _edit(run, data__corpus=str(corpus))
    shutil.copy(moved, corpus)
    try:
        st = train_run(run, resume=True)
    finally:
        shutil.copy(REPO_ROOT / "assets" / "demo" / "bio_corpus.txt", corpus)
    assert st["state"] == "failed" and "DataError" in st["error"] and "corpus changed" in st["error"], st
    assert (run / "data_info.json").read_text() == info
    assert not (run / "final").exists()


# --- divergence: a run that ends above a blind guess is failed, naming the step -----------------------------------


def test_a_diverged_run_is_failed_naming_the_step_not_done(tiny_modernbert_dir, isolated_runs_dir):
    cfg = tiny_train_cfg(tiny_modernbert_dir, "lr1", recipe="mlm", train__lr=1.0, train__warmup_tokens=0)
    (run,) = prepare_runs(cfg)
    st = train_run(run)
    assert st["state"] == "failed", st
    assert "DivergedError" in st["error"] and "ln(vocabulary) = " in st["error"], st["error"]
    assert "passed that line at step 4" in st["error"], st["error"]
    assert not (run / "final").exists()


def test_divergence_rule_ignores_a_recovered_spike_and_a_scratch_start():
    from backend.engine.divergence import DivergedError, Watch

    w = Watch(16384)  # ln V = 9.70
    for step, loss in ((0, 6.0), (4, 50.0), (8, 5.0)):  # a spike that recovered
        w.see(step, {"eval_mlm_loss": loss})
    w.check(Path("r"))
    w = Watch(16384)
    for step, loss in ((0, 10.4), (4, 10.1)):  # from scratch: starts above ln V, a little better than its start
        w.see(step, {"eval_mlm_loss": loss})
    w.check(Path("r"))
    w.see(8, {"eval_mlm_loss": 223.0})
    with pytest.raises(DivergedError, match="loss 223.00 at step 8 .* passed that line at step 8"):
        w.check(Path("r"))


# --- a step larger than a phase's budget; a cancel mid-step ---------------------------------------------------------


def test_a_step_larger_than_a_phase_budget_is_refused_at_validate_and_launch(tiny_modernbert_dir, isolated_runs_dir):
    from backend.runs.preflight import check

    cfg = tiny_train_cfg(
        tiny_modernbert_dir, "huge", recipe="mlm", train__grad_accum=100000, phases__main__steps="null",
        phases__main__tokens=4096,
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"train.grad_accum.*25,600,000 tokens.*phase 'main' \(4,096 tokens\)"):
        check(cfg, check_data=False)
    with pytest.raises(ConfigError, match="train.grad_accum"):
        prepare_runs(cfg)
    assert not (isolated_runs_dir / "huge").exists()
    r = _cli("validate", "--set", f"model.name={tiny_modernbert_dir}", "--set", "train.grad_accum=100000",
             "--set", "phases.main.tokens=4096", "--set", "recipe=mlm")  # fmt: skip
    assert r.returncode == 2 and "error: config key 'train.grad_accum'" in r.stderr, r.stderr
    check(tiny_train_cfg(tiny_modernbert_dir, "ok", recipe="mlm", train__grad_accum=4), check_data=False)


def test_sigterm_stops_a_run_within_seconds_even_mid_step(tiny_modernbert_dir, isolated_runs_dir):
    """One step of 3,000 micro-batches takes far longer than the 5 s allowed: the stop is read between them."""
    import signal
    import threading
    import time

    cfg = tiny_train_cfg(tiny_modernbert_dir, "slow", recipe="mlm", train__batch_size=1, train__grad_accum=3000,
                         phases__main__steps=2, phases__decay__steps=0)  # fmt: skip
    (run,) = prepare_runs(cfg)
    sent: list[float] = []

    def cancel_once_training() -> None:
        metrics = run / "metrics.jsonl"
        while not (metrics.exists() and '"phase"' in metrics.read_text()):
            time.sleep(0.05)
        time.sleep(0.5)  # inside the first step's micro-batches
        sent.append(time.time())
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=cancel_once_training, daemon=True).start()
    st = train_run(run)
    took = time.time() - sent[0]
    assert st["state"] == "cancelled", st
    assert took < 5, f"the cancel took {took:.1f} s"
    assert not [r for r in (json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines())
                if r["type"] == "train"]  # fmt: skip


# --- malformed manifests: the checkpoint is damaged, never a traceback or a pass -----------------------------------


@pytest.mark.parametrize("manifest", ["[]", "{}", '{"model/model.safetensors": {}}', '{"x": {"size": 1}}', "null"])
def test_a_malformed_manifest_makes_the_checkpoint_damaged_and_resume_falls_back(cut_run, isolated_runs_dir, manifest):
    from backend.core.errors import CheckpointError
    from backend.engine import checkpoint

    run = _copy(cut_run, isolated_runs_dir)
    newest = run / "checkpoints" / "step-00000008"
    (newest / "manifest.json").write_text(manifest)
    with pytest.raises(CheckpointError, match="not what the seal writes"):
        checkpoint.verify(newest)
    logged: list[str] = []
    ck, state = checkpoint.latest_good(run, log=logged.append)
    assert ck.name == "step-00000004" and state["step"] == 4
    assert "step-00000008" in logged[0] and "falling back" in logged[0]


def test_an_empty_manifest_in_final_does_not_let_altered_weights_load(cut_run, isolated_runs_dir, tiny_modernbert_dir):
    from backend.core.errors import ModelSpecError
    from backend.engine import checkpoint, model_files

    run = _copy(cut_run, isolated_runs_dir)
    final = run / "final"
    shutil.copytree(run / "checkpoints" / "step-00000008" / "model", final)
    checkpoint.seal(final, "sealed\n")
    model_files.check(final, "runs/cut")  # sealed and whole: loads
    (final / "manifest.json").write_text("{}")
    with pytest.raises(ModelSpecError, match="lists no file"):
        model_files.check(final, "runs/cut")


# --- a held-out file that is training text ----------------------------------------------------------------------


def test_a_heldout_file_inside_the_training_corpus_is_refused_with_the_overlap(tiny_modernbert_dir, tmp_path):
    from backend.core.errors import DataError
    from backend.runs.preflight import check

    demo = REPO_ROOT / "assets" / "demo" / "bio_corpus.txt"
    link = tmp_path / "held.txt"
    link.symlink_to(demo)  # the same file under another name
    cfg = tiny_train_cfg(tiny_modernbert_dir, "h", recipe="mlm", data__heldout_file=str(link))
    with pytest.raises(DataError, match="is a file of the training corpus"):
        check(cfg)
    paragraphs = [p for p in demo.read_text().split("\n\n") if p.strip()]
    (tmp_path / "some.txt").write_text("\n\n".join(paragraphs[:3] + ["A sentence written only for the held-out set."]))
    cfg = tiny_train_cfg(tiny_modernbert_dir, "h", recipe="mlm", data__heldout_file=str(tmp_path / "some.txt"))
    with pytest.raises(DataError, match="3 of its 4 distinct documents are also in the training corpus"):
        check(cfg)
    (tmp_path / "own.txt").write_text("Text that is nowhere in the corpus, long enough to fill a held-out row. " * 20)
    check(tiny_train_cfg(tiny_modernbert_dir, "h", recipe="mlm", data__heldout_file=str(tmp_path / "own.txt")))


def test_a_heldout_file_of_corpus_text_rewrapped_into_other_lines_is_refused(tiny_modernbert_dir, tmp_path):
    import textwrap

    from backend.core.errors import DataError
    from backend.runs.preflight import check

    demo = REPO_ROOT / "assets" / "demo" / "bio_corpus.txt"
    paragraphs = [" ".join(p.split()) for p in demo.read_text().split("\n\n") if len(p.split()) > 40]
    # the corpus reads paragraphs; these are the same words cut at 50 columns, one document per line, double-spaced
    held = "\n".join(textwrap.fill(p, 50).replace(" ", "  ") for p in paragraphs[:2])
    (tmp_path / "rewrapped.txt").write_text(held)
    cfg = tiny_train_cfg(tiny_modernbert_dir, "h", recipe="mlm", data__heldout_file=str(tmp_path / "rewrapped.txt"))
    with pytest.raises(DataError, match="are also in the training corpus.*whatever the line breaks"):
        check(cfg)
    # a held-out text that only shares a common phrase here and there is fine
    own = "The results of this study suggest that further work is needed. " + "Quiet lakes hold cold water. " * 40
    (tmp_path / "own.txt").write_text(own)
    check(tiny_train_cfg(tiny_modernbert_dir, "h", recipe="mlm", data__heldout_file=str(tmp_path / "own.txt")))

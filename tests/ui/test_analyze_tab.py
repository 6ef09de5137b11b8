"""Analyze tab: sensible default models, weight change labelled the way it is computed, and a trajectory that
starts at the base model and says when the run kept too few checkpoints."""

from __future__ import annotations

import shutil
import time

import pytest

from app import analyze_tab
from backend.analysis.weight_change import relative_weight_change
from backend.core import atomic
from backend.engine import rundir
from backend.engine.config import default_config
from tests.conftest import TINY_MODERNBERT, save_tiny_model


@pytest.fixture(autouse=True)
def app_env(tmp_path, monkeypatch, tiny_modernbert_dir):
    monkeypatch.setenv("DETOUR_ALLOWED_ROOTS", str(tiny_modernbert_dir))


def saved_run(root, name: str, recipe: str, pair: str | None = None, created: float | None = None):
    d = root / name
    (d / "final").mkdir(parents=True)
    cfg = {**default_config(), "name": name, "recipe": recipe}
    if pair:
        cfg["_meta"] = {"pair": pair, "role": "detour" if recipe == "clm_detour" else "mlm"}
    atomic.write_yaml(d / "config.yaml", cfg)
    rundir.write_status(d, state="done", created_at=created or time.time())
    return d


def test_default_models_never_compare_a_model_with_itself(isolated_runs_dir):
    a, b, note = analyze_tab.default_models()
    assert (a, b) == ("detour-tiny-en", None) and "Only one model" in note

    saved_run(isolated_runs_dir, "lonely", "mlm", created=1)
    assert analyze_tab.default_models() == ("lonely", "detour-tiny-en", "")  # a run against the base

    saved_run(isolated_runs_dir, "old-detour", "clm_detour", pair="old", created=2)
    saved_run(isolated_runs_dir, "old-mlm", "mlm", pair="old", created=3)
    saved_run(isolated_runs_dir, "new-detour", "clm_detour", pair="new", created=4)
    saved_run(isolated_runs_dir, "new-mlm", "mlm", pair="new", created=5)
    saved_run(isolated_runs_dir, "other-mlm", "mlm", created=6)
    # A = the newest detour run, B = its own MLM sibling (the pairing the seed-noise ratio expects)
    assert analyze_tab.default_models() == ("new-detour", "new-mlm", "")


def test_same_model_twice_is_refused(tiny_modernbert_dir):
    *_, msg = analyze_tab.compute_cka(str(tiny_modernbert_dir), str(tiny_modernbert_dir), None, None, "demo")
    assert "choose two different models" in msg


def test_weight_change_is_from_a_to_b_as_labelled(tiny_modernbert_dir, isolated_runs_dir):
    other = save_tiny_model(isolated_runs_dir / "other", TINY_MODERNBERT, seed=5)
    fig, msg = analyze_tab.compute_weight_change(str(tiny_modernbert_dir), str(other))
    title = fig.layout.title.text
    assert title.index(f"A ({tiny_modernbert_dir})") < title.index(f"B ({other})") and "relative to A" in title
    assert fig.layout.yaxis.title.text == "‖W_B − W_A‖ / ‖W_A‖"
    a_to_b = relative_weight_change(str(tiny_modernbert_dir), str(other))
    b_to_a = relative_weight_change(str(other), str(tiny_modernbert_dir))
    assert list(fig.data[0].y[1:-1]) == pytest.approx(a_to_b["layers"])  # the norm of A divides: A is the reference
    assert list(fig.data[0].y[1:-1]) != pytest.approx(b_to_a["layers"])


def run_with_checkpoints(root, base, steps_and_models, total_steps: int, tokens_per_step: int = 256):
    d = root / "traj"
    d.mkdir(parents=True)
    cfg = {**default_config(), "name": "traj", "recipe": "clm_detour"}
    cfg["model"]["name"] = str(base)
    atomic.write_yaml(d / "config.yaml", cfg)
    total = total_steps * tokens_per_step
    rundir.write_status(d, state="done", step=total_steps, total_steps=total_steps, total_tokens=total)
    for step, src in steps_and_models:
        ck = d / "checkpoints" / f"step-{step:08d}"
        shutil.copytree(src, ck / "model")
        state = {"step": step, "tokens_seen": tokens_per_step * step, "phase": "main", "tag": None}
        atomic.write_json(ck / "trainer_state.json", state)
        (ck / "COMPLETE").write_text("")
    return d


def test_trajectory_starts_at_the_base_and_hints_at_more_checkpoints(tiny_modernbert_dir, isolated_runs_dir):
    other = save_tiny_model(isolated_runs_dir / "other", TINY_MODERNBERT, seed=5)
    run_with_checkpoints(isolated_runs_dir, tiny_modernbert_dir, [(19, other), (20, other)], total_steps=20)
    fig, wfig, msg = analyze_tab.compute_trajectory("traj", "", "demo", n_texts=6, max_len=32)
    assert msg.startswith("✓ 2 checkpoints"), msg
    assert list(fig.data[0].x) == [0, 19 * 256, 20 * 256]  # the base model is the point at 0 tokens
    assert all(t.y[0] == 0 for t in fig.data) and all(t.y[0] == 0 for t in wfig.data)  # against itself
    assert fig.data[1].y[1] > 0
    assert "`logging.checkpoint_every`" in msg and "(this run: 100 steps of 20; e.g. 2)" in msg
    assert "`logging.keep_checkpoints`" in msg

    # another reference: the base's own divergence from it is computed, not assumed
    fig, _, msg = analyze_tab.compute_trajectory("traj", str(other), "demo", n_texts=6, max_len=32)
    assert list(fig.data[0].x)[0] == 0 and fig.data[1].y[0] > 0 and fig.data[1].y[2] == pytest.approx(0, abs=1e-6)


def test_a_well_checkpointed_trajectory_gets_no_hint(tiny_modernbert_dir, isolated_runs_dir):
    other = save_tiny_model(isolated_runs_dir / "other", TINY_MODERNBERT, seed=5)
    run_with_checkpoints(isolated_runs_dir, tiny_modernbert_dir, [(5, other), (10, other), (20, other)], 20)
    _, _, msg = analyze_tab.compute_trajectory("traj", "", "demo", n_texts=6, max_len=32)
    assert msg.startswith("✓ 3 checkpoints") and "checkpoint_every" not in msg


def test_one_newest_pair_rule_across_tabs(isolated_runs_dir, tiny_modernbert_dir):
    """Issue 24 #5: Analyze paired a lone clm_detour run with another pair's MLM run while Detour and Fill-mask
    showed a real pair. Every tab takes the newest real pair; a lone run's partner is the base it started from."""
    from app import default_picks, model_choices

    lone = saved_run(isolated_runs_dir, "solo", "clm_detour", created=1)
    cfg = rundir.read_config(lone)
    cfg["model"]["name"] = str(tiny_modernbert_dir)  # a lone run started from a folder
    atomic.write_yaml(lone / "config.yaml", cfg)
    assert analyze_tab.default_models() == ("solo", str(tiny_modernbert_dir), "")
    assert default_picks(model_choices(), 4) == [str(tiny_modernbert_dir), "solo", None, None]

    saved_run(isolated_runs_dir, "p-detour", "clm_detour", pair="p", created=2)
    saved_run(isolated_runs_dir, "p-mlm", "mlm", pair="p", created=3)
    saved_run(isolated_runs_dir, "late", "clm_detour", created=4)  # a lone detour run, newer than the pair
    assert analyze_tab.default_models() == ("p-detour", "p-mlm", "")
    assert default_picks(model_choices(), 4) == ["detour-tiny-en", "p-detour", "p-mlm", None]


def test_a_run_still_training_is_labelled_with_its_step(isolated_runs_dir, tiny_modernbert_dir):
    """Issue 24 #9: Detour and Analyze used a training run's newest checkpoint silently."""
    import os

    from app import detour_tab, labelled, labelled_choices

    d = saved_run(isolated_runs_dir, "busy", "clm_detour")
    shutil.rmtree(d / "final")
    ck = d / "checkpoints" / "step-000040"
    shutil.copytree(tiny_modernbert_dir, ck / "model")
    (ck / "COMPLETE").write_text("")
    rundir.write_status(d, state="running", pid=os.getpid(), created_at=time.time())
    assert labelled("busy") == "busy (training, step 40)"
    assert ("busy (training, step 40)", "busy") in labelled_choices(["detour-tiny-en", "busy"])
    assert labelled("detour-tiny-en") == "detour-tiny-en"
    _, msg = detour_tab.show_surprise("The cell divides.", ["busy"])
    assert "busy (training, step 40)" in msg
    *_, msg = analyze_tab.compute_cka("busy", "detour-tiny-en", None, None, "demo", n_texts=4, max_len=16)
    assert "A = busy (training, step 40)" in msg, msg
    rundir.write_status(d, state="done")  # finished: no label
    assert labelled("busy") == "busy"


def test_trajectory_with_no_run_yet_says_how_to_make_one(isolated_runs_dir):
    """Found in the fresh-install browser walk: the Trajectory button said "run: choose a model"."""
    fig, wfig, msg = analyze_tab.compute_trajectory("", "", "demo")
    assert fig is None and wfig is None and msg == analyze_tab.NO_RUNS and "Launch" in msg


def test_a_missing_texts_file_is_said_to_be_missing_not_outside(tiny_modernbert_dir, tmp_path, monkeypatch):
    """A texts file typed with a slip (here, relative to where the app runs) was called "outside the folders this app
    may read": the user looked for a permission to change. Missing comes first, wherever it was looked for."""
    monkeypatch.setenv("DETOUR_ALLOWED_ROOTS", str(tiny_modernbert_dir))
    monkeypatch.chdir(tmp_path)
    for typed in ("abstracts.txt", str(tmp_path / "uploads" / "abstracts.txt")):
        heat, _, _, msg = analyze_tab.compute_cka("detour-tiny-en", str(tiny_modernbert_dir), None, None, typed)
        assert heat is None and f"texts: '{typed}' does not exist" in msg and "outside" not in msg, msg


def test_every_chart_names_what_it_shows(tiny_modernbert_dir, isolated_runs_dir):
    """After a new pair was compared, the previous pair's divergence, weight-change and trajectory charts stayed on
    screen with nothing saying whose they were: each chart's title names its models, or its run and reference."""
    other = save_tiny_model(isolated_runs_dir / "other", TINY_MODERNBERT, seed=5)
    run_with_checkpoints(isolated_runs_dir, tiny_modernbert_dir, [(10, other), (20, other)], total_steps=20)
    from backend.analysis.plots import fit_label

    fig, wfig, msg = analyze_tab.compute_trajectory("traj", str(other), "demo", n_texts=6, max_len=32)
    for f in (fig, wfig):
        assert f"traj from {fit_label(str(other))}" in f.layout.title.text, (f.layout.title.text, msg)
    a, b = str(tiny_modernbert_dir), str(other)
    _, div, _, msg = analyze_tab.compute_cka(a, b, None, None, "demo", n_texts=6, max_len=32)
    assert div.layout.title.text.startswith(f"Divergence per layer: {fit_label(a)} vs {fit_label(b)}"), msg

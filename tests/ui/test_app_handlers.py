"""Each tab's handlers on real small models, without a browser (the UI only wires these to components)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from app import (
    PathNotAllowed,
    analyze_tab,
    check_model_spec,
    check_path,
    fill_mask_tab,
    launch_tab,
    ner_evaluations,
    ner_tab,
    runs_tab,
)
from backend.core import atomic
from backend.engine import rundir
from backend.engine.config import default_config
from backend.runs import jobs


@pytest.fixture(autouse=True)
def app_env(tmp_path, monkeypatch, tiny_modernbert_dir, tiny_bert_dir):
    monkeypatch.setenv("DETOUR_ALLOWED_ROOTS", f"{tiny_modernbert_dir}:{tiny_bert_dir}")
    monkeypatch.setenv("DETOUR_UPLOADS_DIR", str(tmp_path / "uploads"))
    monkeypatch.setenv("DETOUR_EVALS_DIR", str(tmp_path / "evals"))
    monkeypatch.setattr(jobs, "ensure_worker", lambda *a, **k: None)  # nothing trains in these tests


def form(model: Path, **changes) -> list:
    cfg = default_config()
    cfg["name"] = "exp"
    cfg["recipe"] = "clm_detour"
    cfg["model"]["name"] = str(model)
    cfg["train"].update(seq_len=64, batch_size=4)
    cfg["phases"]["main"]["tokens"] = 4096
    values = launch_tab.config_to_values(cfg)
    for key, v in changes.items():
        values[launch_tab.KEYS.index(key.replace("__", "."))] = v
    return values


# --- paths --------------------------------------------------------------------------------------


def test_paths_are_confined(tmp_path, tiny_bert_dir, isolated_runs_dir, monkeypatch):
    assert check_path(tiny_bert_dir) == Path(tiny_bert_dir).resolve()
    with pytest.raises(PathNotAllowed, match="outside the folders this app may read.*DETOUR_ALLOWED_ROOTS"):
        check_path("/etc/passwd", "data.corpus")
    with pytest.raises(PathNotAllowed, match="outside"):
        check_path(str(tiny_bert_dir) + "/.." * 40 + "/etc")  # '..' is resolved before the check (up to /: /etc)
    link = isolated_runs_dir / "sneaky"
    isolated_runs_dir.mkdir(parents=True, exist_ok=True)
    link.symlink_to("/etc")
    with pytest.raises(PathNotAllowed, match="outside"):
        check_path(link / "passwd")  # a symlink out of an allowed root is refused too
    # a hub id is no path: online it passes as typed, offline (CI sets HF_HUB_OFFLINE) an uncached one is refused
    # at once, naming why (both set here: the suite passed only while an earlier test unset the variable)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert check_model_spec("answerdotai/ModernBERT-base") == "answerdotai/ModernBERT-base"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    with pytest.raises(PathNotAllowed, match="not in your Hugging Face cache.*HF_HUB_OFFLINE is set"):
        check_model_spec("answerdotai/ModernBERT-base")


# --- launch -------------------------------------------------------------------------------------


def test_launch_validation_preview_and_queue(tiny_modernbert_dir, isolated_runs_dir):
    res = launch_tab.validate_form(form(tiny_modernbert_dir))
    assert res["ok"], res["message"]
    assert "recipe: clm_detour" in res["yaml"] and "seq_len: 64" in res["yaml"]
    assert res["python"].startswith("python -m backend train --set recipe=clm_detour")
    assert res["accelerate"].startswith("accelerate launch")

    bad = launch_tab.validate_form(form(tiny_modernbert_dir, train__lr="abc"))
    assert not bad["ok"] and list(bad["errors"]) == ["train.lr"] and "expected a number" in bad["errors"]["train.lr"]
    bad = launch_tab.validate_form(form(tiny_modernbert_dir, phases__decay__fraction=1.5))
    assert list(bad["errors"]) == ["phases.decay.fraction"]
    # preflight: the freeze range must fit the model (4 layers)
    bad = launch_tab.validate_form(form(tiny_modernbert_dir, phases__main__freeze__layers="0-9"))
    assert (
        list(bad["errors"]) == ["phases.main.freeze.layers"]
        and "4 layers" in bad["errors"]["phases.main.freeze.layers"]
    )
    bad = launch_tab.validate_form(form(tiny_modernbert_dir, data__corpus="/etc/passwd"))
    assert list(bad["errors"]) == ["data.corpus"] and "outside" in bad["errors"]["data.corpus"]
    bad = launch_tab.validate_form(form(Path("/etc")))
    assert list(bad["errors"]) == ["model.name"]
    bad = launch_tab.validate_form(form(tiny_modernbert_dir, seeds="0,x"))
    assert list(bad["errors"]) == ["seeds"]

    out = launch_tab.launch(form(tiny_modernbert_dir, seeds="3,4"))
    assert out["ok"], out["message"]
    assert sorted(d.name for d in out["runs"]) == ["exp-s3", "exp-s4"]
    for d in out["runs"]:
        assert rundir.read_status(d)["state"] == "queued"
        assert rundir.read_config(d)["_meta"]["command"][:4] == ["python", "-m", "backend", "train"]
    out = launch_tab.launch(form(tiny_modernbert_dir, name="exp-s3", seeds="0"))
    assert not out["ok"] and list(out["errors"]) == ["name"] and "already exists" in out["errors"]["name"]


def test_save_load_and_upload(tiny_modernbert_dir, tmp_path):
    values = form(tiny_modernbert_dir, train__lr="1e-4", name="saved-exp")
    path, msg = launch_tab.save_config(values)
    assert path.exists() and "saved" in msg
    loaded, msg, _ = launch_tab.load_config_file(str(path))
    assert loaded is not None, msg
    assert loaded[launch_tab.KEYS.index("train.lr")] == "0.0001"
    assert loaded[launch_tab.KEYS.index("name")] == "saved-exp"
    assert ("saved-exp", str(path)) in launch_tab.saved_configs()
    _, msg, _ = launch_tab.load_config_file("/etc/hostname")
    assert "outside" in msg

    corpus = tmp_path / "c.txt"
    corpus.write_text("one document\n\nanother one\n" * 50)
    new, msg = launch_tab.store_upload(str(corpus), max_bytes=10_000)
    assert new and Path(new).read_text() == corpus.read_text() and check_path(new)
    new, msg = launch_tab.store_upload(str(corpus), max_bytes=100)
    assert new is None and "over the" in msg
    bad = tmp_path / "x.exe"
    bad.write_bytes(b"MZ")
    assert launch_tab.store_upload(str(bad), 10_000)[0] is None


def test_a_loaded_config_launches_with_the_settings_the_form_does_not_show(
    tiny_modernbert_dir, tmp_path, isolated_runs_dir, monkeypatch
):
    """Keys without a form field (checkpoints kept, betas, evaluation batches) come from the loaded file, not from
    the defaults: the run launched is the one in the file, and the page says which settings it kept."""
    import yaml

    monkeypatch.setattr(jobs, "ensure_worker", lambda *a, **k: None)  # queue only
    cfg = default_config()
    cfg.update(name="from-file", recipe="mlm")
    cfg["model"]["name"] = str(tiny_modernbert_dir)
    cfg["train"]["betas"] = [0.9, 0.95]
    cfg["logging"].update(eval_batches=3)
    path = tmp_path / "uploads" / "configs" / "from-file.yaml"  # where the app keeps configs (readable)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg))
    values, msg, base = launch_tab.load_config_file(str(path))
    for key in ("logging.eval_batches=3", "train.betas=[0.9, 0.95]"):
        assert key in msg, msg
    values[launch_tab.KEYS.index("train.lr")] = "1e-4"  # a change made in the form wins over the file
    res = launch_tab.validate_form(values, base=base)
    assert res["ok"] and "logging.eval_batches=3" in res["message"] and "eval_batches: 3" in res["yaml"]
    out = launch_tab.launch(values, base=base)
    assert out["ok"], out["message"]
    saved = yaml.safe_load((out["runs"][0] / "config.yaml").read_text())
    assert saved["logging"]["eval_batches"] == 3
    assert saved["train"]["betas"] == [0.9, 0.95] and saved["train"]["lr"] == 1e-4
    # a form built from scratch (no file loaded) says nothing about kept settings
    assert "setting(s)" not in launch_tab.validate_form(form(tiny_modernbert_dir, name="plain"))["message"]


# --- runs ---------------------------------------------------------------------------------------


def fake_run(root: Path, name: str, state: str = "done") -> Path:
    d = root / name
    d.mkdir(parents=True)
    atomic.write_yaml(d / "config.yaml", {**default_config(), "name": name})
    rundir.write_status(
        d,
        state=state,
        created_at=time.time(),
        step=20,
        total_steps=20,
        tokens_seen=5120,
        total_tokens=5120,
        phase="decay",
    )
    rows = [{"type": "phase", "step": 0, "phase": "main", "objective": "clm", "tokens_seen": 0}]
    rows += [
        {"type": "train", "step": s, "phase": "main", "objective": "clm", "loss": 9 - s / 10, "tokens_seen": 256 * s}
        for s in range(1, 17)
    ]
    rows += [{"type": "phase", "step": 16, "phase": "decay", "objective": "mlm", "tokens_seen": 4096}]
    rows += [
        {"type": "train", "step": s, "phase": "decay", "objective": "mlm", "loss": 8.5, "tokens_seen": 256 * s}
        for s in range(17, 21)
    ]
    rows += [{"type": "eval", "step": s, "tokens_seen": 256 * s, "eval_mlm_loss": 9 - s / 20} for s in (8, 16, 20)]
    for r in rows:
        atomic.append_jsonl(d / "metrics.jsonl", r)
    (d / "train.log").write_text("\n".join(f"line {i}" for i in range(100)) + "\n")
    return d


def test_runs_table_curves_log_cancel(isolated_runs_dir):
    fake_run(isolated_runs_dir, "alpha")
    queued = fake_run(isolated_runs_dir, "beta", state="queued")
    table = runs_tab.runs_table()
    assert [r[0] for r in table] == ["beta", "alpha"]  # newest first
    assert table[1][:6] == ["alpha", "done", "decay", "20/20", "5.12k/5.12k", "100%"]
    f_train, f_eval, *_ = runs_tab.curves(["alpha", "beta"])
    names = [t.name for t in f_train.data]
    assert "alpha · main (clm)" in names and "alpha · decay (mlm)" in names and "beta · main (clm)" in names
    assert any(s.x0 == 4096 for s in f_train.layout.shapes)  # the CLM -> MLM boundary is marked
    assert [list(t.y) for t in f_eval.data][0] == [9 - 8 / 20, 9 - 16 / 20, 9 - 20 / 20]
    assert runs_tab.log_tail("alpha", 5).splitlines() == [f"line {i}" for i in range(95, 100)]
    assert "no run named nope" in runs_tab.log_tail("nope")
    assert "name" in runs_tab.log_tail("../etc")  # a path is not a run name
    assert "removed from the queue" in runs_tab.cancel_run("beta")
    assert rundir.read_status(queued)["state"] == "cancelled"
    assert "only queued or running" in runs_tab.cancel_run("alpha")
    assert "queued to resume" in runs_tab.resume_run("beta")


# --- fill-mask ----------------------------------------------------------------------------------


def test_fill_mask_side_by_side(tiny_modernbert_dir, tiny_bert_dir):
    figs, msg = fill_mask_tab.predict(
        "The <mask> binds the receptor.", [str(tiny_modernbert_dir), None, str(tiny_bert_dir), ""], [False] * 4, top_k=4
    )
    assert figs[1] is None and figs[3] is None
    for f in (figs[0], figs[2]):
        assert len(f.data[0].x) == 4 and all(0 <= p <= 1 for p in f.data[0].x)
    assert figs[0].layout.xaxis.range == figs[2].layout.xaxis.range  # one scale for every panel
    assert msg.count("binds the receptor") == 2
    figs, msg = fill_mask_tab.predict("No mask at all.", [str(tiny_bert_dir)], [False])
    assert figs == [None] and "no mask token" in msg and "&lt;mask&gt;" in msg
    figs, msg = fill_mask_tab.predict("[MASK] and [MASK]", [str(tiny_bert_dir)], [False])
    assert "found 2 mask tokens" in msg
    figs, msg = fill_mask_tab.predict("The [MASK].", ["/etc"], [False])
    assert figs == [None] and "outside" in msg


def test_fill_mask_batch_answers_each_user_as_alone(tiny_modernbert_dir, tiny_bert_dir):
    """Issue 40: the users' requests waiting together run as one batch (one padded pass per model); each still gets
    its own answer, the same as alone, and a refused one is refused alone."""
    a, b = str(tiny_modernbert_dir), str(tiny_bert_dir)
    requests = [
        ("The <mask> binds the receptor.", [a, b], [False, False], 3),
        ("No mask at all.", [a, None], [False, False], 5),
        ("A much longer sentence, so that the batch is padded: the [MASK] was given twice daily for a week.",
         [None, a], [False, False], 5),
        ("The [MASK].", ["/etc", b], [False, False], 2),
    ]  # fmt: skip
    batched = fill_mask_tab.predict_many(requests)
    for (figs, msg), req in zip(batched, requests, strict=True):
        alone_figs, alone_msg = fill_mask_tab.predict(req[0], req[1], req[2], req[3])
        assert msg == alone_msg
        for f, g in zip(figs, alone_figs, strict=True):
            assert (f is None) == (g is None)
            if f is not None:
                assert list(f.data[0].y) == list(g.data[0].y)  # the same tokens, in the same order
                assert list(f.data[0].x) == pytest.approx(list(g.data[0].x), abs=1e-5)
    assert "no mask token" in batched[1][1] and "outside" in batched[3][1] and batched[3][0][1] is not None


# --- analyze ------------------------------------------------------------------------------------


def test_analyze_cka_weights_trajectory(tiny_modernbert_dir, tmp_path, isolated_runs_dir):
    from tests.conftest import TINY_MODERNBERT, save_tiny_model

    other = save_tiny_model(isolated_runs_dir / "other-model", TINY_MODERNBERT, seed=5)
    heat, div, rows, msg = analyze_tab.compute_cka(
        str(tiny_modernbert_dir), str(other), None, str(tiny_modernbert_dir), "demo", n_texts=8, max_len=32
    )  # control seed 1 defaults to model B
    assert msg.startswith("✓"), msg
    z = heat.data[0].z
    assert len(z) == 5 and len(z[0]) == 5  # embeddings + 4 blocks
    assert len(rows) == 5 and rows[0][0] == "embeddings" and rows[0][4] is not None
    assert [t.name for t in div.data] == ["divergence A vs B", "control (seed noise)", "ratio = divergence / control"]
    # the heatmap names the measure, n and hidden sizes and carries the shuffled-texts baseline (caption, hover)
    title = heat.layout.title.text
    assert title.startswith("Debiased CKA") and "n = 8 texts · hidden 64 / 64 · shuffled-texts baseline" in title
    assert heat.data[0].customdata is not None and "shuffled baseline" in heat.data[0].hovertemplate
    assert all(r[5] is not None for r in rows) and "Debiased CKA" in msg
    heat, div, rows, msg = analyze_tab.compute_cka(
        str(tiny_modernbert_dir), str(other), None, None, "demo", n_texts=8, max_len=32, measure="Linear CKA (biased)"
    )
    assert heat.layout.title.text.startswith("Linear CKA (biased)") and "1 − Linear CKA" in div.layout.title.text
    _, _, _, msg = analyze_tab.compute_cka(str(tiny_modernbert_dir), str(other), None, None, "demo", n_texts=3)
    assert "debiased needs at least 4 samples" in msg
    _, _, _, msg = analyze_tab.compute_cka(str(tiny_modernbert_dir), "/etc", None, None, "demo")
    assert "outside" in msg
    _, _, _, msg = analyze_tab.compute_cka(str(tiny_modernbert_dir), str(other), str(other), None, "demo")
    assert "MLM seed 2" in msg

    fig, msg = analyze_tab.compute_weight_change(str(tiny_modernbert_dir), str(other))
    assert msg.startswith("✓") and list(fig.data[0].x) == [
        "embeddings",
        "block_0",
        "block_1",
        "block_2",
        "block_3",
        "head",
    ]

    run = fake_run(isolated_runs_dir, "traj")
    cfg = rundir.read_config(run)
    cfg["model"]["name"] = str(tiny_modernbert_dir)
    atomic.write_yaml(run / "config.yaml", cfg)
    for step, src in ((8, tiny_modernbert_dir), (16, other)):
        ck = run / "checkpoints" / f"step-{step:08d}"
        shutil.copytree(src, ck / "model")
        atomic.write_json(
            ck / "trainer_state.json", {"step": step, "tokens_seen": 256 * step, "phase": "main", "tag": None}
        )
        (ck / "COMPLETE").write_text("")
    fig, wfig, msg = analyze_tab.compute_trajectory("traj", "", "demo", n_texts=6, max_len=32)
    assert msg.startswith("✓ 2 checkpoints"), msg
    assert len(fig.data) == 5 and list(fig.data[0].x) == [0, 2048, 4096]  # the base model at 0 tokens
    assert fig.data[1].y[1] == pytest.approx(0.0, abs=1e-6)  # checkpoint 1 is the reference itself
    assert wfig is not None


# --- NER ----------------------------------------------------------------------------------------


def test_ner_evaluate_tag_and_table(tiny_bert_dir):
    assert ner_evaluations.finetuned_choices() == []
    msg = ner_evaluations.run_evaluation([str(tiny_bert_dir)], "0", epochs=1, max_train=16)
    assert msg.startswith("✓"), msg
    choices = ner_evaluations.finetuned_choices()
    assert len(choices) == 1
    vals, msg = ner_tab.tag(ner_tab.EXAMPLE, [choices[0][1], None])
    assert vals[1] is None and "".join(seg for seg, _ in vals[0]) == ner_tab.EXAMPLE
    table = ner_evaluations.f1_table()
    assert len(table) == 1 and table[0][2] == Path(tiny_bert_dir).name and table[0][6] == "1/1"
    vals, msg = ner_tab.tag("", [choices[0][1]])
    assert "write a text" in msg
    vals, msg = ner_tab.tag("x", ["/etc"])
    assert "outside" in msg
    # many users at once (one batched pass): each answer as alone
    texts = [ner_tab.EXAMPLE, "", "Metformin was stopped at Boston Children's Hospital in 2019.", "x"]
    requests = [(t, [choices[0][1], None]) for t in texts] + [("x", ["/etc"])]
    assert [(a.values, a.message) for a in ner_tab.tag_many(requests)] == [ner_tab.tag(t, dirs) for t, dirs in requests]
    assert json.loads((Path(choices[0][1]) / "label_map.json").read_text())["task"] == "ner"


def test_runs_poll_sends_only_what_changed(isolated_runs_dir):
    d = fake_run(isolated_runs_dir, "gamma", state="running")
    first = runs_tab.poll_update([], None, "tokens_seen", None)
    assert first["names_changed"] and first["log_run"] == "gamma"
    assert first["table"] and first["curves"] is not None and first["log"]
    idle = runs_tab.poll_update([], "gamma", "tokens_seen", first["state"])
    assert not idle["names_changed"] and idle["table"] is None and idle["curves"] is None and idle["log"] is None
    atomic.append_jsonl(
        d / "metrics.jsonl",
        {"type": "train", "step": 21, "phase": "decay", "objective": "mlm", "loss": 8.4, "tokens_seen": 5376},
    )
    moved = runs_tab.poll_update([], "gamma", "tokens_seen", idle["state"])
    assert moved["curves"] is not None and moved["log"] is None
    sneaky = runs_tab.poll_update(["../../etc"], "../../etc", "step", moved["state"])
    assert "no '/' or '..'" in sneaky["log"]  # refused, never read


def test_safe_launch_defaults(monkeypatch):
    from app.__main__ import parse_args
    from app.main import AppContext, launch_kwargs, parse_size

    args = parse_args([])
    assert args.host == "127.0.0.1" and args.share is False and args.max_concurrent is None
    kw = launch_kwargs(args.host, None, args.share, AppContext(max_upload_bytes=parse_size("2mb")))
    assert kw["server_name"] == "127.0.0.1" and kw["share"] is False and kw["max_file_size"] == 2 * 1024**2
    assert kw["auth"] is None and kw["mcp_server"] is False
    import os

    assert os.environ["GRADIO_ANALYTICS_ENABLED"] == "False"


@pytest.mark.parametrize("size", ["0", "-5mb", "infmb", "nanmb", "abc"])
@pytest.mark.parametrize("where", ["flag", "env"])
def test_an_upload_limit_that_is_not_a_positive_size_stops_the_start_in_one_line(size, where, monkeypatch, capsys):
    """'-5mb' and '0' started an app that refused every upload; 'infmb' was an OverflowError traceback at start. The
    line names where the value came from."""
    import app.main
    from app.__main__ import main

    monkeypatch.setattr(app.main, "start", lambda *a, **kw: pytest.fail("the app started"))
    if where == "env":
        monkeypatch.setenv("DETOUR_MAX_UPLOAD", size)
    assert main(["--port", "1"] + ([f"--max-upload={size}"] if where == "flag" else [])) == 2
    err = capsys.readouterr().err.strip()
    said = "--max-upload" if where == "flag" else "DETOUR_MAX_UPLOAD"
    assert err == f"error: {said} '{size}': expected a positive size like 50mb", err


def test_app_start_gives_queued_runs_a_worker(isolated_runs_dir, monkeypatch):
    calls = []
    monkeypatch.setattr(jobs, "ensure_worker", lambda root, n=None: calls.append((root, n)) or 4242)
    fake_run(isolated_runs_dir, "done-run")
    assert runs_tab.ensure_worker_if_queued(2) is None and calls == []  # nothing queued: no worker
    fake_run(isolated_runs_dir, "waiting", state="queued")
    assert runs_tab.ensure_worker_if_queued(2) == 4242 and calls == [(isolated_runs_dir.resolve(), 2)]


def test_every_tab_is_built_by_build_ctx(isolated_runs_dir, tmp_path, monkeypatch):
    import inspect

    from app import detour_tab, main, reports_tab, sweeps_tab
    from backend.core import paths

    tabs = {launch_tab, runs_tab, analyze_tab, detour_tab, fill_mask_tab, ner_tab, reports_tab, sweeps_tab}
    assert {tab for _, _, tab in main.TABS} == tabs
    for _, _, tab in main.TABS:
        assert list(inspect.signature(tab.build).parameters) == ["ctx"], tab.__name__
    monkeypatch.setenv(paths.REPORTS_ENV, str(tmp_path / "reports"))
    monkeypatch.setenv(paths.SWEEPS_ENV, str(tmp_path / "sweeps"))
    demo = main.build_app(main.AppContext())
    assert {"launch", "runs", "analyze", "detour", "fill-mask", "ner", "reports", "sweeps"} <= {
        getattr(b, "id", None) for b in demo.blocks.values()
    }

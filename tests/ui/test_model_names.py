"""Any name works anywhere (issue 38, "Names"): every kind of name a user types for a model -- a bundled name, a
run's name, a sweep's run, a run's path, a cached hub id, a picker's label for it -- is fed to every entry point
that takes a model, CLI commands and app handlers alike, and each must find the same model. Every name below is a
copy of the bundled model's weights, so "the same model" is checked by what it computes (the same fill-mask answer,
a weight change of 0). A name that resolves to nothing, or a pair's name, is refused at every entry point with the
names it was close to, before anything runs.

Before the one resolver, a run's name typed into a CLI command or into the Task-suite panel was taken for a hub id
("not in your Hugging Face cache"), a sweep's run worked nowhere, and a cached model's label only in the app."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from test_cached_models import put_in_hub_cache

from backend.__main__ import main as cli
from backend.core.paths import BUNDLED_MODELS_DIR, DEFAULT_MODEL
from backend.engine.model_ref import ModelRef, resolve_model
from backend.engine.rundir import write_status

CACHED = "detour-lab/tiny-cached"
TEXT = "Aspirin inhibits the [MASK] of prostaglandins."
WEIGHTS = hashlib.sha256((BUNDLED_MODELS_DIR / DEFAULT_MODEL / "model.safetensors").read_bytes()).hexdigest()


def _run(root: Path, name: str) -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(f"name: {name}\nrecipe: mlm\n")
    write_status(run, state="done")
    shutil.copytree(BUNDLED_MODELS_DIR / DEFAULT_MODEL, run / "final")
    return run


@pytest.fixture(scope="module")
def lab_folders(tmp_path_factory) -> Path:
    """A lab with a pair of runs, a sweep with one run and a Hugging Face cache holding one encoder."""
    lab = tmp_path_factory.mktemp("lab")
    for role in ("detour", "mlm"):
        _run(lab / "runs", f"class-demo-{role}")
    _run(lab / "sweeps" / "lr-sweep" / "runs", "lr-a-s0")
    src = BUNDLED_MODELS_DIR / DEFAULT_MODEL
    put_in_hub_cache(lab / "hf-hub", CACHED, {p.name: p.read_bytes() for p in src.iterdir() if p.suffix in
                                               (".json", ".safetensors")})  # fmt: skip
    return lab


@pytest.fixture
def lab(lab_folders, monkeypatch) -> Path:
    monkeypatch.setenv("DETOUR_RUNS_DIR", str(lab_folders / "runs"))
    monkeypatch.setenv("DETOUR_SWEEPS_DIR", str(lab_folders / "sweeps"))
    monkeypatch.setenv("HF_HUB_CACHE", str(lab_folders / "hf-hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return lab_folders


def _label() -> str:
    from app import model_choices

    return next(c for c in model_choices() if c.startswith(f"{CACHED} ("))


# kind -> (what is typed, the name results carry); a callable: read when the lab is in place
NAMES = {
    "bundled": lambda lab: DEFAULT_MODEL,
    "run": lambda lab: "class-demo-detour",
    "sweep's run": lambda lab: "lr-sweep/lr-a-s0",
    "run path": lambda lab: str(lab / "runs" / "class-demo-detour"),
    "cached hub id": lambda lab: CACHED,
    "cached label": lambda lab: _label(),
}
RESULT_NAME = {"cached label": CACHED}


def _same_weights(ref: ModelRef) -> bool:
    return hashlib.sha256((Path(ref.folder) / "model.safetensors").read_bytes()).hexdigest() == WEIGHTS


@pytest.fixture(params=list(NAMES))
def name(request, lab) -> tuple[str, str]:
    typed = NAMES[request.param](lab)
    return typed, RESULT_NAME.get(request.param, typed)


@pytest.fixture(scope="module")
def bundled_answer() -> str:
    from backend.analysis.fill_mask import fill_mask

    return fill_mask([DEFAULT_MODEL], TEXT, top_k=3)[0]["predictions"][0]["token"]


def test_the_resolver_finds_the_model_and_names_it_without_a_label(name):
    typed, result_name = name
    ref = resolve_model(typed)
    assert _same_weights(ref) and ref.spec == result_name and "(cached" not in ref.spec


def test_every_app_field_resolves_it_the_same(name):
    from app import check_model_spec
    from app.launch_tab import values_to_config
    from app.suite_panel import suite_models
    from tests.ui.test_app_handlers import form

    typed, _ = name
    assert _same_weights(resolve_model(check_model_spec(typed, "model")))
    [passed] = suite_models(typed)  # the Task-suite panel: what `evaluate --models` is given
    assert _same_weights(resolve_model(passed)) and "(cached" not in passed
    cfg, _ = values_to_config(form(Path(typed)))  # the Launch form
    assert _same_weights(resolve_model(cfg["model"]["name"]))


def test_the_evaluation_names_it_as_typed_and_a_label_never(name):
    from backend.evaluation.runner import _check_inputs

    typed, result_name = name
    labels, _, _, _, sources = _check_inputs("ner", [typed], None, None, [0], {"epochs": 1})
    assert labels == [result_name] and _same_weights(sources[0])


def test_fill_mask_in_the_cli_and_the_app_gives_the_bundled_models_answer(name, bundled_answer, capsys):
    from app.fill_mask_tab import predict

    typed, result_name = name
    assert cli(["fill-mask", TEXT, "--model", typed, "--top-k", "3"]) == 0
    out = capsys.readouterr().out
    assert f"== {result_name} " in out and bundled_answer in out.splitlines()[1], out
    figs, msg = predict(TEXT, [typed], [False], 3)
    assert figs[0] is not None and f"**{result_name}**" in msg and "(cached" not in msg, msg


def test_weight_change_from_the_bundled_model_is_zero_in_the_cli_and_the_app(name, tmp_path, capsys):
    from app.analyze_tab import compute_weight_change

    typed, _ = name
    out = tmp_path / "w.json"
    assert cli(["cka", "--weights-only", "--a", DEFAULT_MODEL, "--b", typed, "--out", str(out)]) == 0
    assert json.loads(out.read_text())["total"] == 0.0
    _, msg = compute_weight_change(DEFAULT_MODEL, typed)
    assert msg.startswith("✓") and "0.0000" in msg, msg


# --- refused where it is typed, with the names it was close to ---------------------------------------------------

WRONG = {
    "a typo of a run": ("class-demo-detuor", "class-demo-detour"),
    "a pair's name": ("class-demo", "class-demo-detour or class-demo-mlm"),
    "a sweep's run mistyped": ("lr-sweep/lr-a-s1", "lr-sweep/lr-a-s0"),
    "a typo of a cached model": ("detour-lab/tiny-cahced", CACHED),
}


@pytest.fixture(params=list(WRONG))
def wrong(request, lab) -> tuple[str, str]:
    return WRONG[request.param]


def test_a_name_that_resolves_to_nothing_is_refused_everywhere_with_its_candidates(wrong, tmp_path, capsys):
    from app import PathNotAllowed, check_model_spec
    from app.analyze_tab import compute_weight_change
    from app.fill_mask_tab import predict
    from app.suite_panel import start_suite, suite_runs
    from backend.core.errors import ModelSpecError
    from backend.core.paths import REPO_ROOT

    typed, near = wrong
    with pytest.raises(ModelSpecError, match=near):
        resolve_model(typed)
    with pytest.raises(PathNotAllowed, match=f"model: .*{near}"):
        check_model_spec(typed, "model")
    with pytest.raises(PathNotAllowed, match=f"model 2: .*{near}"):
        start_suite(str(REPO_ROOT / "configs" / "suites" / "demo.yaml"), f"{DEFAULT_MODEL} {typed}", "", "x")
    assert suite_runs() == []  # nothing started
    assert near in predict(TEXT, [typed], [False], 3)[1]
    assert near in compute_weight_change(DEFAULT_MODEL, typed)[1]
    commands = [
        ["fill-mask", TEXT, "--model", typed],
        ["cka", "--weights-only", "--a", DEFAULT_MODEL, "--b", typed, "--out", str(tmp_path / "w.json")],
        ["evaluate", "--models", DEFAULT_MODEL, typed, "--task", "ner", "--out", str(tmp_path / "ev")],
    ]
    for argv in commands:
        assert cli(argv) == 2
        err = capsys.readouterr().err
        assert near in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "w.json").exists()


def test_a_mistyped_run_name_is_said_to_be_a_local_name_and_no_pair_name_is_offered(lab, capsys):
    """Offline, a mistyped run's name was taken for a hub id: its hint began "not in your Hugging Face cache ...
    (hf download class-demo-detuor)" and offered the pair's name, which is refused in turn. A bare word is never a
    hub id (the hub names its models org/name), and only names that resolve to one model are offered."""
    from app import PathNotAllowed, check_model_spec

    with pytest.raises(PathNotAllowed) as err:
        check_model_spec("class-demo-detuor", "model")
    msg = str(err.value)
    assert "hf download" not in msg and "Hugging Face cache" not in msg, msg
    near = msg.split("did you mean: ")[1].split("?")[0].split(", ")
    assert near[0] == "class-demo-detour" and "class-demo" not in near, msg
    assert cli(["fill-mask", TEXT, "--model", "detour"]) == 2
    err = capsys.readouterr().err
    assert "hf download" not in err and "did you mean: detour-tiny-en" in err, err

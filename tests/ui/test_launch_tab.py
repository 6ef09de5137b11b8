"""The Launch form as a new user met it: a taken run name is flagged while typing, an invalid field keeps the last
valid preview (marked stale), every way a value changes is validated, the help matches the offered choices, and
the experiment trackers are a field like the others."""

from __future__ import annotations

import importlib.util

import pytest

from app import launch_tab
from backend.engine.trackers import TRACKERS
from backend.runs import jobs
from tests.ui.test_app_handlers import form


@pytest.fixture(autouse=True)
def app_env(tmp_path, monkeypatch, tiny_modernbert_dir):
    monkeypatch.setenv("DETOUR_ALLOWED_ROOTS", str(tiny_modernbert_dir))
    monkeypatch.setenv("DETOUR_UPLOADS_DIR", str(tmp_path / "uploads"))
    monkeypatch.setattr(jobs, "ensure_worker", lambda *a, **k: None)  # nothing trains in these tests


def test_a_taken_run_name_is_flagged_while_typing_with_a_free_one(tiny_modernbert_dir, isolated_runs_dir):
    assert launch_tab.validate_form(form(tiny_modernbert_dir))["ok"]
    (isolated_runs_dir / "exp").mkdir(parents=True)
    res = launch_tab.validate_form(form(tiny_modernbert_dir))
    assert not res["ok"] and list(res["errors"]) == ["name"]
    assert "a run named 'exp' already exists; try 'exp-2'" in res["errors"]["name"]
    (isolated_runs_dir / "pp-mlm").mkdir()  # a pair makes two folders: either taken is refused
    res = launch_tab.validate_form(form(tiny_modernbert_dir, name="pp", recipe="pair"))
    assert list(res["errors"]) == ["name"] and "'pp-mlm' already exists" in res["errors"]["name"]
    (isolated_runs_dir / "sd-s1").mkdir()  # so does every seed variant
    res = launch_tab.validate_form(form(tiny_modernbert_dir, name="sd", seeds="0,1"))
    assert list(res["errors"]) == ["name"] and "'sd-s1' already exists" in res["errors"]["name"]
    assert launch_tab.validate_form(form(tiny_modernbert_dir, name="exp-2"))["ok"]


def test_an_invalid_field_keeps_the_last_valid_preview_marked_stale(tiny_modernbert_dir):
    good = launch_tab.validate_form(form(tiny_modernbert_dir))
    bad = launch_tab.validate_form(form(tiny_modernbert_dir, train__lr="fast"))
    assert not bad["ok"] and list(bad["errors"]) == ["train.lr"]
    shown = launch_tab.keep_last_preview(bad, {k: good[k] for k in launch_tab.PREVIEW})
    for k in launch_tab.PREVIEW:
        assert shown[k] == launch_tab.STALE + good[k]  # the last valid CLI, accelerate and YAML, said to be stale
    assert "recipe: clm_detour" in shown["yaml"] and shown["errors"] == bad["errors"]
    assert launch_tab.keep_last_preview(good, None) is good


def test_every_way_a_value_changes_is_validated():
    """Wired to .change (a paste, a loaded config, a script), not only .input (typing)."""
    from app import main

    deps = main.build_app().get_config_file()["dependencies"]
    validate = next(d for d in deps if d.get("api_name") == "validate")
    assert {event for _, event in validate["targets"]} == {"change"}
    assert len(validate["targets"]) == len(launch_tab.KEYS)


def test_the_help_of_a_choice_field_names_only_the_offered_choices():
    recipe = launch_tab.FIELD_BY_KEY["recipe"]
    assert "pretrain" not in recipe.info
    assert recipe.choices == ["pair", "clm_detour", "mlm", "hybrid", "mask_schedule", "alternate", "mixed", "custom"]
    for f in launch_tab.FIELDS:
        if f.kind == "radio" and " | " in (f.info or ""):
            named = [part.split(" ", 1)[0] for part in f.info.split(" | ")]
            assert named == f.choices, (f.key, f.info)


def test_report_to_is_a_multiselect_from_the_schema(tiny_modernbert_dir):
    f = launch_tab.FIELD_BY_KEY["logging.report_to"]
    assert f.kind == "multi" and f.choices == list(TRACKERS) and not f.advanced
    res = launch_tab.validate_form(form(tiny_modernbert_dir, logging__report_to=["tensorboard", "trackio"]))
    assert res["ok"] and res["cfg"]["logging"]["report_to"] == ["tensorboard", "trackio"]
    assert "--set 'logging.report_to=[tensorboard, trackio]'" in res["python"]
    assert launch_tab.config_to_values(res["cfg"])[launch_tab.KEYS.index("logging.report_to")] == [
        "tensorboard",
        "trackio",
    ]
    if importlib.util.find_spec("wandb") is None:
        res = launch_tab.validate_form(form(tiny_modernbert_dir, logging__report_to=["wandb"]))
        assert (
            list(res["errors"]) == ["logging.report_to"] and "pip install wandb" in res["errors"]["logging.report_to"]
        )


def test_sequence_length_beyond_the_positions_is_refused_or_warned_in_the_form(
    tiny_modernbert_dir, tiny_bert_dir, monkeypatch
):
    """Issue 18: absolute positions refuse a longer seq_len under the field, naming both numbers; a rotary model
    beyond its trained length gets a warning beside "config valid" (the run may still start)."""
    monkeypatch.setenv("DETOUR_ALLOWED_ROOTS", f"{tiny_modernbert_dir}:{tiny_bert_dir}")
    from transformers import AutoConfig

    bert_limit = AutoConfig.from_pretrained(tiny_bert_dir).max_position_embeddings
    res = launch_tab.validate_form(form(tiny_bert_dir, train__seq_len=2 * bert_limit))
    assert not res["ok"] and list(res["errors"]) == ["train.seq_len"]
    assert str(2 * bert_limit) in res["errors"]["train.seq_len"] and str(bert_limit) in res["errors"]["train.seq_len"]
    limit = AutoConfig.from_pretrained(tiny_modernbert_dir).max_position_embeddings
    res = launch_tab.validate_form(form(tiny_modernbert_dir, train__seq_len=2 * limit, phases__main__tokens=40_960))
    assert res["ok"] and "warning" in res["message"] and str(limit) in res["message"]
    assert "warning" not in launch_tab.validate_form(form(tiny_modernbert_dir))["message"]


def test_launch_with_an_invalid_field_keeps_the_last_valid_preview(tiny_modernbert_dir, isolated_runs_dir):
    """Issue 24 #3: Launch with an invalid field emptied the CLI, accelerate and YAML boxes."""
    good = launch_tab.validate_form(form(tiny_modernbert_dir))
    last = {k: good[k] for k in launch_tab.PREVIEW}
    out = launch_tab.launch(form(tiny_modernbert_dir, train__lr="fast"), last=last)
    assert not out["ok"] and out["runs"] == [] and list(out["errors"]) == ["train.lr"]
    for k in launch_tab.PREVIEW:
        assert out[k] == launch_tab.STALE + good[k]
    assert not isolated_runs_dir.exists() or not any(isolated_runs_dir.iterdir())  # nothing queued


def test_the_form_has_the_checkpoint_fields_the_scrub_advises(tiny_modernbert_dir):
    """Issue 24 #10: the Detour scrub's advice (checkpoint_every, keep_checkpoints) can be followed from the form."""
    for key in ("logging.checkpoint_every", "logging.keep_checkpoints"):
        assert key in launch_tab.KEYS
    res = launch_tab.validate_form(form(tiny_modernbert_dir, logging__checkpoint_every=2, logging__keep_checkpoints=20))
    assert (
        res["ok"] and res["cfg"]["logging"]["keep_checkpoints"] == 20 and res["cfg"]["logging"]["checkpoint_every"] == 2
    )
    assert "logging.keep_checkpoints=20" in res["python"]
    assert launch_tab.FIELD_BY_KEY["logging.keep_checkpoints"].label == "Keep checkpoints"


def test_saved_configs_are_listed_by_name_fresh_and_never_silently_overwritten(tiny_modernbert_dir, tmp_path):
    """Issue 24 #6: the list was built at app start, showed absolute paths, and a save replaced a same-named config."""
    from app import main

    demo = main.build_app(main.AppContext())
    saved = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "saved-configs")
    refresh = [f for f in demo.fns.values() if saved in f.outputs and {ev for _, ev in f.targets} >= {"load"}]
    assert len(refresh) == 1  # read again on page load (a reload), not only at build

    path, msg = launch_tab.save_config(form(tiny_modernbert_dir, name="cfg-a", train__lr="1e-4"))
    assert path is not None, msg
    assert refresh[0].fn()["choices"] == [("cfg-a", str(path))]  # the name shown, the path loaded
    assert launch_tab.saved_configs() == [("cfg-a", str(path))]

    again, msg = launch_tab.save_config(form(tiny_modernbert_dir, name="cfg-a", train__lr="3e-4"))
    assert again is None and "already exists" in msg and "cfg-a-2" in msg
    assert "lr: 0.0001" in path.read_text()  # untouched
    again, msg = launch_tab.save_config(form(tiny_modernbert_dir, name="cfg-a", train__lr="3e-4"), overwrite=True)
    assert again == path and "replaced" in msg and "lr: 0.0003" in path.read_text()


@pytest.mark.parametrize("problem", ["two lines", "binary", "empty folder"])
def test_a_corpus_problem_shows_under_the_corpus_field_when_chosen(problem, tiny_modernbert_dir, tmp_path):
    """Issue 24 #2: a 2-line .txt, a binary file or an empty folder showed "config valid" and failed only after
    Launch. Chosen, the corpus is read in the background ("checking corpus…"), then its problem is shown under
    the Corpus field; Launch reads it at once."""
    corpora = tmp_path / "uploads" / "corpora"  # inside an allowed root
    corpora.mkdir(parents=True)
    path = {"two lines": corpora / "two.txt", "binary": corpora / "blob.txt", "empty folder": corpora / "empty"}[
        problem
    ]
    if problem == "two lines":
        path.write_text("One line.\nTwo lines.\n")
    elif problem == "binary":
        path.write_bytes(bytes(range(256)) * 20)
    else:
        path.mkdir()
    values = form(tiny_modernbert_dir, data__corpus=str(path))
    first = launch_tab.validate_form(values)
    assert first["ok"] and first["corpus_pending"] and launch_tab.CHECKING_CORPUS in first["message"]
    assert launch_tab.check_corpus(first["cfg"])  # the background read finds the problem
    res = launch_tab.validate_form(values)
    assert not res["ok"] and list(res["errors"]) == ["data.corpus"] and "config valid" not in res["message"]
    assert {"two lines": "fewer than one batch", "binary": "binary", "empty folder": "has no"}[problem] in (
        res["errors"]["data.corpus"]
    )
    out = launch_tab.launch(values)
    assert not out["ok"] and list(out["errors"]) == ["data.corpus"] and out["runs"] == []


def test_a_good_corpus_is_checked_once_and_demo_is_not_pending(tiny_modernbert_dir, tmp_path):
    corpus = tmp_path / "uploads" / "good.txt"
    corpus.parent.mkdir(parents=True)
    corpus.write_text(("A sentence about cells and proteins that goes on for a while. " * 20 + "\n\n") * 40)
    values = form(tiny_modernbert_dir, data__corpus=str(corpus))
    assert launch_tab.validate_form(values)["corpus_pending"]
    assert launch_tab.check_corpus(launch_tab.validate_form(values)["cfg"]) is None
    res = launch_tab.validate_form(values)
    assert res["ok"] and not res["corpus_pending"] and launch_tab.CHECKING_CORPUS not in res["message"]
    assert not launch_tab.validate_form(form(tiny_modernbert_dir))["corpus_pending"]  # demo: bundled, fine


def test_a_page_opened_later_proposes_a_free_name_and_replace_is_asked_once(tiny_modernbert_dir, isolated_runs_dir):
    """The app is built before the runs exist (it stays up for days); each page load proposes a name still free,
    and 'Replace a saved config' unticks after it replaced one."""
    from app import main

    demo = main.build_app()
    fns = {f.api_name: f for f in demo.fns.values() if getattr(f, "api_name", None)}
    taken = launch_tab.default_config()["name"]
    (isolated_runs_dir / taken).mkdir(parents=True)
    (isolated_runs_dir / f"{taken}-detour").mkdir()
    load = fns["proposed_name"]
    assert load.fn(taken) == f"{taken}-2" and "load" in {t[1] for t in load.targets}
    assert load.fn("mine") == "mine"  # a free name typed or loaded is kept
    save = fns["save_config"]
    values = form(tiny_modernbert_dir)
    *_, msg, _, replace_after = save.fn(*values, None, False)
    assert msg.startswith("saved") and replace_after is False
    *_, msg, _, replace_after = save.fn(*values, None, False)
    assert "already exists" in msg and replace_after is not False  # refused: the box is left for the user to tick
    *_, msg, _, replace_after = save.fn(*values, None, True)
    assert "replaced" in msg and replace_after is False


def test_a_loaded_timeline_reads_as_a_timeline_not_a_python_dict(tiny_modernbert_dir, tmp_path):
    import yaml

    cfg = launch_tab.default_config()
    cfg.update(name="tl", recipe="custom")
    cfg["model"]["name"] = str(tiny_modernbert_dir)
    cfg["phases"] = [{"name": "warm", "objective": "mlm", "tokens": 4096, "mlm_probability": 0.3},
                     {"name": "detour", "objective": "clm", "tokens": 8192}]  # fmt: skip
    path = tmp_path / "uploads" / "configs" / "tl.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(cfg))
    values, msg, base = launch_tab.load_config_file(str(path))
    assert values is not None, msg
    assert "a timeline of 2 phases (warm → detour" in msg and "{" not in msg and "'objective'" not in msg


def test_a_blank_optional_field_is_null_so_the_untouched_form_is_the_bare_command(isolated_runs_dir):
    """The form shows null as an empty box; read back, an empty box was '' (a second way of typing "unset"): the
    untouched form's CLI command then carried three `--set 'slurm.partition='''` a user had never asked for, and
    config.yaml a partition '' that sbatch would have been given."""
    from backend.engine.config import default_config

    values = launch_tab.config_to_values(default_config())
    cfg, _ = launch_tab.values_to_config(values)
    assert cfg["slurm"]["partition"] is None and cfg["slurm"]["account"] is None and cfg["model"]["tokenizer"] is None
    res = launch_tab.validate_form(values)
    assert res["ok"] and res["python"] == f"python -m backend train --name {cfg['name']}", res["python"]
    values[launch_tab.KEYS.index("slurm.partition")] = "  gpu "
    assert "--set slurm.partition=gpu " in launch_tab.validate_form(values)["python"]


def test_a_corpus_typo_is_caught_by_the_forms_live_check(tiny_modernbert_dir, tmp_path, monkeypatch):
    """'demp' (or a corpus folder's name without its path) passed the form's live check as a hub dataset id and
    failed only at launch. A bare word close to a local corpus is refused under the field, naming it."""
    shared = tmp_path / "shared-data"
    (shared / "craft_pmc_oa_text").mkdir(parents=True)
    monkeypatch.setenv("DETOUR_ALLOWED_ROOTS", f"{tiny_modernbert_dir}:{shared}")
    for typed, meant in (("demp", "'demo'"), ("craft_pmc_oa_txt", f"'{shared / 'craft_pmc_oa_text'}'")):
        res = launch_tab.validate_form(form(tiny_modernbert_dir, data__corpus=typed), deep=False)
        assert not res["ok"] and list(res["errors"]) == ["data.corpus"], res["message"]
        assert f"did you mean {meant}?" in res["errors"]["data.corpus"]
    assert launch_tab.validate_form(form(tiny_modernbert_dir, data__corpus="org/some-dataset"), deep=False)["ok"]


def test_changing_the_recipe_shows_its_fields_without_an_error():
    """Loading a config or picking a recipe raised KeyError 'name' in the page (an Error toast): the fields that follow
    the recipe held every cell of the form, the name's too."""
    from app import main
    from app.launch_form import recipe_fields

    demo = main.build_app(main.AppContext())
    fn = next(f for f in demo.fns.values() if f.name == "show_recipe")  # on the recipe and on a loaded config
    for recipe in ("pair", "mlm", "hybrid", "alternate"):
        head, *cells = fn.fn(recipe, None)
        assert f"Recipe `{recipe}`" in head and len(cells) == len(recipe_fields(recipe, None))
        assert sum(c["visible"] for c in cells) == sum(recipe_fields(recipe, None).values()), recipe

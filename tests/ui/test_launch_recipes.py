"""The Launch form shows a recipe's own budget and settings and no other recipe's (each preset declares them in
``backend/presets/*.yaml``), and the timeline editor follows the form's state (issue 38, "Forms").

Before: with recipe ``alternate`` or ``mixed`` the form offered "Main-phase tokens" and "Total tokens", put them in
the CLI preview, and the run trained its ``<recipe>.tokens`` (200,000) that the form had no field for; the timeline
table kept its old rows after "Back to the form's phase fields" and after a preset config was loaded, and its
message still said the list was the recipe."""

from __future__ import annotations

import pytest
from test_app_handlers import app_env, form  # noqa: F401  (app_env: the fixture that allows the tiny models)

from app import launch_form, launch_tab, timeline_editor
from backend.core import atomic
from backend.detour.recipe import expand_phases


def _trained_tokens(cfg: dict) -> int:
    return expand_phases(cfg)[-1]["end_tokens"]


@pytest.mark.parametrize("recipe", ["alternate", "mixed"])
def test_a_recipe_has_a_field_for_its_budget_and_none_for_another_recipes(recipe, tiny_modernbert_dir):
    shown = {k for k, v in launch_form.recipe_fields(recipe, None).items() if v}
    assert f"{recipe}.tokens" in shown
    assert not shown & {"phases.main.tokens", "train.total_tokens", "phases.decay.fraction"}
    values = form(tiny_modernbert_dir, recipe=recipe, **{f"{recipe}__tokens": 51_200})
    res = launch_tab.validate_form(values, deep=False)
    assert res["ok"], res["message"]
    assert _trained_tokens(res["cfg"]) == 51_200  # what the field says is what trains
    assert f"{recipe}.tokens=51200" in res["python"]  # and what the preview shows
    # a field the recipe does not read is hidden, and a value left in it is never applied nor previewed
    hidden = form(tiny_modernbert_dir, recipe=recipe, phases__main__tokens=999_936, train__total_tokens=999_936)
    res = launch_tab.validate_form(hidden, deep=False)
    plain = launch_tab.validate_form(form(tiny_modernbert_dir, recipe=recipe), deep=False)
    assert res["ok"] and expand_phases(res["cfg"]) == expand_phases(plain["cfg"])
    assert res["python"] == plain["python"] and "999936" not in res["python"] and "999936" not in res["yaml"]


def test_the_detour_recipes_show_the_phase_fields_and_a_list_shows_its_total(tiny_modernbert_dir):
    shown = {k for k, v in launch_form.recipe_fields("clm_detour", None).items() if v}
    assert {"phases.main.tokens", "phases.decay.fraction", "phases.main.freeze.layers"} <= shown
    assert "train.total_tokens" not in shown and "mixed.tokens" not in shown
    state = {"recipe": "pair", "phases": [{"objective": "clm", "tokens": 4096, "shape": "constant"}]}
    shown = {k for k, v in launch_form.recipe_fields("pair", state).items() if v}
    assert shown == {"train.total_tokens", "pair.mlm_probability"}  # the phase fields are the list's


def test_the_timeline_table_and_message_follow_the_forms_state(tiny_modernbert_dir, tmp_path):
    values = form(tiny_modernbert_dir)
    recipe = values[launch_tab.KEYS.index("recipe")]
    rows, _ = timeline_editor.preset_rows(values, None, launch_tab.values_to_config)
    base, msg, recipe = timeline_editor.apply_rows(rows, recipe, None)
    assert msg.startswith("✓") and timeline_editor.editor_view(base)[0] == rows
    # Back to the form's phase fields: the table empties and the message says the fields are the recipe
    back, msg, recipe, table = timeline_editor.clear_list(base, recipe)
    assert table == [] and "the form's fields are the recipe" in msg
    assert timeline_editor.editor_view(back) == ([], timeline_editor.FIELDS_ARE_THE_RECIPE)
    # rows started but never used, then Back: emptied too
    assert timeline_editor.clear_list(None, recipe)[3] == []
    # a preset config loaded over a used list: the state the table and the message follow has no list
    cfg = launch_tab.validate_form(form(tiny_modernbert_dir, recipe="mixed"), deep=False)["cfg"]
    atomic.write_yaml(tmp_path / "mixed.yaml", cfg)
    loaded_values, _, loaded = launch_tab.load_config_file(str(tmp_path / "mixed.yaml"))
    table, msg = timeline_editor.editor_view(loaded)
    assert table == [] and "is the recipe (" not in msg
    assert launch_form.recipe_fields("mixed", loaded)["mixed.tokens"]
    # and a config with a list fills the table, saying the list is the recipe
    table, msg = timeline_editor.editor_view(base)
    assert len(table) == len(rows) and "the timeline is the recipe" in msg

"""The timeline in the app (issue 26): the Launch form's phase-list editor and the drawing (Launch and Runs)."""

from __future__ import annotations

from test_app_handlers import app_env, form  # noqa: F401  (app_env: the fixture that allows the tiny models)

from app import launch_tab, timeline_editor
from backend.core import atomic
from backend.engine.config import load_config
from backend.explain.timeline_figure import config_timelines, run_timeline, timeline_figure


def test_start_from_the_preset_edit_reorder_and_use_the_list(tiny_modernbert_dir):
    values = form(tiny_modernbert_dir, phases__main__freeze__layers="0-1")
    rows, _ = timeline_editor.preset_rows(values, None, launch_tab.values_to_config)
    assert [r[:2] for r in rows] == [["main", "clm"], ["decay", "mlm"]]
    rows = timeline_editor.add_row(rows)  # an MLM phase at the end
    rows, at = timeline_editor.move_row(rows, 3, -1)  # ... moved before the decay
    assert at == 2 and [r[0] for r in rows] == ["main", "", "decay"]
    base, msg, recipe = timeline_editor.apply_rows(rows, values[launch_tab.KEYS.index("recipe")], None)
    assert msg.startswith("✓") and base["recipe"] == recipe == "custom"
    values[launch_tab.KEYS.index("recipe")] = recipe  # the form's recipe field follows
    phases = base["phases"]
    assert [p["objective"] for p in phases] == ["clm", "mlm", "mlm"] and phases[0]["freeze"]["layers"] == "0,1"
    res = launch_tab.validate_form(values, deep=False, base=base)  # the form trains the list, not its phase fields
    assert res["ok"] and [p.get("name") for p in res["cfg"]["phases"]] == ["main", None, "decay"]
    assert launch_tab.config_to_values(res["cfg"])  # a list config still fills the form
    removed = timeline_editor.remove_row(rows, 2)
    assert [r[0] for r in removed] == ["main", "decay"]
    back, _, recipe, table = timeline_editor.clear_list(base, recipe)
    assert table == []  # the table follows: no old rows
    values[launch_tab.KEYS.index("recipe")] = recipe
    assert isinstance(back["phases"], dict) and launch_tab.validate_form(values, deep=False, base=back)["ok"]


def test_a_bad_list_is_refused_with_its_key_and_the_state_kept(tiny_modernbert_dir):
    values = form(tiny_modernbert_dir)
    rows = timeline_editor.phases_to_rows([{"objective": "mlm", "tokens": 512}])  # no mask rate
    base, msg, _ = timeline_editor.apply_rows(rows, values[launch_tab.KEYS.index("recipe")], None)
    assert base is None and "phases[0].mlm_probability" in msg


def test_the_drawing_has_a_band_per_phase_lr_and_frozen_blocks(tiny_modernbert_dir):
    values = form(tiny_modernbert_dir, recipe="pair", phases__main__freeze__layers="0-1")
    fig = timeline_editor.form_figure(values, None, launch_tab.values_to_config)
    bands = [t for t in fig.data if t.type == "bar" and t.yaxis == "y"]
    assert [(t.y[0], t.text[0]) for t in bands] == [
        ("exp-detour", "main: CLM, causal"),
        ("exp-detour", "decay: MLM 15%, bidirectional"),
        ("exp-mlm", "main: MLM 30%, bidirectional"),
        ("exp-mlm", "decay: MLM 15%, bidirectional"),
    ]
    assert bands[1].base[0] == bands[0].x[0] == 4096  # tokens on the x axis: the switch where main ends
    frozen = {t.y[0] for t in fig.data if t.type == "bar" and t.yaxis == "y3"}
    assert frozen == {"layer 0", "layer 1"}
    lr = [t for t in fig.data if t.type == "scatter"]
    assert len(lr) == 2 and max(lr[0].y) == 1.0 and lr[0].y[-1] == 0.1
    assert lr[0].line.color and lr[1].line.color and lr[0].line.color != lr[1].line.color  # a colour per run
    bad = timeline_editor.form_figure(form(tiny_modernbert_dir, train__lr="x"), None, launch_tab.values_to_config)
    assert "no timeline" in bad.layout.annotations[0].text


def test_a_run_draws_its_saved_timeline_at_its_tokens_per_step(isolated_runs_dir):
    cfg = load_config(None, ["name=r", "recipe=hybrid", "hybrid.tokens=25600", "train.seq_len=64",
                             "train.batch_size=4"])  # fmt: skip
    run = isolated_runs_dir / "r"
    atomic.write_yaml(run / "config.yaml", cfg)
    atomic.write_json(run / "status.json", {"state": "running", "total_steps": 50, "total_tokens": 25600})  # 2 GPUs
    tl = run_timeline(run)
    assert [d["end_tokens"] for d in tl] == [12800, 25600] and [d["end_step"] for d in tl] == [25, 50]
    fig = timeline_editor.runs_figure(["r"], "step")
    assert [t.x[0] for t in fig.data if t.type == "bar"] == [25, 25]  # 512 tokens per step, not 256
    assert timeline_figure(config_timelines(cfg)).data[0].text[0] == "clm: CLM, causal"


def test_a_fraction_takes_its_share_of_the_forms_total_tokens(tiny_modernbert_dir):
    values = form(tiny_modernbert_dir)
    rows = timeline_editor.phases_to_rows(
        [{"objective": "clm", "fraction": 0.75}, {"objective": "mlm", "fraction": 0.25, "mlm_probability": 0.15}]
    )
    recipe = values[launch_tab.KEYS.index("recipe")]
    base, msg, _ = timeline_editor.apply_rows(rows, recipe, None)  # no total: the message says where to set it
    assert base is None and "train.total_tokens" in msg
    assert "train.total_tokens" in launch_tab.KEYS  # ... and the form has the field
    values[launch_tab.KEYS.index("train.total_tokens")] = "8192"
    base, msg, recipe = timeline_editor.apply_rows(rows, recipe, None, "8192")
    assert msg.startswith("✓"), msg
    values[launch_tab.KEYS.index("recipe")] = recipe
    res = launch_tab.validate_form(values, deep=False, base=base)
    assert res["ok"], res["message"]
    assert res["cfg"]["train"]["total_tokens"] == 8192 and "total_tokens: 8192" in res["yaml"]


def test_every_objectives_settings_have_columns_and_reach_the_list(tiny_modernbert_dir):
    """The editor's setting columns come from what each objective declares (issue 29): a prefix share and a causal
    share typed in the table reach the phase list (they had no column: the prefix phase trained at its default)."""
    from backend import objectives

    assert {timeline_editor.KEY_OF[c] for c in timeline_editor.COLUMNS} >= set(objectives.setting_names())
    assert {"prefix share", "causal share", "mask rate"} <= set(timeline_editor.COLUMNS)  # headings from the modules
    phases = [{"objective": "prefix", "tokens": 1024, "prefix_share": 0.25},
              {"objective": "mixed", "tokens": 1024, "causal_share": 0.5, "mlm_probability": 0.2}]  # fmt: skip
    rows = timeline_editor.phases_to_rows(phases)
    assert timeline_editor.rows_to_phases(rows) == phases
    values = form(tiny_modernbert_dir)
    base, msg, _ = timeline_editor.apply_rows(rows, values[launch_tab.KEYS.index("recipe")], None)
    assert msg.startswith("✓"), msg
    assert [(p.get("prefix_share"), p.get("causal_share")) for p in base["phases"]] == [(0.25, None), (None, 0.5)]
    bad = timeline_editor.phases_to_rows([{"objective": "mlm", "tokens": 1024, "mlm_probability": 0.2,
                                           "prefix_share": 0.3}])  # fmt: skip
    base, msg, _ = timeline_editor.apply_rows(bad, "custom", None)
    assert base is None and "phases[0].prefix_share" in msg  # another objective's setting: refused, named

"""The Runs tab's Export button: the picked finished run into a new folder (default exports/<run>) by the backend
function ``python -m backend export`` runs, its card shown; anything else one line, nothing written."""

from __future__ import annotations

import shutil

from huggingface_hub import ModelCard

from app import export_panel, main
from backend.core.paths import exports_dir
from backend.engine.rundir import write_status


def test_a_finished_run_exports_from_the_runs_tab(detour_run_dir, isolated_runs_dir, tmp_path):
    run = isolated_runs_dir / detour_run_dir.name
    shutil.copytree(detour_run_dir, run)
    message, card = export_panel.export_run(run.name, "")
    out = exports_dir() / run.name
    assert f"to `{out}`" in message and "AutoModelForMaskedLM" in message and "--push-to-hub" in message
    assert ModelCard.load(out / "README.md").data.pipeline_tag == "fill-mask"
    assert card.startswith("```yaml\n") and "base_model:" in card and "## Recipe timeline" in card
    again, _ = export_panel.export_run(run.name, "")  # taken: the next free name, never over the first
    assert f"`{exports_dir() / (run.name + '-2')}`" in again
    typed, _ = export_panel.export_run(run.name, str(exports_dir() / "typed"))
    assert (exports_dir() / "typed" / "model.safetensors").is_file() and "typed" in typed


def test_what_cannot_be_exported_is_one_line_and_nothing_written(detour_run_dir, isolated_runs_dir, tmp_path):
    run = isolated_runs_dir / detour_run_dir.name
    shutil.copytree(detour_run_dir, run)
    assert export_panel.export_run(None, "") == ("choose a run first", "")
    outside, _ = export_panel.export_run(run.name, "/etc/detour-export")
    assert outside.startswith("⚠ export folder: '/etc/detour-export' is outside the folders this app may read")
    shutil.rmtree(run / "final")
    write_status(run, state="running", pid=None)
    unfinished, card = export_panel.export_run(run.name, "")
    assert unfinished.startswith("⚠ export") and "has no final model yet" in unfinished and card == ""
    assert not exports_dir().exists() or not any(exports_dir().iterdir())


def test_the_export_button_is_on_the_runs_tab_and_calls_that_function():
    demo = main.build_app(main.AppContext())
    button = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "export-run")
    [fn] = [f for f in demo.fns.values() if any(t[0] == button._id for t in f.targets)]
    assert fn.fn is export_panel.export_run and fn.api_name == "export"

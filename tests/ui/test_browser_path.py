"""The researcher's path through the page, in a real browser (Playwright driving /usr/bin/chromium, headless): the
traps a walk in Chromium met where the page itself was at fault. One app start serves every check.

- Enter in a model picker with a partial name ("detour") or an emptied slot chose the first model of the list;
- the Detour scrub's arrow keys moved one slider step (the saved models' greatest common gap), not to the next
  saved model, and left the slider between two of them;
- the Runs table broke numbers across lines at 1000 and 800 px wide ("10." / "076"); two of its curves' titles and
  Analyze's heatmap and divergence titles (which name both models) ran past their charts' edge;
- at 1000 px the Sweeps form squeezed a check box's label to a letter a line and the sweep picker under its arrow;
- Cancel on a pair's running run: within one poll the Run picker jumped to the pair's other run (which then
  started), so Resume and a second Cancel went to it."""

from __future__ import annotations

import shutil
import time

import pytest
import yaml

from backend.engine import rundir
from backend.engine.config import default_config
from tests.ui.test_app_client import start_app, wait_for
from tests.ui.test_browser import _playwright, open_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Each number cell of the Runs table -> (its text, how many lines it takes): a Range over the cell's text has one
# client rectangle per line it is laid out on.
CELL_LINES = """() => [...document.querySelectorAll('#runs-table .virtual-body .virtual-row')].map(row =>
    [...row.querySelectorAll('.body-cell')].map(cell => {
        const r = document.createRange();
        r.selectNodeContents(cell.querySelector('span.text') || cell);
        return [cell.textContent.trim(), new Set([...r.getClientRects()].map(x => Math.round(x.top))).size];
    }))"""


# Each Runs-tab figure -> how far its title runs past the figure's right edge (px; <= 0: it fits)
TITLE_OVERRUN = """(ids) => [...document.querySelectorAll('.js-plotly-plot')].map(p => {
    const right = (sel) => p.querySelector(sel).getBoundingClientRect().right;
    return [(p.closest('[id]') || {}).id, right('.gtitle') - right('.main-svg')];
}).filter(([id]) => ids.includes(id))"""
# the Sweeps form's check box: how many lines its label takes; and how wide the sweep picker is (px)
LABEL_LINES_AND_PICK = """() => {
    const r = document.createRange();
    r.selectNodeContents([...document.querySelectorAll('#sw-unmatched span')].find(s => s.textContent.trim()));
    return [new Set([...r.getClientRects()].map(x => Math.round(x.top))).size,
            document.querySelector('#sw-pick').getBoundingClientRect().width];
}"""
CURVES = ["plot-train", "plot-eval", "plot-eval-clm", "plot-lr", "plot-grad-norm", "plot-tokens-per-s"]


def _value(page, selector: str) -> str:
    return page.locator(selector).input_value()


def _pair_config(path, model_dir) -> None:
    """A tiny pair that trains long enough to be cancelled while it runs (seconds per run here)."""
    cfg = default_config()
    cfg.update(name="bp", recipe="pair")
    cfg["model"]["name"] = str(model_dir)
    cfg["train"].update(seq_len=64, batch_size=4)
    cfg["phases"]["main"]["tokens"] = 1_024_000
    cfg["logging"].update(log_every=10, eval_every=100_000, eval_batches=1, checkpoint_every=100_000)
    path.write_text(yaml.safe_dump(cfg))


def test_the_researchers_path(tmp_path, isolated_runs_dir, detour_run_dir, tiny_modernbert_dir, monkeypatch):
    sync_playwright = _playwright()
    monkeypatch.setenv("DETOUR_ALLOWED_ROOTS", str(tiny_modernbert_dir))
    monkeypatch.setenv("DETOUR_UPLOADS_DIR", str(tmp_path / "uploads"))
    # the session's trained run, with its first saved model gone: saved models at 0, 1,024, 1,536 and 2,048 tokens,
    # one slider step (their greatest common gap) 512 tokens
    run = shutil.copytree(detour_run_dir, isolated_runs_dir / "scrub")
    shutil.rmtree(run / "checkpoints" / "step-00000002")
    cfg_file = tmp_path / "bp.yaml"
    _pair_config(cfg_file, tiny_modernbert_dir)
    detour, mlm = isolated_runs_dir / "bp-detour", isolated_runs_dir / "bp-mlm"
    proc, url = start_app(isolated_runs_dir, tmp_path)
    try:
        with sync_playwright() as p:
            browser, page = open_page(p, url)
            page.wait_for_selector("#launch-btn", timeout=60_000)

            # Fill-mask: Enter keeps what was typed; an option is picked with the arrow keys or the mouse
            page.get_by_role("tab", name="Fill-mask").click()
            # the tab reads its lists when first shown; what is typed before they arrive is set to the defaults
            page.wait_for_timeout(3000)
            for slot, typed in ((1, "detour"), (2, "")):
                box = page.locator(f"#fm-model-{slot} input")
                box.click()
                box.fill(typed)
                box.press("Enter")
            page.wait_for_timeout(1000)
            assert _value(page, "#fm-model-1 input") == "detour"  # was: detour-tiny-en, the first option shown
            assert _value(page, "#fm-model-2 input") == ""  # was: the first model of the list
            page.click("#fm-btn")
            page.wait_for_selector("#fm-msg :text('did you mean')", timeout=60_000)
            assert "slot 2: model 'detour'" in page.inner_text("#fm-msg")

            # Detour: the arrow keys go from one saved model to the next, and the slider sits on it
            page.get_by_role("tab", name="Detour").click()
            page.locator("#dt-run input").fill("scrub")
            page.locator("#dt-run input").press("Enter")
            page.click("#dt-run-btn")
            page.wait_for_selector("#dt-scrub-msg :text('1 of 4')", timeout=60_000)
            page.locator("#dt-scrub input[type=range]").focus()
            page.keyboard.press("ArrowRight")
            page.wait_for_selector("#dt-scrub-msg :text('2 of 4')", timeout=30_000)  # was: 1 of 4 again, at 512
            assert _value(page, "#dt-scrub input[type=number]") == "1024"
            assert "1,024 tokens seen" in page.inner_text("#dt-scrub-msg")
            page.keyboard.press("ArrowRight")
            page.wait_for_selector("#dt-scrub-msg :text('3 of 4')", timeout=30_000)
            page.keyboard.press("ArrowLeft")
            page.wait_for_selector("#dt-scrub-msg :text('2 of 4')", timeout=30_000)
            assert _value(page, "#dt-scrub input[type=number]") == "1024"

            # Sweeps at 1000 px: the form's check box keeps its label readable, the sweep picker its name
            page.set_viewport_size({"width": 1000, "height": 1000})
            page.get_by_role("tab", name="Sweeps").click()
            page.wait_for_selector("#sw-unmatched", timeout=30_000)
            lines, pick = page.evaluate(LABEL_LINES_AND_PICK)
            assert lines <= 2 and pick >= 300, (lines, pick)  # was: a letter a line, and a 150-px picker

            # Analyze at 1000 px: the heatmap's and the divergence's titles (they name both models) fit their charts
            page.get_by_role("tab", name="Analyze").click()
            page.click("#an-cka-btn")
            page.wait_for_selector("#an-msg :text('✓')", timeout=120_000)
            overrun = page.evaluate(TITLE_OVERRUN, ["an-heat", "an-div"])
            assert len(overrun) == 2 and all(px <= 1 for _, px in overrun), overrun
            page.set_viewport_size({"width": 1400, "height": 1000})

            # a pair launched from the form
            page.get_by_role("tab", name="Launch").click()
            page.get_by_text("Load a config").click()
            page.set_input_files("#config-upload input[type=file]", str(cfg_file))
            page.wait_for_function(
                "() => [...document.querySelectorAll('input, textarea')].some(e => e.value === 'bp')", timeout=30_000
            )
            page.click("#launch-btn", timeout=90_000)  # a busy machine renders the loaded form slowly
            page.wait_for_selector("#launch-result :text('queued bp')", timeout=60_000)
            page.get_by_role("tab", name="Runs").click()
            wait_for(lambda: rundir.read_status(detour).get("state") == "running", 120, "the detour run to train")
            page.wait_for_function(  # the picker follows the running run until one is acted on
                "() => document.querySelector('#runs-selected input').value === 'bp-detour'", timeout=30_000
            )

            # Runs: at 1000 and 800 px no number breaks across lines (the table scrolls sideways instead)
            page.wait_for_selector("#runs-table .virtual-body .body-cell :text('scrub')", timeout=30_000)
            for width in (1000, 800):
                page.set_viewport_size({"width": width, "height": 1000})
                page.wait_for_timeout(1000)
                for row in page.evaluate(CELL_LINES):
                    numbers = row[1:-1]  # between the run's name and its error (those two wrap)
                    assert all(n <= 1 for t, n in numbers if t), (width, row)
                overrun = page.evaluate(TITLE_OVERRUN, CURVES)  # the curves' titles fit their figures
                assert len(overrun) == 6 and all(px <= 1 for _, px in overrun), (width, overrun)
            page.set_viewport_size({"width": 1400, "height": 1000})

            # Cancel on the pair's running run: the picker stays on it while its sibling starts, Resume answers for it
            page.click("#runs-cancel")
            page.wait_for_selector("#runs-action :text('bp-detour')", timeout=30_000)  # SIGTERM sent, or cancelled now
            wait_for(lambda: rundir.read_status(mlm).get("state") == "running", 120, "the pair's MLM run to start")
            time.sleep(5)  # two polls of the Runs tab
            assert _value(page, "#runs-selected input") == "bp-detour"  # was: bp-mlm, the run now training
            wait_for(lambda: rundir.read_status(detour).get("state") == "cancelled", 60, "the cancel")
            page.click("#runs-resume")
            page.wait_for_selector("#runs-action :text('bp-detour')", timeout=30_000)
            assert "bp-mlm" not in page.inner_text("#runs-action")
            assert rundir.read_status(detour).get("state") == "queued"  # the run acted on, not its sibling
            assert rundir.read_status(mlm).get("state") == "running"
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        from backend.runs import jobs

        for r in (detour, mlm):
            if rundir.read_status(r).get("state") in ("running", "queued"):
                jobs.cancel(r)
        wait_for(lambda: all(rundir.read_status(r).get("state") != "running" for r in (detour, mlm)), 60,
                 "the runs to stop")  # fmt: skip

"""The Sweeps tab in a real browser (Playwright + /usr/bin/chromium, headless): launch a 2x1 grid (both axes filled
in) x 2 seeds of tiny runs from the form, see its cells, and see the report's figure drawn once every cell has
finished."""

from __future__ import annotations

from conftest import tiny_config_file
from tests.ui.test_app_client import start_app
from tests.ui.test_browser import _playwright, open_page, pytestmark  # noqa: F401  (browser + slow marks)


def test_sweep_from_the_browser(tmp_path, isolated_runs_dir, tiny_modernbert_dir, monkeypatch):
    sync_playwright = _playwright()
    monkeypatch.setenv("DETOUR_UPLOADS_DIR", str(tmp_path / "uploads"))
    monkeypatch.setenv("DETOUR_SWEEPS_DIR", str(tmp_path / "sweeps"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    (tmp_path / "uploads").mkdir()
    isolated_runs_dir.mkdir(parents=True, exist_ok=True)
    cfg_file = tiny_config_file(tmp_path / "uploads" / "web.yaml", tiny_modernbert_dir, "web")
    proc, url = start_app(isolated_runs_dir, tmp_path)
    try:
        with sync_playwright() as p:
            browser, page = open_page(p, url)
            page.get_by_role("tab", name="Sweeps").click()
            page.wait_for_selector("#sw-launch", timeout=60_000)
            page.locator("#sw-config textarea, #sw-config input").first.fill(str(cfg_file))
            for sel, value in (("#sw-a1", "recipe"), ("#sw-a2", "phases.main.tokens")):
                box = page.locator(f"{sel} input")
                box.fill(value)
                box.press("Enter")
            page.locator("#sw-v1 textarea, #sw-v1 input").first.fill("mlm,clm_detour")
            # a second axis of one value: the form's second axis is used, and 4 runs report as 8 did (a 2x2 grid
            # trains end to end in tests/sweeps/test_sweep_e2e.py), in half the time
            page.locator("#sw-v2 textarea, #sw-v2 input").first.fill("512")
            page.locator("#sw-conc input").fill("2")
            page.click("#sw-launch")
            page.wait_for_selector("#sw-msg :text('4 runs')", timeout=90_000)
            page.wait_for_function(  # the cells table lists both cells by their labels (text, not a visible box:
                # the table also keeps hidden copies of its cells, which a visibility wait can pick)
                "() => (document.querySelector('#sw-cells')?.innerText || '')"
                ".includes('recipe=clm_detour, tokens=512')",
                timeout=30_000,
            )
            # the detached waiter writes the report when the 4 runs are done; the tab's timer draws it
            page.wait_for_selector("#sw-plot .js-plotly-plot .scatterlayer .trace", timeout=400_000)
            assert "95% CI" in page.inner_text("#sw-report")
            page.screenshot(path=str(tmp_path / "sweeps.png"), full_page=True)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)

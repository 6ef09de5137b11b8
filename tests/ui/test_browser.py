"""One real browser session (Playwright driving Debian's /usr/bin/chromium, headless): load the page, launch a run
from a loaded config, see the loss plot render, fill a mask. Set DETOUR_SCREENSHOT_DIR to keep screenshots."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from backend.engine.config import default_config
from tests.ui.test_app_client import start_app, wait_for

CHROMIUM = "/usr/bin/chromium"
pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _playwright():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the python playwright package is missing (pip install playwright==1.64.1)")
    return sync_playwright


def open_page(p, url: str):
    """(browser, page): headless Chromium on ``url`` at 1400 x 1000, no network of its own, as every browser test
    starts."""
    flags = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
             "--no-first-run"]  # fmt: skip
    browser = p.chromium.launch(executable_path=CHROMIUM, args=flags)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url)
    return browser, page


def test_page_launch_plot_fill_mask(tmp_path, isolated_runs_dir, tiny_modernbert_dir, monkeypatch):
    sync_playwright = _playwright()
    monkeypatch.setenv("DETOUR_ALLOWED_ROOTS", str(tiny_modernbert_dir))
    monkeypatch.setenv("DETOUR_UPLOADS_DIR", str(tmp_path / "uploads"))
    isolated_runs_dir.mkdir(parents=True, exist_ok=True)
    shots = Path(os.environ.get("DETOUR_SCREENSHOT_DIR") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)

    cfg = default_config()
    cfg.update(name="browser-run", recipe="clm_detour")
    cfg["model"]["name"] = str(tiny_modernbert_dir)
    cfg["train"].update(seq_len=64, batch_size=4)
    cfg["phases"]["main"]["tokens"] = 2560  # the decay (10%) is one whole step of 4 x 64 tokens
    cfg["logging"].update(log_every=1, eval_every=4, eval_batches=2, checkpoint_every=100)
    cfg_file = tmp_path / "browser-run.yaml"
    cfg_file.write_text(yaml.safe_dump(cfg))

    proc, url = start_app(isolated_runs_dir, tmp_path)
    try:
        with sync_playwright() as p:
            browser, page = open_page(p, url)
            page.wait_for_selector("#launch-btn", timeout=60_000)
            page.wait_for_selector("#yaml-preview", timeout=30_000)
            page.screenshot(path=str(shots / "launch.png"), full_page=True)

            # load the config through the UI, then launch
            page.get_by_text("Load a config").click()
            page.set_input_files("#config-upload input[type=file]", str(cfg_file))
            page.wait_for_function(
                "() => [...document.querySelectorAll('input, textarea')].some(e => e.value === 'browser-run')",
                timeout=30_000,
            )
            # Launch at once, while the check of the loaded form may still be pending: what was queued is shown
            # under Launch, where no check writes (it once shared the check's line, and a late check erased it)
            page.click("#launch-btn")
            page.wait_for_selector("#launch-result :text('queued browser-run')", timeout=60_000)

            # the Runs tab polls the run directory; the loss plot renders with real points
            page.get_by_role("tab", name="Runs").click()
            page.wait_for_selector("#plot-train .js-plotly-plot .scatterlayer .trace", timeout=120_000)
            page.screenshot(path=str(shots / "runs.png"), full_page=True)

            # fill a mask with the tiny model
            page.get_by_role("tab", name="Fill-mask").click()
            box = page.locator("#fm-model-0 input")
            box.fill(str(tiny_modernbert_dir))
            box.press("Enter")
            page.locator("#fm-model-1 input").fill("")
            page.locator("#fm-text textarea").fill("The patient was given <mask> for the pain.")
            page.click("#fm-btn")
            page.wait_for_selector("#fm-plot-0 .js-plotly-plot .bars", timeout=60_000)
            assert "given" in page.inner_text("#fm-msg")
            page.screenshot(path=str(shots / "fill-mask.png"), full_page=True)

            page.locator("#fm-text textarea").fill("There is no mask in this sentence.")
            page.click("#fm-btn")
            page.wait_for_selector("#fm-msg :text('no mask token')", timeout=30_000)
            assert "<mask>" in page.inner_text("#fm-msg")

            for tab in ("Analyze", "NER"):
                page.get_by_role("tab", name=tab).click()
                page.wait_for_timeout(1000)
                page.screenshot(path=str(shots / f"{tab.lower()}.png"), full_page=True)
            # NER highlights break lines between words: the tab's rule is in the page and on every output
            assert page.evaluate(
                "() => [...document.querySelectorAll('head style')].some(s => s.textContent.includes('.ner-spans'))"
            )
            assert "ner-spans" in page.get_attribute("#ner-out-0", "class")
            browser.close()
        wait_for(lambda: (isolated_runs_dir / "browser-run" / "status.json").exists(), 5, "status")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        from backend.engine import rundir
        from backend.runs import jobs

        st = rundir.read_status(isolated_runs_dir / "browser-run")
        if st.get("state") in ("running", "queued"):
            jobs.cancel(isolated_runs_dir / "browser-run")
    if not os.environ.get("DETOUR_SCREENSHOT_DIR"):
        shutil.rmtree(shots, ignore_errors=True)


def test_fresh_install_detour_scrub_says_no_runs_yet(tmp_path, isolated_runs_dir, monkeypatch):
    """Issue 24 #1, as a new user meets it: no run yet, "Load its saved models" says how to make one; no Gradio
    error toast, no red Error badge (the slider once got minimum == maximum)."""
    sync_playwright = _playwright()
    monkeypatch.setenv("DETOUR_UPLOADS_DIR", str(tmp_path / "uploads"))
    isolated_runs_dir.mkdir(parents=True, exist_ok=True)
    proc, url = start_app(isolated_runs_dir, tmp_path)
    try:
        with sync_playwright() as p:
            browser, page = open_page(p, url)
            page.wait_for_selector("#launch-btn", timeout=60_000)
            page.get_by_role("tab", name="Detour").click()
            page.click("#dt-run-btn")
            page.wait_for_selector("#dt-run-msg :text('No runs yet')", timeout=30_000)
            page.wait_for_timeout(1500)  # an error toast would have come with the update
            assert "Launch" in page.inner_text("#dt-run-msg")
            assert not [t for t in page.locator(".toast-body").all_inner_texts() if t.strip()]
            assert page.locator("text=/^Error$/").count() == 0
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_detour_scrub_follows_the_keyboard(tmp_path, detour_run_dir, monkeypatch, tiny_modernbert_dir):
    """The scrub slider answers an arrow key (the browser sends 'input', no pointer 'release')."""
    sync_playwright = _playwright()
    monkeypatch.setenv("DETOUR_UPLOADS_DIR", str(tmp_path / "uploads"))
    monkeypatch.setenv("DETOUR_ALLOWED_ROOTS", str(tiny_modernbert_dir))
    proc, url = start_app(detour_run_dir.parent, tmp_path)
    try:
        with sync_playwright() as p:
            browser, page = open_page(p, url)
            page.wait_for_selector("#launch-btn", timeout=60_000)
            page.get_by_role("tab", name="Detour").click()
            page.locator("#dt-run input").fill("scrub")
            page.locator("#dt-run input").press("Enter")
            page.click("#dt-run-btn")
            page.wait_for_selector("#dt-scrub-msg :text('1 of 5')", timeout=60_000)
            page.locator("#dt-scrub input[type=range]").focus()
            page.keyboard.press("ArrowRight")
            page.wait_for_selector("#dt-scrub-msg :text('2 of 5')", timeout=60_000)
            assert "512 tokens seen" in page.inner_text("#dt-scrub-msg")
            # a typed value + Enter snaps onto the saved model shown, as leaving the box does (Enter sent no
            # 'release': the box kept the typed 700 while the view showed another model)
            number = page.locator("#dt-scrub input[type=number]")
            number.fill("700")
            number.press("Enter")
            page.wait_for_function(
                "() => document.querySelector('#dt-scrub input[type=number]').value !== '700'", timeout=60_000
            )
            snapped = number.input_value()
            page.wait_for_selector(f"#dt-scrub-msg :text('{snapped} tokens seen')", timeout=60_000)
            if os.environ.get("DETOUR_SCREENSHOT_DIR"):
                page.screenshot(path=str(Path(os.environ["DETOUR_SCREENSHOT_DIR"]) / "detour-keyboard.png"))
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_only_the_open_tab_polls(tmp_path, isolated_runs_dir, monkeypatch):
    """Every page polled every tab's timer whatever it showed (~27 requests a second for 20 open pages, on the cores
    a run trains on). On the Launch tab a page sends nothing after it loaded; the Runs tab polls while it is open
    (and its "Live" box is ticked), and stops when another tab is picked."""
    sync_playwright = _playwright()
    monkeypatch.setenv("DETOUR_UPLOADS_DIR", str(tmp_path / "uploads"))
    isolated_runs_dir.mkdir(parents=True, exist_ok=True)
    proc, url = start_app(isolated_runs_dir, tmp_path)
    sent: list[str] = []

    def count(seconds: float) -> int:
        sent.clear()
        page.wait_for_timeout(seconds * 1000)
        return len(sent)

    try:
        with sync_playwright() as p:
            browser, page = open_page(p, url)
            page.on("request", lambda r: sent.append(r.url) if "/run/predict" in r.url or "/queue/join" in r.url
                    else None)  # fmt: skip
            page.wait_for_selector("#launch-btn", timeout=60_000)
            page.wait_for_timeout(3000)  # the page's own load events
            assert count(7) == 0, sent
            page.get_by_role("tab", name="Runs").click()
            page.wait_for_timeout(500)
            assert count(5) >= 2, sent  # every 2 s
            page.get_by_role("tab", name="Launch").click()
            page.wait_for_timeout(1000)
            assert count(7) == 0, sent
            page.get_by_role("tab", name="Runs").click()
            page.get_by_label("Live (poll every 2 s)").uncheck()
            page.get_by_role("tab", name="Sweeps").click()
            page.wait_for_timeout(500)
            assert count(4) >= 1, sent  # the Sweeps tab's own timer (every 3 s)
            page.get_by_role("tab", name="Runs").click()
            page.wait_for_timeout(1000)
            assert count(5) == 0, sent  # "Live" unticked: the open Runs tab stays still
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)

"""The NER tab in a real browser (headless Chromium): each slot shows its fine-tuned model's whole name, which says
which evaluation, seed and score it is (the name was cut at a quarter of the page's width, under the arrow); two
released taggers side by side draw an entity type in one colour in both slots (CHEMICAL was green in one slot and red
in the other: each slot coloured its types in the order it met them)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.ui.test_app_client import start_app
from tests.ui.test_browser import _playwright, open_page
from tests.ui.test_ner_tab import fake_finetuned

pytestmark = [pytest.mark.browser, pytest.mark.slow]
# the two taggers meet Disease and Chemical in opposite orders here (a page colouring by order gives each two colours)
TAGGED = "She was treated with intravenous furosemide 40 mg twice daily and diuresed 2.1 liters in the first 24 hours."

# Per slot: the picker's text box, how wide its text is and how much is shown, and where the arrow starts.
MEASURE = """() => [0, 1, 2, 3].map(i => {
    const input = document.querySelector(`#ner-model-${i} input`);
    const icon = document.querySelector(`#ner-model-${i} .icon-wrap`);
    const text_end = input.getBoundingClientRect().right - parseFloat(getComputedStyle(input).paddingRight);
    return {value: input.value, scroll: input.scrollWidth, client: input.clientWidth, text_end,
            icon_start: icon ? icon.getBoundingClientRect().left : Infinity};
})"""


# Per slot: each highlighted span's type (as its label reads) and background colour.
SPANS = """(i) => [...document.querySelectorAll(`#ner-out-${i} .token.highlighted`)].map(s => [
    s.querySelector('.label').innerText.toUpperCase(), getComputedStyle(s).backgroundColor])"""


def test_each_slot_shows_its_models_whole_name(tmp_path, isolated_runs_dir, monkeypatch, released_hub):
    sync_playwright = _playwright()
    evals = tmp_path / "evals"
    monkeypatch.setenv("DETOUR_EVALS_DIR", str(evals))
    isolated_runs_dir.mkdir(parents=True, exist_ok=True)
    models = [
        fake_finetuned(evals, name, f"2026-11-26T21:4{i}:00", evaluation="20261126-214500")
        for i, name in enumerate(["detour-tiny-en", "pair-detour", "pair-mlm", "ModernBERT-base"])
    ]
    proc, url = start_app(isolated_runs_dir, tmp_path)
    try:
        with sync_playwright() as p:
            browser, page = open_page(p, url)
            page.get_by_role("tab", name="NER").click()
            for i, model in enumerate(models):
                box = page.locator(f"#ner-model-{i} input")
                box.fill(str(model))
                box.press("Enter")
            page.click("#ner-text textarea")  # the pickers lose focus: each shows its model's name
            page.wait_for_function(
                "() => [0, 1, 2, 3].every(i => document.querySelector(`#ner-model-${i} input`).value.includes('·'))",
                timeout=30_000,
            )
            shown = page.evaluate(MEASURE)
            if shots := os.environ.get("DETOUR_SCREENSHOT_DIR"):
                page.screenshot(path=str(Path(shots) / "ner-slots.png"))

            for i, model in enumerate(["biolab/bio-ner-tagger", "biolab/bert-ner-wordpiece", "", ""]):
                box = page.locator(f"#ner-model-{i} input")
                box.fill(model)
                box.press("Enter")
            page.locator("#ner-text textarea").fill(TAGGED)
            page.click("#ner-btn")
            page.wait_for_selector("#ner-out-1 .token.highlighted", timeout=120_000)
            spans = [page.evaluate(SPANS, i) for i in (0, 1)]
            legend = page.inner_text("#ner-legend")
            labels = [page.inner_text(f"#ner-labels-{i}") for i in (0, 1)]
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    for slot in shown:
        assert "20261126-214500" in slot["value"], slot
        assert slot["scroll"] <= slot["client"], f"the name is cut: {slot}"
        assert slot["text_end"] <= slot["icon_start"] + 0.5, f"the arrow covers the name: {slot}"
    colour = {}
    for typ, bg in spans[0] + spans[1]:  # both slots: one colour per type
        assert colour.setdefault(typ, bg) == bg, (typ, spans)
    order = [list(dict.fromkeys(t for t, _ in slot)) for slot in spans]
    assert order == [["DISEASE", "CHEMICAL"], ["CHEMICAL", "DISEASE"]], spans  # the premise: opposite orders
    assert "Chemical" in legend and "SPECIES" in legend, legend
    assert "Gene" in labels[0] and "SPECIES" in labels[1] and "IOB2, 7 labels" in labels[0], labels

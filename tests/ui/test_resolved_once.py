"""A name is resolved once per action: the app's field check resolves it (``app.model_ref``) and the resolved
``ModelRef`` is what the backend gets; the command line resolves each name once too. (The app used to check a name,
then the backend resolved it twice more: three reads of the cache or the runs folder per model, per click.)"""

from __future__ import annotations

import pytest

from backend.__main__ import main as cli
from backend.engine import model_ref

ENCODER, TAGGER = "biolab/bert-wordpiece", "biolab/bio-ner-tagger"
TEXT = "Aspirin reduces the risk of [MASK] in patients."


@pytest.fixture
def resolutions(released_hub, monkeypatch) -> list[str]:
    """Every name resolved (``model_ref._as_ref``, the one place a name becomes a model), in order."""
    seen: list[str] = []
    real = model_ref._as_ref

    def counted(spec: str):
        seen.append(spec)
        return real(spec)

    monkeypatch.setattr(model_ref, "_as_ref", counted)
    return seen


def test_each_tab_resolves_each_name_once_per_action(resolutions):
    from app import analyze_tab, detour_tab, fill_mask_tab, ner_tab

    figs, msg = fill_mask_tab.predict(TEXT, [ENCODER], [False])
    assert figs[0] is not None and resolutions == [ENCODER], msg
    resolutions.clear()
    html, msg = detour_tab.show_surprise("Aspirin reduces the risk.", [ENCODER])
    assert html and resolutions == [ENCODER], msg
    resolutions.clear()
    fig, msg = detour_tab.show_masks(ENCODER, 16)
    assert fig is not None and resolutions == [ENCODER], msg
    resolutions.clear()
    *_, msg = analyze_tab.compute_cka(ENCODER, "biolab/roberta-bytelevel", None, None, "demo", n_texts=8, max_len=16)
    assert msg.startswith("✓") and resolutions == [ENCODER, "biolab/roberta-bytelevel"], msg
    resolutions.clear()
    vals, msg = ner_tab.tag("Aspirin reduces the risk.", [TAGGER])
    assert vals[0] is not None and resolutions == [TAGGER], msg


def test_each_command_resolves_each_name_once(resolutions, capsys):
    for argv in (
        ["fill-mask", TEXT, "--model", ENCODER],
        ["explain", "surprise", "Aspirin helps.", "--model", ENCODER],
        ["tag", "Aspirin helps.", "--model", TAGGER],
    ):
        resolutions.clear()
        assert cli(argv) == 0, capsys.readouterr().err
        assert resolutions == [argv[-1]], argv

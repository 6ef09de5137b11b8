"""The Detour tab's surprise view reads released encoders of every word marking in words: the text is shown as the
user wrote it, cut where each model cuts it, and what the model expected at each piece has no ``##``, ``▁`` or
``Ġ`` (``…irin``: a piece that continues the word before it) -- in the backend, the CLI and the tab."""

from __future__ import annotations

import json

from backend.__main__ import main as cli
from backend.explain import token_surprise
from tests import released_models as rm

TEXT = "Aspirin reduces the risk of colorectal cancer in patients."
MARKERS = ("##", "▁", "Ġ")


def test_every_released_encoder_is_read_in_words(released_hub):
    results = token_surprise(list(rm.ENCODERS), TEXT)
    assert [r["model"] for r in results] == list(rm.ENCODERS)
    for r in results:
        text = "".join(gap + piece for (gap, piece), special in zip(r["pieces"], r["special"], strict=True)
                       if not special)  # fmt: skip
        assert text == TEXT, r["model"]  # the text as written, whatever the tokenizer normalises
        assert len(r["pieces"]) > len(TEXT.split()) + 2  # cut into pieces, not words
        for v in r["views"]:
            expected = [e for e in r[f"{v['objective']}_expected"] if e is not None]
            assert expected and not any(m in e for e in expected for m in MARKERS), (r["model"], expected)
    wordpiece = results[0]
    every = [e for v in wordpiece["views"] for e in wordpiece[f"{v['objective']}_expected"] if e]
    assert any(e.startswith("…") and len(e) > 1 for e in every)  # a continuing piece, marked as such


def test_the_cli_and_the_detour_tab_read_in_words(released_hub, capsys):
    from app import detour_tab

    argv = ["explain", "surprise", TEXT, "--json"] + [a for h in rm.ENCODERS for a in ("--model", h)]
    assert cli(argv) == 0
    out = json.loads(capsys.readouterr().out)
    expected = [e for r in out for v in r["views"] for e in r[f"{v['objective']}_expected"] if e]
    assert expected and not any(m in e for e in expected for m in MARKERS)
    page, msg = detour_tab.show_surprise(TEXT, list(rm.ENCODERS))
    assert all(f"| {h} |" in msg for h in rm.ENCODERS), msg
    assert not any(m in page for m in MARKERS) and "the model expected" in page

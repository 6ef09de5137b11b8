"""Fill-mask answers in words for released encoders of every word marking -- a WordPiece BERT (``##``), a
SentencePiece/Unigram CamemBERT (``▁``), a byte-level RoBERTa (``Ġ``), from the Hugging Face cache -- and for a
WordPiece checkpoint shipped without a decoder, whose answers read ``asp ##irin reduces ...``: in the backend, the
CLI, the bars and the Fill-mask tab."""

from __future__ import annotations

import json

import pytest

from backend.__main__ import main as cli
from backend.analysis import plots
from backend.analysis.fill_mask import clear_cache, fill_mask
from tests import released_models as rm

TEXT = "Aspirin reduces the risk of [MASK] in patients."
ENCODERS = list(rm.ENCODERS)
MARKERS = ("##", "▁", "Ġ")


def _check_in_words(result: dict, uncased: bool) -> None:
    before, after = ("aspirin reduces the risk of", "in patients.")
    if not uncased:
        before = before.capitalize()
    for p in result["predictions"]:
        for key in ("sequence", "token"):
            assert not any(m in p[key] for m in MARKERS), p
        assert p["label"] == ("…" + p["token"] if p["joins"] else p["token"])
        if p["token"].isalnum():  # a word or a piece of one: the sentence reads it where the mask was
            glue = "" if p["joins"] else " "
            assert p["sequence"] == f"{before}{glue}{p['token']} {after}", p


@pytest.mark.parametrize("hub_id", ENCODERS)
def test_each_released_encoder_answers_in_words(released_hub, hub_id):
    (res,) = fill_mask([hub_id], TEXT, top_k=20)
    assert res["model"] == hub_id and len(res["predictions"]) == 20
    _check_in_words(res, uncased=hub_id == "biolab/bert-wordpiece")
    if hub_id == "biolab/bert-wordpiece":  # most of a small WordPiece vocabulary continues words: some answers do
        assert any(p["joins"] for p in res["predictions"]), res["predictions"]


def test_a_wordpiece_checkpoint_without_a_decoder_answers_in_words(tmp_path):
    """A checkpoint as some ship: tokenizer.json without a decoder, loaded as transformers' generic tokenizer."""
    from transformers import AutoTokenizer

    folder = tmp_path / "no-decoder-bert"
    folder.mkdir()
    rm.wordpiece_bert(folder, decoder=False, tokenizer_class="PreTrainedTokenizerFast")
    raw = AutoTokenizer.from_pretrained(folder)
    assert raw.decode(raw(TEXT.replace("[MASK]", "x"))["input_ids"], skip_special_tokens=True).startswith("as ##pir")
    clear_cache()
    (res,) = fill_mask([str(folder)], TEXT, top_k=20)
    _check_in_words(res, uncased=True)


def test_the_bars_read_in_words_and_a_continuing_piece_is_marked(released_hub):
    results = fill_mask(ENCODERS, TEXT, top_k=20)
    for res, fig in zip(results, plots.fill_mask_figures(results), strict=True):
        labels = [y.split(". ", 1)[1] for y in fig.data[0].y][::-1]
        assert labels == [repr(p["label"])[1:-1] for p in res["predictions"]]  # control characters escaped
        assert list(fig.data[0].customdata)[::-1] == [p["sequence"] for p in res["predictions"]]  # the hover
        assert not any(m in "".join(labels) for m in MARKERS)
    assert any(p["label"].startswith("…") for p in results[0]["predictions"])  # the WordPiece model's pieces


def test_the_cli_answers_in_words(released_hub, capsys):
    argv = ["fill-mask", TEXT, "--top-k", "5"] + [a for h in ENCODERS for a in ("--model", h)]
    assert cli([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["model"] for r in out] == ENCODERS
    for r, hub_id in zip(out, ENCODERS, strict=True):
        _check_in_words(r, uncased=hub_id == "biolab/bert-wordpiece")
    assert cli(argv) == 0
    text = capsys.readouterr().out
    assert not any(m in text for m in MARKERS) and "aspirin reduces the risk of" in text, text


def test_the_fill_mask_tab_answers_in_words(released_hub):
    from app import fill_mask_tab

    labels = [c for c in fill_mask_tab.model_choices() if c.startswith("biolab/")]
    assert sorted(label.split(" ")[0] for label in labels) == sorted(ENCODERS)  # the cached encoders are offered
    figs, msg = fill_mask_tab.predict(TEXT, labels, [False] * 3, 5)
    assert all(f is not None for f in figs), msg
    assert msg.count("aspirin reduces the risk of") == 1 and msg.count("Aspirin reduces the risk of") == 2, msg
    assert not any(m in msg for m in MARKERS), msg

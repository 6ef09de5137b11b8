"""A tokenizer's pieces read as words for each way released encoders mark words: WordPiece's ``##``, SentencePiece's
``▁``, byte-level BPE's ``Ġ``; and a tokenizer shipped without a decoder decodes in words once loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.engine.models import load_tokenizer
from backend.engine.token_words import complete_decoder, piece, piece_label, pieces_in_words, scheme
from tests import released_models as rm

TEXT = "Aspirin reduces the risk of colorectal cancer in patients."
MARKERS = ("##", "▁", "Ġ")
KINDS = {"biolab/bert-wordpiece": "wordpiece", "biolab/camembert-unigram": "metaspace",
         "biolab/roberta-bytelevel": "bytelevel"}  # fmt: skip


@pytest.mark.parametrize("hub_id", list(KINDS))
def test_each_word_marking_reads_as_words(released_hub, hub_id):
    tok = load_tokenizer(hub_id)
    assert scheme(tok).kind == KINDS[hub_id]
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    assert len(ids) > len(TEXT.split()) + 1  # the premise: words cut into pieces ("as ##pir ##in")
    shown = pieces_in_words(tok, ids)
    assert not any(m in shown for m in MARKERS), shown
    text = TEXT.lower() if hub_id == "biolab/bert-wordpiece" else TEXT  # the WordPiece model is uncased
    assert shown.replace("·", "").replace(" .", ".") == text, shown
    assert "·" in shown.split()[0]  # "aspirin" is several pieces, joined within the word
    first_word = [piece(tok, i) for i in ids[: len(shown.split()[0].split("·"))]]
    assert [joins for _, joins in first_word][1:] == [True] * (len(first_word) - 1)
    risk = ids[[p for p, _ in map(lambda i: piece(tok, i), ids)].index("risk")]
    assert piece(tok, risk) == ("risk", False) and piece_label(tok, risk) == "risk"
    assert all(piece_label(tok, i).startswith("…") == piece(tok, i)[1] for i in ids)
    assert tok.decode(tok(TEXT)["input_ids"], skip_special_tokens=True) == text


def _without_decoder(folder: Path, tokenizer_json: str) -> Path:
    """A checkpoint whose tokenizer.json has no decoder and whose config names no tokenizer class (transformers
    then loads its generic tokenizer, which joins pieces with spaces)."""
    state = json.loads(tokenizer_json)
    state["decoder"] = None
    folder.mkdir()
    (folder / "tokenizer.json").write_text(json.dumps(state))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    return folder


@pytest.mark.parametrize("build", [rm.wordpiece_tokenizer, rm.unigram_tokenizer, rm.bytelevel_tokenizer])
def test_a_tokenizer_shipped_without_a_decoder_decodes_in_words(tmp_path, build):
    from transformers import AutoTokenizer

    folder = _without_decoder(tmp_path / "tok", build().to_str())
    plain = AutoTokenizer.from_pretrained(folder)
    ids = plain(TEXT)["input_ids"]
    assert any(m in plain.decode(ids, skip_special_tokens=True) for m in MARKERS)  # the premise: pieces shown
    tok = load_tokenizer(str(folder))
    words = tok.decode(ids, skip_special_tokens=True)
    assert not any(m in words for m in MARKERS) and words.lower().strip() == TEXT.lower(), words
    assert not any(m in pieces_in_words(tok, ids) for m in MARKERS)
    assert complete_decoder(tok) is tok  # a tokenizer with a decoder is left as it is


def test_a_bert_checkpoint_with_only_vocab_txt_reads_in_words(tmp_path):
    folder = tmp_path / "old-bert"
    folder.mkdir()
    rm.save_wordpiece(folder)
    (folder / "tokenizer.json").unlink()  # as older BERT checkpoints ship: vocab.txt and a config
    tok = load_tokenizer(str(folder))
    ids = tok(TEXT)["input_ids"]
    assert "##" in " ".join(tok.convert_ids_to_tokens(ids))
    assert tok.decode(ids, skip_special_tokens=True) == TEXT.lower()
    assert pieces_in_words(tok, ids).replace("·", "").replace(" .", ".") == TEXT.lower()

"""IOB reading, first-subword label alignment (round trip, chunking, prefix space) and strict seqeval scoring."""

from __future__ import annotations

import pytest

from backend.evaluation.iob import load_ner_folder, parse_iob_lines, repair_iob1
from backend.evaluation.ner import IGNORE, decode_chunks, encode_sentences, needs_prefix_space, ner_scores
from conftest import bundled_tokenizer

TOY = """-DOCSTART-\tO

Identification\tO
of\tO
APC2\tB-Gene
,\tO
adenomatous\tB-Disease
polyposis\tI-Disease
coli\tI-Disease

The\tO
tumour\tB-Disease
"""


def write_split(folder, name, text):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text, encoding="utf-8")


def test_parse_sentences_docstart_crlf_and_no_final_blank():
    sp = parse_iob_lines(TOY.replace("\n", "\r\n").splitlines(), "toy.tsv", "train")
    assert sp.sentences == [
        ["Identification", "of", "APC2", ",", "adenomatous", "polyposis", "coli"],
        ["The", "tumour"],
    ]
    assert sp.tags[0] == ["O", "O", "B-Gene", "O", "B-Disease", "I-Disease", "I-Disease"]
    assert sp.tags[1] == ["O", "B-Disease"]
    assert sp.where == ["toy.tsv line 3", "toy.tsv line 11"]


def test_parse_conll2003_whitespace_columns_take_first_and_last():
    sp = parse_iob_lines(["EU NNP B-NP B-ORG", "rejects VBZ B-VP O", "", "German JJ B-NP B-MISC"], "c.txt")
    assert sp.sentences == [["EU", "rejects"], ["German"]]
    assert sp.tags == [["B-ORG", "O"], ["B-MISC"]]


def test_repair_iob1_starts():
    tags, n = repair_iob1(["I-PER", "I-PER", "O", "I-LOC", "I-ORG", "B-ORG", "I-ORG"])
    assert tags == ["B-PER", "I-PER", "O", "B-LOC", "B-ORG", "B-ORG", "I-ORG"]
    assert n == 3


def test_folder_with_devel_name_labels_and_notes(tmp_path):
    d = tmp_path / "ner"
    write_split(d, "train.tsv", TOY)
    write_split(d, "devel.tsv", "tumour\tI-Disease\n")  # IOB1 start: read as B-
    write_split(d, "test.conll", "APC2\tB-Gene\n")
    data = load_ner_folder(d)
    assert data.labels == ["O", "B-Disease", "I-Disease", "B-Gene", "I-Gene"]
    assert data.entity_types == ["Disease", "Gene"]
    assert data.dev.tags == [["B-Disease"]]
    assert any("IOB1" in n and n.startswith("dev") for n in data.notes)
    assert (len(data.train), len(data.dev), len(data.test)) == (2, 1, 1)


def test_missing_dev_is_carved_from_train(tmp_path):
    d = tmp_path / "ner"
    write_split(d, "train.tsv", "\n\n".join(f"w{i}\tB-X\nx\tO" for i in range(20)) + "\n")
    write_split(d, "test.tsv", "w\tB-X\n")
    data = load_ner_folder(d)
    assert (len(data.train), len(data.dev)) == (18, 2)
    assert any("no dev split" in n for n in data.notes)
    again = load_ner_folder(d)
    assert again.dev.sentences == data.dev.sentences  # fixed partition


def _wordpiece_tokenizer():
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    pieces = ["the", "tum", "##our", "of", "a", "##p", "##c", "##2", ",", "ad", "##en", "##oma", "##tous"]
    chars = list("abcdefghijklmnopqrstuvwxyz0123456789")
    vocab = {t: i for i, t in enumerate(specials + pieces + chars + ["##" + c for c in chars])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]"
    )


SENTS = [
    ["Identification", "of", "APC2", ",", "adenomatous", "polyposis", "coli"],
    ["The", "tumour"],
    ["a"] * 3 + ["adenomatous"] * 12 + ["of"],  # long: chunked at small max_len
]
TAGS = [
    ["O", "O", "B-Gene", "O", "B-Disease", "I-Disease", "I-Disease"],
    ["O", "B-Disease"],
    ["O"] * 3 + ["B-Disease"] + ["I-Disease"] * 11 + ["O"],
]
LABELS = ["O", "B-Disease", "I-Disease", "B-Gene", "I-Gene"]


@pytest.mark.parametrize("kind", ["bytelevel", "wordpiece"])
@pytest.mark.parametrize("max_len", [128, 12])
def test_first_subword_alignment_round_trip(kind, max_len):
    tok = bundled_tokenizer() if kind == "bytelevel" else _wordpiece_tokenizer()
    assert tok.is_fast
    prefix = needs_prefix_space(tok)
    assert prefix is (kind == "bytelevel")
    l2i = {lab: i for i, lab in enumerate(LABELS)}
    tag_ids = [[l2i[t] for t in s] for s in TAGS]
    chunks = encode_sentences(tok, SENTS, max_len, prefix, tag_ids)
    if max_len == 12:
        assert sum(c.sentence == 2 for c in chunks) > 1  # the long sentence was split into windows
    for c in chunks:
        assert len(c.input_ids) <= max_len
        labelled = [i for i, lab in enumerate(c.labels) if lab != IGNORE]
        assert labelled == [pos for _, pos in c.word_pos]  # exactly one label per word, at its first subword
    # every word is covered exactly once across chunks
    for si, words in enumerate(SENTS):
        covered = sorted(w for c in chunks if c.sentence == si for w, _ in c.word_pos)
        assert covered == list(range(len(words)))
    # round trip: use the gold labels as "predictions"
    preds = [[lab if lab != IGNORE else 0 for lab in c.labels] for c in chunks]
    back = decode_chunks(chunks, preds, [len(s) for s in SENTS], dict(enumerate(LABELS)))
    assert back == TAGS


def test_bytelevel_words_get_the_pretraining_space():
    tok = bundled_tokenizer()
    [chunk] = encode_sentences(tok, [["The", "of", "of"]], 64, needs_prefix_space(tok))
    toks = tok.convert_ids_to_tokens(chunk.input_ids)
    assert toks.count("Ġof") == 2  # as in running text, not the bare "of" piece
    with_space = tok(" of", add_special_tokens=False)["input_ids"]
    assert chunk.input_ids[chunk.word_pos[1][1]] == with_space[0]


def test_multi_subword_word_labels_only_the_first_piece():
    tok = bundled_tokenizer()
    [c] = encode_sentences(tok, [["adenomatous"]], 64, True, [[1]])
    n_pieces = sum(1 for t in tok.convert_ids_to_tokens(c.input_ids) if t not in ("[CLS]", "[SEP]"))
    assert n_pieces > 1
    assert [lab for lab in c.labels if lab != IGNORE] == [1]
    assert c.labels[c.word_pos[0][1]] == 1


def test_seqeval_strict_iob2_hand_checked():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O", "B-PER"]]
    # entity 1 right; LOC missed; ORG right; last PER predicted as a stray I-PER: no entity in strict IOB2
    pred = [["B-PER", "I-PER", "O", "O"], ["B-ORG", "O", "I-PER"]]
    s = ner_scores(gold, pred)
    # 2 true positives, 2 predicted entities, 4 gold entities
    assert s["precision"] == pytest.approx(1.0)
    assert s["recall"] == pytest.approx(0.5)
    assert s["f1"] == pytest.approx(2 / 3)
    # per type: PER P=1 R=1/2 F=2/3; LOC F=0; ORG F=1 -> macro = (2/3 + 0 + 1) / 3
    assert s["per_type"]["PER"]["f1"] == pytest.approx(2 / 3)
    assert s["per_type"]["LOC"]["f1"] == 0.0
    assert s["per_type"]["ORG"]["support"] == 1
    assert s["macro_f1"] == pytest.approx(5 / 9)
    assert s["token_accuracy"] == pytest.approx(5 / 7)


def test_seqeval_boundary_errors_count_as_wrong():
    gold = [["B-D", "I-D", "I-D", "O"]]
    assert ner_scores(gold, [["B-D", "I-D", "O", "O"]])["f1"] == 0.0  # too short
    assert ner_scores(gold, [["B-D", "I-D", "I-D", "I-D"]])["f1"] == 0.0  # too long
    assert ner_scores(gold, [["B-D", "I-D", "I-D", "O"]])["f1"] == 1.0

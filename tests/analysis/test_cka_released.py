"""CKA between released encoders of different word markings (WordPiece, SentencePiece, byte-level BPE) from the
Hugging Face cache: per text (each model with its own tokenizer) it compares them; per token it cannot, and the
refusal shows how each model cuts the text, in words (``as·pir·in``), not in pieces with their markers."""

from __future__ import annotations

import json

import pytest

from backend.__main__ import main as cli
from backend.analysis.api import cka_between
from backend.core.errors import DataError

TEXTS = [
    "Aspirin reduces the risk of colorectal cancer in patients.",
    "Metformin is the first drug for type 2 diabetes.",
    "The patient was treated with intravenous furosemide.",
    "Serum creatinine rose after the contrast study.",
    "Cisplatin caused acute kidney injury in two patients.",
    "Blood pressure improved within two days of treatment.",
]
MARKERS = ("##", "▁", "Ġ")


def test_released_encoders_of_every_word_marking_compare_per_text(released_hub, tmp_path):
    res = cka_between("biolab/bert-wordpiece", "biolab/camembert-unigram", TEXTS, n_texts=6, max_len=32,
                      baseline=False)  # fmt: skip
    assert res["inputs"]["models"]["a"]["spec"] == "biolab/bert-wordpiece"
    assert len(res["matrix"]) == 3 and all(v is not None for row in res["matrix"] for v in row)
    texts, out = tmp_path / "texts.txt", tmp_path / "cka.json"
    texts.write_text("\n".join(TEXTS) + "\n")
    argv = ["cka", "--a", "biolab/bert-wordpiece", "--b", "biolab/roberta-bytelevel", "--texts", str(texts),
            "--n-texts", "6", "--max-len", "32", "--no-baseline", "--out", str(out)]  # fmt: skip
    assert cli(argv) == 0
    saved = json.loads(out.read_text())
    assert [saved["inputs"]["models"][k]["spec"] for k in "ab"] == ["biolab/bert-wordpiece", "biolab/roberta-bytelevel"]


def test_per_token_the_refusal_shows_each_models_pieces_in_words(released_hub, tmp_path, capsys):
    with pytest.raises(DataError) as err:
        cka_between("biolab/bert-wordpiece", "biolab/roberta-bytelevel", TEXTS, pooling="token", n_texts=6,
                    max_len=32)  # fmt: skip
    msg = str(err.value)
    # the shortest text first; the lone space piece before "rose" is shown as ␣
    assert "a reads 'serum creatinine r·ose after the contr·ast stud·y .'" in msg, msg
    assert "b 'S·erum c·reatinine ␣·ro·se after the contr·ast st·ud·y .'" in msg, msg
    assert not any(m in msg for m in MARKERS) and "pooling 'mean'" in msg
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n")
    argv = ["cka", "--a", "biolab/bert-wordpiece", "--b", "biolab/roberta-bytelevel", "--pooling", "token"]
    argv += ["--texts", str(texts), "--n-texts", "6", "--max-len", "32", "--out", str(tmp_path / "cka.json")]
    assert cli(argv) == 2
    err_line = capsys.readouterr().err.strip()
    assert len(err_line.splitlines()) == 1 and "c·reatinine" in err_line and not (tmp_path / "cka.json").exists()


def test_the_analyze_tab_compares_two_released_encoders(released_hub):
    from app import analyze_tab, model_choices

    a, b, note = analyze_tab.default_models()  # no run yet, but cached encoders: not "only one model"
    assert (a, b) == ("detour-tiny-en", None) and "Only one model" not in note
    assert "Pick model B to compare with A: the pickers list biolab/bert-wordpiece" in note, note

    a, b = (next(c for c in model_choices() if c.startswith(h)) for h in ("biolab/bert-wordpiece", "biolab/roberta"))
    heat, div, rows, msg = analyze_tab.compute_cka(a, b, None, None, "demo", n_texts=8, max_len=32)
    assert msg.startswith("✓") and "biolab/bert-wordpiece" in msg and "(cached" not in msg, msg
    assert heat is not None and len(rows) == 3

"""Bad task files and settings give specific one-line errors (file, line/row, problem) before any training."""

from __future__ import annotations

import json

import pytest

from backend.__main__ import main as cli
from backend.core.errors import ConfigError, DataError
from backend.evaluation.classification import load_classification_folder
from backend.evaluation.finetune import resolve_hparams
from backend.evaluation.iob import load_ner_folder, ner_from_dataset_dict
from backend.evaluation.runner import evaluate_models, normalize_seeds

GOOD = "The\tO\ntumour\tB-Disease\ngrows\tO\n\nAPC\tB-Gene\n"


def ner_dir(tmp_path, train=GOOD, dev=GOOD, test=GOOD, names=("train.tsv", "dev.tsv", "test.tsv")):
    d = tmp_path / "ner"
    d.mkdir(exist_ok=True)
    for name, text in zip(names, (train, dev, test), strict=True):
        if text is not None:
            (d / name).write_text(text, encoding="utf-8")
    return d


@pytest.mark.parametrize(
    "split, text, message",
    [
        ("test", "The\tO\ntumour\n", r"test\.tsv line 2: token 'tumour' has no tag"),
        ("train", "The\tO\ntumour\tDisease\n", r"train\.tsv line 2: tag 'Disease' is not IOB2"),
        ("train", "The\tO\ntumour\tS-Disease\n", r"line 2: tag 'S-Disease' is IOBES"),
        ("dev", "\n\n  \n", r"dev\.tsv: empty dev split"),
        (
            "test",
            "The\tO\naspirin\tB-Chemical\n",
            r"label 'B-Chemical' appears in test \(.*test\.tsv line 1\).*never appears in train",
        ),
    ],
    ids=["missing-tag", "not-iob2", "iobes", "empty-split", "label-only-in-test"],
)
def test_a_bad_split_file_is_named_with_its_line_and_problem(tmp_path, split, text, message):
    d = ner_dir(tmp_path, **{split: text})
    with pytest.raises(DataError, match=message):
        load_ner_folder(d)


def test_missing_and_ambiguous_split_files(tmp_path):
    d = ner_dir(tmp_path, test=None)
    with pytest.raises(DataError, match=r"no test file \(found: dev\.tsv, train\.tsv\)"):
        load_ner_folder(d)
    (d / "test.tsv").write_text(GOOD)
    (d / "test.txt").write_text(GOOD)
    with pytest.raises(DataError, match=r"several test files \(test\.tsv, test\.txt\)"):
        load_ner_folder(d)
    with pytest.raises(DataError, match="no such folder"):
        load_ner_folder(tmp_path / "nope")


def test_dataset_token_tag_count_mismatch():
    from datasets import Dataset, DatasetDict

    ok = {"tokens": [["The", "tumour"]], "ner_tags": [["O", "B-D"]]}
    bad = {"tokens": [["The", "tumour"], ["a", "b", "c"]], "ner_tags": [["O", "B-D"], ["O", "O"]]}
    dd = DatasetDict({"train": Dataset.from_dict(ok), "test": Dataset.from_dict(bad)})
    with pytest.raises(DataError, match=r"toy/ner test example 1: 3 tokens but 2 tags"):
        ner_from_dataset_dict(dd, "toy/ner")
    dd = DatasetDict(
        {"train": Dataset.from_dict({"words": [["a"]], "ner_tags": [["O"]]}), "test": Dataset.from_dict(ok)}
    )
    with pytest.raises(DataError, match=r"no tokens column 'tokens' \(columns found: words, ner_tags\)"):
        ner_from_dataset_dict(dd, "toy/ner")


def test_dataset_classlabel_tags_are_mapped():
    from datasets import ClassLabel, Dataset, DatasetDict, Features, List, Value

    feats = Features({"tokens": List(Value("string")), "ner_tags": List(ClassLabel(names=["O", "B-D", "I-D"]))})
    rows = {"tokens": [["a", "tumour", "grows"]], "ner_tags": [[0, 1, 2]]}
    dd = DatasetDict({s: Dataset.from_dict(rows, features=feats) for s in ("train", "validation", "test")})
    data = ner_from_dataset_dict(dd, "toy/ner")
    assert data.train.tags == [["O", "B-D", "I-D"]]
    assert data.labels == ["O", "B-D", "I-D"]


def cls_dir(tmp_path, files: dict):
    d = tmp_path / "cls"
    d.mkdir(exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text, encoding="utf-8")
    return d


CSV = "text,label\ngood film,pos\nbad film,neg\n"


def test_classification_missing_columns_list_found(tmp_path):
    d = cls_dir(tmp_path, {"train.csv": "sentence,label\nx,pos\n", "dev.csv": CSV, "test.csv": CSV})
    with pytest.raises(
        DataError,
        match=r"train\.csv: no text column 'text' \(columns found: sentence, label\); "
        r"choose one with --text-column",
    ):
        load_classification_folder(d)
    d = cls_dir(tmp_path, {"train.csv": CSV, "dev.csv": CSV, "test.csv": "text,y\nx,pos\n"})
    with pytest.raises(DataError, match=r"test\.csv: no label column 'label' \(columns found: text, y\)"):
        load_classification_folder(d)


def test_classification_row_errors_empty_split_and_test_only_label(tmp_path):
    d = cls_dir(tmp_path, {"train.csv": CSV + "fine film,\n", "dev.csv": CSV, "test.csv": CSV})
    with pytest.raises(DataError, match=r"train\.csv row 3: missing label in column 'label'"):
        load_classification_folder(d)
    d = cls_dir(tmp_path, {"train.csv": CSV, "dev.csv": "text,label\n", "test.csv": CSV})
    with pytest.raises(DataError, match=r"dev\.csv: empty dev split \(no rows\)"):
        load_classification_folder(d)
    d = cls_dir(tmp_path, {"train.csv": CSV, "dev.csv": CSV, "test.csv": CSV + "odd film,neutral\n"})
    with pytest.raises(DataError, match=r"label 'neutral' appears in test \(.*test\.csv row 3\) but never in train"):
        load_classification_folder(d)
    d = cls_dir(tmp_path, {"train.csv": "text,label\na,pos\nb,pos\n", "dev.csv": CSV, "test.csv": CSV})
    d.joinpath("dev.csv").write_text("text,label\na,pos\n")
    d.joinpath("test.csv").write_text("text,label\na,pos\n")
    with pytest.raises(DataError, match="train has 1 distinct label"):
        load_classification_folder(d)


def test_classification_jsonl_line_errors_and_multilabel(tmp_path):
    rows = [{"text": "a b", "label": ["x", "y"]}, {"text": "c", "label": []}, {"text": "d", "label": ["y"]}]
    jl = "\n".join(json.dumps(r) for r in rows) + "\n"
    d = cls_dir(tmp_path, {"train.jsonl": jl, "validation.jsonl": jl, "test.jsonl": jl + "{oops\n"})
    with pytest.raises(DataError, match=r"test\.jsonl line 4: not valid JSON"):
        load_classification_folder(d)
    d.joinpath("test.jsonl").write_text(jl)
    data = load_classification_folder(d)
    assert data.multi_label and data.labels == ["x", "y"]
    assert data.train.labels == [["x", "y"], [], ["y"]]
    # separator-joined labels in a CSV
    d2 = tmp_path / "sep"
    d2.mkdir()
    for s in ("train", "dev", "test"):
        (d2 / f"{s}.csv").write_text("text,tags\na,x|y\nb,y\nc,\n")
    data = load_classification_folder(d2, label_column="tags", label_separator="|")
    assert data.multi_label and data.train.labels == [["x", "y"], ["y"], []]


def test_settings_errors(tmp_path):
    with pytest.raises(ConfigError, match="unknown fine-tuning setting"):
        resolve_hparams("ner", learning_rate=1e-4)
    with pytest.raises(ConfigError, match="metric"):
        resolve_hparams("classification", metric="f1")
    with pytest.raises(ConfigError, match="integer >= 1"):
        resolve_hparams("ner", epochs=0)
    with pytest.raises(ConfigError, match="seeds"):
        normalize_seeds(0)
    assert normalize_seeds(3) == [0, 1, 2] and normalize_seeds([4, 2]) == [4, 2]
    with pytest.raises(ConfigError, match="distinct"):
        evaluate_models(["a", "b"], "ner", labels=["x", "x"], out_dir=tmp_path)
    with pytest.raises(ConfigError, match="classification needs --data"):
        evaluate_models([str(tmp_path)], "classification", out_dir=tmp_path / "o")


def test_cli_bad_data_is_one_clean_line(tmp_path, capsys, tiny_bert_dir):
    d = ner_dir(tmp_path, test="The\tO\ntumour\n")
    model = tiny_bert_dir  # a whole model (its folder is checked when named); the data error comes before loading
    rc = cli(
        [
            "evaluate",
            "--models",
            str(model),
            "--task",
            "ner",
            "--data",
            str(d),
            "--seeds",
            "1",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.startswith("error: ") and "\n" not in err
    assert "test.tsv line 2" in err
    rc = cli(["evaluate", "--models", str(tmp_path / "missing-model"), "--data", str(d)])
    assert rc == 2
    assert "no such path" in capsys.readouterr().err

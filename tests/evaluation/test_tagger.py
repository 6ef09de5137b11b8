"""Released token-classification models as taggers: their spans are the ones transformers' token-classification
pipeline finds at word level, their label sets are read as they name them (IOB2, BIOES, bare types), and a model
that cannot tag -- a pretrained encoder, a head whose size disagrees with its ``id2label`` -- is refused in one
line before it loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.__main__ import main as cli
from backend.core.errors import ModelSpecError
from backend.evaluation.predict import predict_entities
from backend.evaluation.tagger import NotATagger, check_tagger, read_labels
from tests import released_models as rm

TEXTS = [
    "Patients with type 2 diabetes received metformin at Massachusetts General Hospital.",
    "Aspirin lowers the risk of colorectal cancer in BRCA1 carriers (a 2019 cohort), said Dr. Smith-Jones.",
]


def spans_of(segments: list[tuple[str, str | None]]) -> list[tuple[int, int, str]]:
    out, pos = [], 0
    for seg, typ in segments:
        if typ is not None:
            out.append((pos, pos + len(seg), typ))
        pos += len(seg)
    return out


def pipeline_spans(model: str | Path, text: str) -> list[tuple[int, int, str]]:
    """What ``pipeline("token-classification", model=..., aggregation_strategy="first")`` finds, each span without
    the spaces around it (a byte-level piece's offsets start at the space before its word)."""
    from transformers import pipeline

    out = []
    for e in pipeline("token-classification", model=str(model), aggregation_strategy="first")(text):
        start, end = e["start"], e["end"]
        start += len(text[start:end]) - len(text[start:end].lstrip())
        end -= len(text[start:end]) - len(text[start:end].rstrip())
        out.append((start, end, e["entity_group"]))
    return out


def snapshot(cache: Path, hub_id: str) -> Path:
    """The folder the hub client gives for ``hub_id`` in ``cache`` (huggingface_hub reads its cache setting when it
    is imported: the folder is what it would load)."""
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(hub_id, cache_dir=cache, local_files_only=True))


@pytest.mark.parametrize("hub_id", list(rm.TAGGERS))
def test_a_released_tagger_finds_the_spans_the_pipeline_finds(released_hub, hub_id):
    found = 0
    for text in TEXTS:
        ours = spans_of(predict_entities(hub_id, text))
        assert ours == pipeline_spans(snapshot(released_hub, hub_id), text), text
        found += len(ours)
    assert found >= 3  # the comparison is about entities, not only about empty answers


def test_bare_types_and_bioes_are_read_as_the_pipeline_reads_them(tmp_path):
    """A model whose labels are bare types (``Chemical``): a word of a type continues the entity before it."""
    folder = tmp_path / "bare-tagger"
    folder.mkdir()
    rm.modernbert_tagger(folder, labels=["O", "Chemical", "Disease"])
    for text in TEXTS:
        assert spans_of(predict_entities(str(folder), text)) == pipeline_spans(folder, text)
    assert read_labels({"0": "O", "1": "Chemical", "2": "Disease"}).scheme == "bare"
    bioes = read_labels({"0": "O", "1": "B-Gene", "2": "I-Gene", "3": "E-Gene", "4": "S-Gene"})
    assert bioes.scheme == "BIOES" and bioes.types == ("Gene",)
    assert [bioes.iob2(x) for x in bioes.labels] == ["O", "B-Gene", "I-Gene", "I-Gene", "B-Gene"]
    with pytest.raises(ModelSpecError, match=r"numbers its labels \[0, 2\], not 0 to 1"):
        read_labels({"0": "O", "2": "B-X"})


def test_each_label_set_is_read_as_its_model_names_it(released_hub):
    assert check_tagger("biolab/bio-ner-tagger").types == ("Chemical", "Disease", "Gene")
    other = check_tagger("biolab/bert-ner-wordpiece")
    assert other.types == ("CHEMICAL", "DISEASE", "SPECIES") and other.scheme == "IOB2" and len(other.labels) == 7


def test_a_head_that_disagrees_with_its_id2label_is_refused_in_one_line(tmp_path, capsys):
    folder = tmp_path / "torn-tagger"
    folder.mkdir()
    rm.modernbert_tagger(folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["id2label"] = {"0": "O", "1": "B-Chemical", "2": "I-Chemical"}
    cfg["label2id"] = {v: int(k) for k, v in cfg["id2label"].items()}
    (folder / "config.json").write_text(json.dumps(cfg))
    capsys.readouterr()
    with pytest.raises(ModelSpecError) as err:
        check_tagger(str(folder))
    msg = str(err.value)
    assert "its classifier gives 7 labels but its id2label names 3 (O, B-Chemical, I-Chemical)" in msg, msg
    assert cli(["tag", "Aspirin helps.", "--model", str(folder)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.strip().splitlines()) == 1 and "gives 7 labels" in out.err, out.err


def test_a_pretrained_encoder_is_not_a_tagger_and_says_how_to_make_one(released_hub, capsys):
    with pytest.raises(NotATagger, match=r"a pretrained encoder \(BertForMaskedLM\), not a token-classification"):
        check_tagger("biolab/bert-wordpiece")
    assert cli(["tag", "Aspirin helps.", "--model", "biolab/bert-wordpiece"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "python -m backend evaluate --task ner --models biolab/bert-wordpiece" in err


def test_the_tag_command_prints_each_models_entities_and_labels(released_hub, capsys):
    argv = ["tag", TEXTS[0], "--model", "biolab/bio-ner-tagger", "--model", "biolab/bert-ner-wordpiece", "--json"]
    assert cli(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert [m["model"] for m in out] == list(rm.TAGGERS)
    for m in out:
        printed = [(e["start"], e["end"], e["type"]) for e in m["entities"]]
        assert printed == spans_of(predict_entities(m["model"], TEXTS[0]))
        assert all(TEXTS[0][e["start"] : e["end"]] == e["text"] for e in m["entities"])
    assert out[1]["types"] == ["CHEMICAL", "DISEASE", "SPECIES"]

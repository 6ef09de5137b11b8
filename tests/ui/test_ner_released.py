"""The NER tab with released models: a released tagger from the Hugging Face cache tags beside models fine-tuned
here (on released encoders typed into an evaluation), each with its own label set listed under its slot, one colour
per entity type in every slot and a legend; a checkpoint whose head disagrees with its labels is refused in one
line."""

from __future__ import annotations

import json
import re

import pytest

from app import main, ner_evaluations, ner_tab
from backend.__main__ import main as cli
from backend.evaluation.predict import predict_entities
from tests import released_models as rm

TEXT = "Patients with type 2 diabetes received metformin at Massachusetts General Hospital."


def _chip_colours(html: str) -> dict[str, str]:
    return {typ: colour for colour, typ in re.findall(r'background:(#[0-9a-f]{6})80">([^<]+)</span>', html)}


def test_cached_taggers_are_offered_in_the_slots_and_encoders_are_not(released_hub):
    choices = ner_tab.slot_choices()
    assert [v for _, v in choices] == sorted(rm.TAGGERS)  # no evaluation yet: the cache's taggers
    assert all(label.startswith(f"{v} (cached, ") for label, v in choices)
    assert ner_tab.default_slots([None] * ner_tab.SLOTS) == [*sorted(rm.TAGGERS), None, None]
    assert ner_tab.next_step() == ""  # something to tag with: no "what to do first"
    assert not any(c.startswith(rm.TAGGERS) for c in ner_tab.model_choices())  # a tagger fills no mask


@pytest.mark.slow  # fine-tunes three tiny released encoders on 16 sentences, one epoch each (seconds)
def test_a_released_tagger_tags_beside_models_fine_tuned_here_from_released_encoders(released_hub, capsys):
    out = ner_evaluations.evals_dir() / "released"
    argv = ["evaluate", "--models", "biolab/bert-wordpiece", "biolab/roberta-bytelevel", "--task", "ner"]
    argv += ["--seeds", "1", "--epochs", "1", "--max-train-examples", "16", "--max-eval-examples", "16"]
    argv += ["--out", str(out)]
    assert cli(argv) == 0, capsys.readouterr().err
    res = json.loads((out / "results.json").read_text())
    assert [(m["label"], m["n_ok"]) for m in res["models"]] == [("biolab/bert-wordpiece", 1),
                                                                ("biolab/roberta-bytelevel", 1)]  # fmt: skip
    cached = next(c for c in ner_tab.model_choices() if c.startswith("biolab/camembert-unigram (cached"))
    msg = ner_evaluations.run_evaluation([cached], "0", epochs=1, max_train=16)  # the tab's own button
    assert msg.startswith("✓"), msg
    lab = {m["model"]: m["path"] for m in ner_evaluations.finetuned()}
    assert sorted(lab) == ["biolab/bert-wordpiece", "biolab/camembert-unigram", "biolab/roberta-bytelevel"]

    slots = [lab["biolab/bert-wordpiece"], "biolab/bio-ner-tagger", "biolab/bert-ner-wordpiece",
             lab["biolab/camembert-unigram"]]  # fmt: skip
    (answer,) = ner_tab.tag_many([(TEXT, slots)])
    assert all(v is not None and "".join(s for s, _ in v) == TEXT for v in answer.values), answer.message
    assert answer.values[1] == predict_entities("biolab/bio-ner-tagger", TEXT)  # the released tagger's own spans
    assert [f"slot {i}: " in answer.message for i in (1, 2, 3, 4)] == [True] * 4 and "⚠" not in answer.message
    listed = [_chip_colours(h) for h in answer.labels]
    assert [sorted(c) for c in listed] == [["Chemical", "Disease"], ["Chemical", "Disease", "Gene"],
                                           ["CHEMICAL", "DISEASE", "SPECIES"], ["Chemical", "Disease"]]  # fmt: skip
    assert all(c[t] == answer.colours[t] for c in listed for t in c)  # one colour per type, in every slot
    assert answer.colours["Chemical"] == answer.colours["CHEMICAL"]  # one type to the eye (spans show CHEMICAL)
    assert len(set(answer.colours.values())) == 4  # chemical, disease, gene, species
    legend = _chip_colours(answer.legend)
    assert legend == {"CHEMICAL / Chemical": answer.colours["Chemical"], "DISEASE / Disease": answer.colours["Disease"],
                      "Gene": answer.colours["Gene"], "SPECIES": answer.colours["SPECIES"]}  # fmt: skip


def test_the_page_gives_every_slot_the_same_colours_and_a_legend(released_hub):
    demo = main.build_app(main.AppContext())
    fn = next(f for f in demo.fns.values() if f.api_name == "ner_tag")
    outs = fn.fn([TEXT, TEXT], *[[m, m] for m in [*rm.TAGGERS, None, None]])  # two users waiting: one batch
    spans, lines, legend, msgs = outs[:4], outs[4:8], outs[8], outs[9]
    colours = spans[0][0]["color_map"]
    assert set(colours) == {"Chemical", "Disease", "Gene", "CHEMICAL", "DISEASE", "SPECIES"}
    assert all(spans[i][r]["color_map"] == colours for i in range(4) for r in range(2))
    assert spans[0][0]["value"] == predict_entities(rm.TAGGERS[0], TEXT) and spans[2][0]["value"] is None
    assert "Gene" in lines[0][0] and "SPECIES" in lines[1][0] and lines[2][0] == ""
    assert set(_chip_colours(legend[0]).values()) == set(colours.values()) and colours["Disease"] == colours["DISEASE"]
    assert msgs[0] == msgs[1] and "slot 2: " in msgs[0]


def test_a_slot_refuses_a_checkpoint_whose_head_disagrees_with_its_labels(tmp_path, monkeypatch):
    monkeypatch.setenv("DETOUR_ALLOWED_ROOTS", str(tmp_path))
    folder = tmp_path / "torn-tagger"
    folder.mkdir()
    rm.bert_tagger(folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["id2label"] = {"0": "O", "1": "B-CHEMICAL"}
    cfg["label2id"] = {"O": 0, "B-CHEMICAL": 1}
    (folder / "config.json").write_text(json.dumps(cfg))
    (answer,) = ner_tab.tag_many([(TEXT, [None, str(folder)])])
    vals, msg = answer.values, answer.message
    assert vals == [None, None] and "\n" not in msg, msg
    assert msg.startswith("⚠ slot 2: model '") and "its classifier gives 7 labels but its id2label names 2" in msg
    assert answer.labels[1] == f"<div class='ner-labels'>{msg}</div>"  # said under the slot too

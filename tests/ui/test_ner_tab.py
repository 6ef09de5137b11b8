"""NER tab: the evaluation's per-epoch numbers reach the page while it trains, and tagged entities are whole words
with their type."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from app import ner_evaluations, ner_tab


@pytest.fixture(autouse=True)
def app_env(tmp_path, monkeypatch, tiny_bert_dir):
    monkeypatch.setenv("DETOUR_ALLOWED_ROOTS", str(tiny_bert_dir))
    monkeypatch.setenv("DETOUR_EVALS_DIR", str(tmp_path / "evals"))


def test_live_evaluation_shows_each_epochs_dev_f1_as_it_trains(tiny_bert_dir):
    seen = []
    for live, final in ner_evaluations.evaluate_live([str(tiny_bert_dir)], "0", epochs=2, max_train=16):
        seen.append((len(live.rows), final))
    assert seen[-1][1].startswith("✓"), seen[-1][1]
    assert [n for n, final in seen if final is None][-1] == 2  # both epochs were on the page before the end
    assert any(final is None and n == 1 for n, final in seen)  # the first one while the second still trained

    metrics = json.loads(next(Path(ner_evaluations.evals_dir()).glob("*/models/*/seed-0/metrics.json")).read_text())
    rows = live.rows
    assert [r[3] for r in rows] == ["1/2", "2/2"]
    assert [r[4] for r in rows] == [round(100 * h["dev_f1"], 2) for h in metrics["history"]]
    assert rows[-1][7] == metrics["best_epoch"]
    assert "epoch 2/2" in live.log() and "test f1" in live.log()
    shown = live.table()
    assert shown["headers"][:5] == ["run", "model", "seed", "epoch", "dev F1 %"] and "best epoch" in shown["headers"]
    assert all(any(row[j] is not None for row in shown["data"]) for j in range(len(shown["headers"])))


def test_stopping_the_page_stops_the_evaluation(tiny_bert_dir):
    gen = ner_evaluations.evaluate_live([str(tiny_bert_dir)], "0 1", epochs=3, max_train=16)
    live, final = next(gen)
    assert final is None
    gen.close()  # what gradio does when the page goes away or Stop is pressed
    results = next(Path(ner_evaluations.evals_dir()).glob("*/results.json"))
    for _ in range(600):  # the runner stops at its next progress event and writes its results
        res = json.loads(results.read_text())
        if res.get("status") == "stopped":
            break
        time.sleep(0.1)
    assert res["status"] == "stopped"


@pytest.mark.slow  # fine-tunes the bundled base until it has learnt two sentences (~1-2 min on 2 shared cores)
def test_entities_are_whole_words_with_their_type(tmp_path):
    """Words of several subwords ('diabetes' = 4, 'metformin' = 3 with the bundled tokenizer) are highlighted whole,
    a B- then I- entity is one span, and the span's label is the entity type."""
    from transformers import AutoTokenizer

    from backend.core.paths import BUNDLED_TOKENIZER_DIR
    from backend.evaluation.runner import evaluate_models

    tok = AutoTokenizer.from_pretrained(BUNDLED_TOKENIZER_DIR)
    assert all(len(tok.tokenize(f" {w}")) > 1 for w in ("diabetes", "metformin", "carcinoma"))
    sentences = [
        "Patients/O with/O type/B-Disease 2/I-Disease diabetes/I-Disease received/O metformin/B-Chemical ./O",
        "The/O patient/O received/O cisplatin/B-Chemical for/O ovarian/B-Disease carcinoma/I-Disease ./O",
    ]
    text = "\n\n".join("\n".join(w.replace("/", "\t") for w in s.split()) for s in sentences) + "\n"
    data = tmp_path / "ner"
    data.mkdir()
    for split in ("train", "dev", "test"):
        (data / f"{split}.tsv").write_text(text)
    evaluate_models(
        ["detour-tiny-en"], task="ner", data=str(data), seeds=[0], epochs=30, lr=1e-3, batch_size=2,
        out_dir=ner_evaluations.evals_dir() / "memo", progress=lambda ev: None,
    )  # fmt: skip
    model = str(ner_evaluations.evals_dir() / "memo" / "models" / "detour-tiny-en" / "seed-0")

    vals, msg = ner_tab.tag("Patients with type 2 diabetes received metformin.", [model])
    assert vals[0] == [
        ("Patients with ", None),
        ("type 2 diabetes", "Disease"),
        (" received ", None),
        ("metformin", "Chemical"),
        (".", None),
    ], msg
    vals, _ = ner_tab.tag("The patient received cisplatin for ovarian carcinoma.", [model])
    assert vals[0] == [
        ("The patient received ", None),
        ("cisplatin", "Chemical"),
        (" for ", None),
        ("ovarian carcinoma", "Disease"),
        (".", None),
    ]


def fake_finetuned(root: Path, model: str, finished_at: str, evaluation: str = "ev1") -> Path:
    """A folder ``list_finetuned`` lists as a fine-tuned NER model (no weights: only the listing is tested), in an
    evaluation whose results.json names it."""
    d = root / evaluation / "models" / model / "seed-0"
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")
    (d / "label_map.json").write_text(json.dumps({"task": "ner", "entity_types": ["Disease"]}))
    metrics = {"status": "ok", "model": model, "seed": 0, "test": {"f1": 0.5}, "finished_at": finished_at}
    (d / "metrics.json").write_text(json.dumps(metrics))
    evaluation = d.parent.parent.parent  # an evaluation is known by its results.json (backend.core.catalogue)
    res = {"task": "ner", "hparams": {}, "status": "done", "models": []}
    if (evaluation / "results.json").exists():
        res = json.loads((evaluation / "results.json").read_text())
    res["models"].append({"label": model, "runs": [{"seed": 0}], "n_ok": 1, "summary": {"f1": {"mean": 0.5}}})
    (evaluation / "results.json").write_text(json.dumps(res))
    return d


def test_empty_slots_take_the_fine_tuned_models_that_exist():
    """Issue 24 #8: a page built before any evaluation kept its slots empty although fine-tuned models existed."""
    from app import main

    demo = main.build_app(main.AppContext())
    slot = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "ner-model-0")
    assert slot.value is None  # built with no evaluation
    fn = next(f for f in demo.fns.values() if slot in f.outputs and {ev for _, ev in f.targets} >= {"select", "click"})
    a = fake_finetuned(Path(ner_evaluations.evals_dir()), "model-a", "2026-01-01T00:00:00")
    b = fake_finetuned(Path(ner_evaluations.evals_dir()), "model-b", "2026-01-02T00:00:00")
    values = [u["value"] for u in fn.fn(None, None, None, None)[: ner_tab.SLOTS]]
    assert values == [str(b), str(a), None, None]  # the newest two
    kept = [u["value"] for u in fn.fn(None, str(a), None, None)[: ner_tab.SLOTS]]
    assert kept == [None, str(a), None, None]  # a choice made is kept
    assert ner_tab.default_slots([None] * 4) == [str(b), str(a), None, None]


def test_punctuation_inside_a_word_stays_in_it():
    """Issue 24 #8: "Alzheimer's" was split into "Alzheimer", "'", "s" and its "'" and "s" tagged as entities."""
    from backend.evaluation import predict

    assert [w for w, _, _ in predict.split_words("Alzheimer's disease (IL-2), 3.5 mg.")] == [
        "Alzheimer's", "disease", "(", "IL-2", ")", ",", "3.5", "mg", ".",
    ]  # fmt: skip
    text = "Early Alzheimer's onset."
    words = predict.split_words(text)
    tags = ["B-Disease" if "Alzheimer" in w else "O" for w, _, _ in words]  # a model's answer, word by word
    assert predict._segments(text, words, tags) == [
        ("Early ", None),
        ("Alzheimer's", "Disease"),
        (" onset.", None),
    ]


def test_hub_models_keep_their_org_and_a_slot_error_names_the_slot_once(tiny_bert_dir):
    from app import fill_mask_tab

    choices, specs = ["someorg/tiny-ner (cached, 4M)", str(tiny_bert_dir)], ["someorg/tiny-ner", str(tiny_bert_dir)]
    assert ner_evaluations.eval_labels(choices, specs) == ["someorg/tiny-ner", Path(tiny_bert_dir).name]
    _, msg = ner_tab.tag("x", [None, None, None, "/etc"])
    assert "slot 4: '/etc' is outside" in msg and "model 4" not in msg and msg.count("slot") == 1, msg
    _, msg = fill_mask_tab.predict("The [MASK] hurts.", ["", "/etc"], [False, False])
    assert "slot 2: '/etc' is outside" in msg and "model 2" not in msg and msg.count("slot") == 1, msg


def test_no_fine_tuned_model_yet_says_what_to_do():
    assert ner_evaluations.finetuned_choices() == []
    assert "Run an evaluation" in ner_tab.next_step() and "python -m backend evaluate" in ner_tab.next_step()
    assert ner_tab.next_step([("m", "/p")]) == ""


def test_an_unreadable_evaluation_is_listed_with_why_and_refresh_follows_the_folder(tmp_path):
    """Every list of the tab comes from the catalogue: a results.json that is a JSON list, a torn one and a folder
    linking out of the evaluations folder are F1 rows saying why they cannot be read (the page still opens, the
    linked folder's model is not offered), and a folder made after the page was built appears on Refresh."""
    from app import main

    demo = main.build_app(main.AppContext())
    slot = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "ner-model-0")
    fn = next(f for f in demo.fns.values() if slot in f.outputs and {ev for _, ev in f.targets} >= {"select", "click"})
    root = Path(ner_evaluations.evals_dir())
    good = fake_finetuned(root, "model-a", "2026-01-01T00:00:00", evaluation="ev-good")
    for name, text in (("ev-list", "[]"), ("ev-torn", '{"task": "ner", "hpar')):
        (root / name).mkdir()
        (root / name / "results.json").write_text(text)
    outside = fake_finetuned(tmp_path / "elsewhere", "model-out", "2026-01-03T00:00:00", evaluation="ev-out")
    (root / "ev-linked").symlink_to(outside.parent.parent.parent)

    upd = fn.fn(None, None, None, None)
    choices = [v for _, v in upd[0]["choices"]]
    assert choices == [str(good)]  # the linked folder's model is not offered
    table = {row[0]: row for row in upd[ner_tab.SLOTS + 1]}
    assert table["ev-good"][2:5] == ["model-a", "f1", 50.0]
    assert table["ev-list"][-1].startswith("unreadable: ") and "holds a JSON list" in table["ev-list"][-1]
    assert "not valid JSON" in table["ev-torn"][-1]
    assert "links to" in table["ev-linked"][-1] and "outside" in table["ev-linked"][-1]

    new = fake_finetuned(root, "model-b", "2026-01-02T00:00:00", evaluation="ev-new")
    upd = fn.fn(None, None, None, None)  # Refresh
    assert [v for _, v in upd[0]["choices"]] == [str(new), str(good)]
    assert "ev-new" in {row[0] for row in upd[ner_tab.SLOTS + 1]}


def test_a_pretrained_model_named_in_a_slot_is_said_to_need_fine_tuning():
    """A bundled model or a run typed in a slot was refused as a path outside the allowed folders, with the advice
    to add it to DETOUR_ALLOWED_ROOTS; a listed fine-tuned model may be typed by its name. Now any model resolves
    as in every field; one that is not a token-classification model is said to need fine-tuning here first."""
    a = fake_finetuned(Path(ner_evaluations.evals_dir()), "model-a", "2026-01-01T00:00:00")
    (name,) = [n for n, p in ner_evaluations.finetuned_choices() if p == str(a)]
    vals, msg = ner_tab.tag("Some text.", ["detour-tiny-en", "detour-detour", name])
    assert vals[:2] == [None, None]
    assert "slot 1: model 'detour-tiny-en': a pretrained encoder (ModernBertForMaskedLM), not a token-classif" in msg
    assert "fine-tune it under Run an evaluation below" in msg, msg
    assert "slot 2: model 'detour-detour': no run named detour-detour" in msg, msg
    assert "outside the folders" not in msg and "DETOUR_ALLOWED_ROOTS" not in msg
    assert "slot 3: 'model-a" not in msg and "slot 3" in msg  # found by its name: its folder was tried (no weights)


@pytest.mark.parametrize(
    "seeds, epochs, max_train, said",
    [
        ("abc", 1, 10, "Seeds 'abc': give whole numbers"),  # was "invalid literal for int() with base 10"
        ("1.5", 1, 10, "Seeds 1.5: give a whole number"),
        ("0", None, 10, "Epochs is blank"),  # was a TypeError out of the handler
        ("0", float("nan"), 10, "Epochs nan: give a whole number"),  # was "cannot convert float NaN to integer"
        ("0", 1.5, 10, "Epochs 1.5: give a whole number"),  # was cut to 1 without a word
        ("0", 1, 0, "'max_train_examples': got 0"),  # was read as blank: every sentence
    ],
)
def test_the_evaluation_form_says_a_number_that_is_not_whole_in_words(seeds, epochs, max_train, said):
    msg = ner_evaluations.run_evaluation(["detour-tiny-en"], seeds, epochs, max_train)
    assert msg.startswith("⚠") and said in msg, msg

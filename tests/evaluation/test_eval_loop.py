"""The whole evaluation loop on tiny models: NER on a slice of ../shared/data/ncbi_disease learns beyond the
majority baseline, failures are recorded, reruns resume, the saved model serves the NER demo; classification
(single- and multi-label) through the CLI."""

from __future__ import annotations

import csv
import functools
import json
import random

import pytest
import torch

from backend.__main__ import main as cli
from backend.core.errors import ConfigError
from backend.evaluation.predict import list_finetuned, predict_entities
from backend.evaluation.runner import evaluate_models
from conftest import require_shared

# A random tiny model needs a larger lr than the paper's 5e-5 to learn anything in a few CPU epochs.
NER_HP = dict(epochs=5, lr=2e-3, max_len=64, max_train_examples=300, max_eval_examples=100)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def broken_model(tmp_path):
    """Resolves as a local model (config.json, a readable safetensors file: what is checked when it is named) but
    describes a model that cannot be built (hidden size 30 over 4 heads): every seed fails when it loads."""
    import torch
    from safetensors.torch import save_file

    d = tmp_path / "broken"
    d.mkdir()
    (d / "config.json").write_text('{"model_type": "bert", "hidden_size": 30, "num_attention_heads": 4}')
    save_file({"unrelated": torch.zeros(1)}, str(d / "model.safetensors"))
    return d


def untrained_test_f1(model_dir, data_dir) -> float:
    from backend.engine.models import quiet_transformers, resolve_model
    from backend.evaluation.finetune import resolve_hparams
    from backend.evaluation.runner import _build_task, _subsample_data, load_task_data

    hp = resolve_hparams("ner", **NER_HP)
    data = _subsample_data(load_task_data("ner", str(data_dir)), hp["max_train_examples"], hp["max_eval_examples"])
    src = resolve_model(str(model_dir))
    task = _build_task("ner", data, src, "untrained", hp, False)
    torch.manual_seed(0)
    with quiet_transformers():
        model = task.load_model(src)
    return task.evaluate(model, "test", 64, "cpu")["f1"]


@pytest.mark.slow
def test_ner_loop_learns_records_failures_resumes_and_predicts(tmp_path, tiny_modernbert_dir):
    ncbi = require_shared("ncbi_disease")
    broken = broken_model(tmp_path)
    out = tmp_path / "evals" / "run1"
    events = []
    r = evaluate_models(
        [str(tiny_modernbert_dir), str(broken)],
        "ner",
        str(ncbi),
        seeds=[0],
        out_dir=out,
        labels=["tiny", "broken"],
        progress=events.append,
        **NER_HP,
    )
    tiny, bad = r["models"]
    [run] = tiny["runs"]
    assert run["status"] == "ok", run
    # Majority baseline (all O) has entity F1 = 0; an untrained model is ~0 too. Trained: ~0.25-0.30.
    baseline = untrained_test_f1(tiny_modernbert_dir, ncbi)
    assert baseline < 0.05
    assert run["test"]["f1"] > 0.10, run["test"]
    assert run["test"]["f1"] > baseline + 0.08
    assert run["test"]["token_accuracy"] > 0.85
    assert r["data_sizes"] == {"train": 300, "dev": 100, "test": 100}
    assert r["labels"] == ["O", "B-Disease", "I-Disease"]

    # the failed model is reported, not dropped
    assert r["status"] == "complete_with_failures"
    assert bad["runs"][0]["status"] == "failed"
    assert bad["runs"][0]["error"].startswith("ModelSpecError: model ") and "broken" in bad["runs"][0]["error"]
    assert r["failures"] == [{"model": "broken", "seed": 0, "error": bad["runs"][0]["error"]}]
    md = (out / "results.md").read_text()
    assert "## Failed runs" in md and "| tiny | 1/1 |" in md
    assert json.loads((out / "results.json").read_text())["models"][0]["summary"]["f1"]["n"] == 1
    assert r["comparisons"][0]["n"] == 0

    # the fine-tuned model is kept for the demo
    seed_dir = out / "models" / "tiny" / "seed-0"
    for f in ("config.json", "model.safetensors", "tokenizer.json", "label_map.json", "metrics.json"):
        assert (seed_dir / f).exists(), f
    metrics = json.loads((seed_dir / "metrics.json").read_text())
    dev_curve = [h["dev_f1"] for h in metrics["history"]]
    assert dev_curve[metrics["best_epoch"] - 1] == max(dev_curve) == metrics["dev"]["f1"]
    assert json.loads((seed_dir / "label_map.json").read_text())["prefix_space"] is True

    # progress: epochs, an ETA once something was measured, monotone fraction, a final event
    kinds = [e["event"] for e in events]
    assert kinds.count("epoch") == 5 and "run_failed" in kinds and kinds[-1] == "done"
    assert any(e["eta_s"] is not None for e in events if e["event"] == "epoch")
    fr = [e["fraction"] for e in events]
    assert fr == sorted(fr) and fr[-1] == 1.0
    assert all("ETA" in e["message"] for e in events)

    # rerun: the finished seed is reused, not retrained; different settings are refused
    events.clear()
    tiny_again = functools.partial(evaluate_models, [str(tiny_modernbert_dir)], "ner", str(ncbi), seeds=[0],
                                   out_dir=out, labels=["tiny"])  # fmt: skip
    r2 = tiny_again(progress=events.append, **NER_HP)
    assert [e["event"] for e in events] == ["run_resumed", "done"]
    assert r2["models"][0]["runs"][0]["resumed"] is True
    assert r2["models"][0]["runs"][0]["test"] == run["test"]
    with pytest.raises(ConfigError, match="different lr"):
        tiny_again(**{**NER_HP, "lr": 1e-3})

    # the NER demo's functions
    [item] = list_finetuned(tmp_path / "evals")
    assert item["path"] == str(seed_dir) and item["model"] == "tiny" and item["seed"] == 0
    assert item["f1"] == pytest.approx(run["test"]["f1"]) and item["labels"] == ["Disease"]
    assert list_finetuned(out) == [item]
    text = "Germline mutations in BRCA1 cause breast cancer, and APC2 is a homologue of adenomatous polyposis coli."
    segs = predict_entities(item["path"], text)
    assert "".join(s for s, _ in segs) == text
    assert {lab for _, lab in segs} <= {None, "Disease"}
    assert predict_entities(item["path"], "") == []


def _cls_rows(n: int, seed: int, multi: bool = False):
    r = random.Random(seed)
    neutral = "the a film plot actor scene story music was is and of with it this movie".split()
    cues = {"pos": ["excellent", "wonderful", "great"], "neg": ["terrible", "awful", "boring"]}
    rows = []
    for _ in range(n):
        labs = sorted(r.sample(["pos", "neg"], r.randint(1, 2))) if multi else [r.choice(["pos", "neg"])]
        words = [r.choice(neutral) for _ in range(r.randint(5, 12))]
        for lab in labs:
            words.insert(r.randint(0, len(words)), r.choice(cues[lab]))
        rows.append((" ".join(words), "|".join(labs)))
    return rows


def _write_cls(folder, multi=False):
    folder.mkdir()
    for split, n, seed in (("train", 160, 1), ("dev", 40, 2), ("test", 40, 3)):
        with open(folder / f"{split}.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["review", "sentiment"])
            w.writerows(_cls_rows(n, seed, multi))
    return folder


def test_classification_cli_learns_and_reports_failed_model(tmp_path, tiny_modernbert_dir, capsys):
    data = _write_cls(tmp_path / "cls")
    out = tmp_path / "out"
    rc = cli([
        "evaluate", "--models", str(tiny_modernbert_dir), str(broken_model(tmp_path)), "--labels", "tiny", "broken",
        "--task", "classification", "--data", str(data), "--text-column", "review", "--label-column", "sentiment",
        "--seeds", "1", "--out", str(out), "--epochs", "4", "--lr", "2e-3", "--max-len", "32",
    ])  # fmt: skip
    printed = capsys.readouterr().out
    assert rc == 1  # a failed run makes the exit status non-zero
    assert "ETA" in printed and "| Model | Seeds ok | Macro-F1 |" in printed and "## Failed runs" in printed
    r = json.loads((out / "results.json").read_text())
    assert r["primary_metric"] == "macro_f1" and not r["multi_label"]
    run = r["models"][0]["runs"][0]
    assert run["status"] == "ok"
    assert run["test"]["macro_f1"] > 0.75  # chance ~0.5; the cue words make it learnable (observed ~1.0)
    assert json.loads((out / "models" / "tiny" / "seed-0" / "label_map.json").read_text())["labels"] == ["neg", "pos"]


def test_multilabel_classification_runs(tmp_path, tiny_bert_dir):
    data = _write_cls(tmp_path / "ml", multi=True)
    r = evaluate_models(
        [str(tiny_bert_dir)],
        "classification",
        str(data),
        seeds=[3],
        out_dir=tmp_path / "o",
        labels=["bert"],
        text_column="review",
        label_column="sentiment",
        label_separator="|",
        epochs=1,
        max_len=32,
        keep_models=False,
        progress=lambda e: None,
    )
    assert r["multi_label"] and r["labels"] == ["neg", "pos"]
    run = r["models"][0]["runs"][0]
    assert run["status"] == "ok" and 0.0 <= run["test"]["macro_f1"] <= 1.0
    seed_dir = tmp_path / "o" / "models" / "bert" / "seed-3"
    assert (seed_dir / "metrics.json").exists() and not (seed_dir / "config.json").exists()  # keep_models=False

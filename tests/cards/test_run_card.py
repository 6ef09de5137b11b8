"""A finished run's final/ carries a model card in the Hub's format, true to the run directory's files: the base
model, the pipeline, the corpus and its fingerprint, the licence inherited or said to be unknown, the recipe's
timeline with tokens and held-out losses per phase, precision, machine and wall time. The card lies beside the
seal: writing it, and adding evaluation results later, keeps final/ verifiable and touches nothing but README.md."""

from __future__ import annotations

import json
import shutil

import pytest
from huggingface_hub import EvalResult, ModelCard

from backend.cards.lineage import base_of
from backend.cards.results import task_result
from backend.cards.run_card import build_run_card, write_run_card
from backend.engine import checkpoint, model_files
from backend.engine.rundir import read_metrics, read_status


@pytest.fixture
def run(detour_run_dir, tmp_path):
    """A copy of the finished tiny clm_detour run all tests share (its card rewritten here, never the shared one's)."""
    d = tmp_path / "runs" / detour_run_dir.name
    shutil.copytree(detour_run_dir, d)
    return d


def test_a_finished_run_has_a_card_the_hub_reads_and_it_names_its_base(detour_run_dir, tiny_modernbert_dir):
    card = ModelCard.load(detour_run_dir / "final" / "README.md")  # written when the run finished
    d = card.data
    assert d.base_model == tiny_modernbert_dir.name and d.library_name == "transformers"
    assert d.pipeline_tag == "fill-mask" and {"detour-lab", "modernbert", "recipe-clm_detour"} <= set(d.tags)
    info = json.loads((detour_run_dir / "data_info.json").read_text())
    assert d.corpus == {"name": "demo", "fingerprint": info["fingerprint"], "documents": info["documents"],
                        "train_tokens": info["train_tokens"], "heldout_tokens": info["heldout_tokens"]}  # fmt: skip
    assert d.license == "unknown" and "has no model card here, so its licence is not known" in card.text
    assert d.eval_results is None and "None yet." in card.text
    checkpoint.verify(detour_run_dir / "final")  # the seal holds with the card beside it
    assert model_files.check(detour_run_dir / "final", "run") is None


def test_the_body_is_the_run_directorys_own_numbers(run):
    text = build_run_card(run).text
    rows = read_metrics(run)
    st = read_status(run)
    evals = [r for r in rows if r["type"] == "eval"]
    main_end = next(r for r in evals if r["step"] == 4)  # the CLM phase's last held-out evaluation
    assert (f"| main | CLM | causal | 4 | 1,024 | {main_end['eval_mlm_loss']:.3f} | "
            f"{main_end['eval_clm_loss']:.3f} |") in text  # fmt: skip
    assert (f"| decay | MLM 15% | bidirectional | 4 | 1,024 | {evals[-1]['eval_mlm_loss']:.3f} | "
            f"{evals[-1]['eval_clm_loss']:.3f} |") in text  # fmt: skip
    assert f"{evals[0]['eval_mlm_loss']:.3f} / {evals[0]['eval_clm_loss']:.3f} at the start" in text
    assert f"| trained | {st['tokens_seen']:,} tokens in {st['step']} optimizer steps" in text
    assert "| precision | fp32 (set in the config) |" in text
    machine = next(r for r in rows if r["type"] == "machine")
    assert machine["cpu"] and f"| machine | {machine['cpu']}, cpu, {machine['threads']} thread(s)" in text
    wall = round(st["finished_at"] - st["started_at"])
    assert f"| wall time | {wall // 60} min {wall % 60:02d} s (" in text and "python -m backend train --run-dir" in text


def test_results_added_later_rewrite_only_the_card_and_keep_the_seal(run):
    final = run / "final"
    sealed = {p.name: p.read_bytes() for p in final.iterdir() if p.name != "README.md"}
    first = task_result("evaluation:e1", "ner", "/data/ncbi_disease", "abc123", "f1", 61.25, [58.0, 64.5], 3)
    write_run_card(run, "evaluation:e1", [first])
    write_run_card(run, "suite:bio/s1", [task_result("suite:bio/s1", "ner", "org/bc2gm", None, "f1", 40.0, None, 1)])
    again = task_result("evaluation:e1", "ner", "/data/ncbi_disease", "abc123", "f1", 62.5, [60.0, 65.0], 3)
    write_run_card(run, "evaluation:e1", [again])  # the same evaluation finishing again replaces its own result
    card = ModelCard.load(final / "README.md")
    got = {r.metric_config: r for r in card.data.eval_results}
    assert set(got) == {"evaluation:e1", "suite:bio/s1"} and len(card.data.eval_results) == 2
    e1 = got["evaluation:e1"]
    assert isinstance(e1, EvalResult) and e1.metric_value == 62.5 and e1.dataset_name == "ncbi_disease"
    assert (
        e1.metric_args == {"seeds": 3, "ci95_low": 60.0, "ci95_high": 65.0}
        and "95% CI [60.00, 65.00]" in e1.metric_name
    )
    assert got["suite:bio/s1"].dataset_type == "org/bc2gm" and card.data.to_dict()["model-index"][0]["name"] == run.name
    assert (
        "| `evaluation:e1` | Named entity recognition | ncbi_disease | F1 | 62.50 | [60.00, 65.00] | 3 |" in card.text
    )
    assert {p.name: p.read_bytes() for p in final.iterdir() if p.name != "README.md"} == sealed
    checkpoint.verify(final)
    assert "README.md" not in json.loads((final / "manifest.json").read_text())


def test_a_seal_never_covers_the_card(tmp_path):
    """Sealing a folder that already holds a card leaves it out, so rewriting it never breaks the seal."""
    d = tmp_path / "m"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"x" * 10)
    (d / "README.md").write_text("---\nlicense: mit\n---\n# m\n")
    checkpoint.seal(d, "sealed\n")
    (d / "README.md").write_text("---\nlicense: mit\n---\n# m, with results\n")
    checkpoint.verify(d)
    assert list(json.loads((d / "manifest.json").read_text())) == ["model.safetensors"]


def test_the_licence_is_inherited_from_the_base_models_card_or_said_unknown(tmp_path, tiny_bert_dir):
    bundled = base_of("detour-tiny-en")
    assert (bundled.name, bundled.license, bundled.extra.get("language")) == ("detour-tiny-en", "cc0-1.0", "en")
    folder = tmp_path / "licensed"
    shutil.copytree(tiny_bert_dir, folder)
    (folder / "README.md").write_text("---\nlicense: apache-2.0\n---\n# a base\n")
    assert (base_of(str(folder)).name, base_of(str(folder)).license) == ("licensed", "apache-2.0")
    scratch = base_of("from_scratch")
    assert scratch.name is None and scratch.license == "unknown" and "from scratch" in scratch.license_why
    gone = base_of(str(tmp_path / "deleted-since"))
    assert gone.license == "unknown" and "cannot be read here" in gone.license_why


def test_a_cached_hub_base_is_named_by_its_hub_id_with_its_cards_licence(tmp_path, monkeypatch):
    from backend.core.paths import BUNDLED_MODELS_DIR, DEFAULT_MODEL
    from tests.ui.test_cached_models import put_in_hub_cache

    src = BUNDLED_MODELS_DIR / DEFAULT_MODEL
    files = {p.name: p.read_bytes() for p in src.iterdir() if p.suffix in (".json", ".safetensors")}
    files["README.md"] = b"---\nlicense: apache-2.0\nlanguage: en\n---\n# a released encoder\n"
    put_in_hub_cache(tmp_path / "hub", "biolab/released-encoder", files)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    base = base_of("biolab/released-encoder")
    assert (base.name, base.kind, base.license) == ("biolab/released-encoder", "hub", "apache-2.0")
    assert "https://huggingface.co/biolab/released-encoder" in base.where and base.extra["language"] == "en"

"""Issue 31 section 1: a task suite. A suite file it has never seen (NER and classification, one label or many)
is checked key by key before anything trains; the shipped demo suite runs end to end through the CLI and writes
the models x tasks table, the aggregate panel and the verdict."""

from __future__ import annotations

import json

import pytest

from backend.__main__ import main as cli
from backend.core.paths import REPO_ROOT
from backend.evaluation.stats import paired_t_power, seeds_needed
from backend.evaluation.suite import SuiteError, list_suites, load_suite
from conftest import require_shared

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def write(tmp_path, text: str, name: str = "s.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def cls_folder(tmp_path):
    d = tmp_path / "reviews"
    d.mkdir()
    for split in ("train", "dev", "test"):
        (d / f"{split}.csv").write_text("review,tags\nfine film,pos|plot\nawful film,neg\ngreat plot,pos|plot\n")
    return d


def test_a_suite_never_seen_loads_with_defaults_and_task_settings(tmp_path):
    cls = cls_folder(tmp_path)
    p = write(
        tmp_path,
        f"""
defaults: {{seeds: 2, epochs: 3, max_len: 64}}
tasks:
  - {{name: demo, task: ner, data: {REPO_ROOT / "assets/demo/ner"}, metric: macro_f1}}
  - {{name: reviews, task: classification, data: reviews, text_column: review, label_column: tags,
      label_separator: "|", epochs: 1, seeds: [3, 4]}}
""",
    )
    s = load_suite(p)
    assert s["name"] == "s"
    ner, rev = s["tasks"]
    assert ner["hparams"]["metric"] == "macro_f1" and ner["hparams"]["epochs"] == 3 and ner["seeds"] == [0, 1]
    assert rev["data"] == str(cls) and rev["hparams"]["epochs"] == 1 and rev["seeds"] == [3, 4]
    assert rev["hparams"]["metric"] == "macro_f1" and rev["columns"]["label_separator"] == "|"


@pytest.mark.parametrize(
    "text, error",
    [
        ("tasks: []", r"'tasks' must be a non-empty list"),
        ("task: [{name: a}]", r"unknown key 'task'; known: name, description, defaults, tasks"),
        ("defaults: {epoch: 2}\ntasks: [{name: a, task: ner, data: x}]", r"defaults: unknown key 'epoch'"),
        ("tasks: [{name: a, task: pos, data: x}]", r"tasks\[0\] \(a\): 'task' must be one of ner, classification"),
        ("tasks: [{name: a, task: ner, data: /nowhere/x}]", r"tasks\[0\] \(a\): data '/nowhere/x' not found"),
        ("tasks: [{name: 'a b', task: ner, data: x}]", r"'name' must be a short folder name"),
        ("tasks: [{name: a, task: ner, data: DEMO, metric: accuracy}]", r"tasks\[0\] \(a\): .*metric.*f1"),
        ("tasks: [{name: a, task: ner, data: DEMO}, {name: a, task: ner, data: DEMO}]", r"'a' is used twice"),
        ("tasks: [{name: a, task: ner, data: DEMO, lr: -1}]", r"tasks\[0\] \(a\): config key 'lr'"),
        ("tasks:\n  - {name: a, task: ner, data: DEMO}\ntasks: []", r"not valid YAML"),
    ],
)
def test_bad_suites_get_one_specific_line(tmp_path, text, error):
    p = write(tmp_path, text.replace("DEMO", str(REPO_ROOT / "assets/demo/ner")))
    with pytest.raises(SuiteError, match=error) as e:
        load_suite(p)
    assert "\n" not in str(e.value) and str(p) in str(e.value)


def test_shipped_suites_load():
    names = {p.name for p in list_suites()}
    assert {"bio-ner.yaml", "demo.yaml"} <= names
    require_shared("ncbi_disease")
    require_shared("anatem")
    require_shared("bc2gm")
    bio = load_suite(REPO_ROOT / "configs/suites/bio-ner.yaml")
    assert [t["name"] for t in bio["tasks"]] == ["ncbi_disease", "anatem", "bc2gm"]
    assert all(t["hparams"]["metric"] == "f1" and t["seeds"] == [0, 1, 2] for t in bio["tasks"])


def test_seeds_needed_is_the_smallest_n_with_the_power():
    for m, s in [(7.9, 18.6), (3.0, 0.5), (1.0, 1.0)]:
        n = seeds_needed(m, s)
        assert paired_t_power(n, m / s) >= 0.8 and (n == 2 or paired_t_power(n - 1, m / s) < 0.8)


@pytest.mark.slow
def test_demo_suite_runs_through_the_cli(tmp_path, tiny_modernbert_dir, tiny_bert_dir, capsys):
    require_shared("ncbi_disease")
    out = tmp_path / "suite"
    args = ["evaluate", "--suite", str(REPO_ROOT / "configs/suites/demo.yaml"), "--models", str(tiny_bert_dir)]
    args += [str(tiny_modernbert_dir), "--labels", "bert", "modernbert", "--out", str(out), "--no-keep-models"]
    args += ["--max-train-examples", "24", "--max-eval-examples", "16"]
    assert cli(args) == 0
    printed = capsys.readouterr().out
    assert "[task 2/2 ncbi-slice]" in printed and "suite " in printed and "ETA" in printed  # progress lines
    rep = json.loads((out / "suite.json").read_text())
    assert [t["name"] for t in rep["tasks"]] == ["demo-ner", "ncbi-slice"]
    assert all(t["data_sizes"]["train"] == 24 for t in rep["tasks"])  # the command line's cap, every task
    [c] = rep["comparisons"]
    assert (c["a"], c["b"]) == ("modernbert", "bert") and set(c["per_task"]) == {"demo-ner", "ncbi-slice"}
    assert all(c["aggregate"][k]["ci95"] for k in ("mean_delta", "iqm_a", "poi"))
    assert c["verdict"] in ("modernbert better", "bert better", "inconclusive")
    md = (out / "suite.md").read_text()
    assert "| Model | demo-ner (F1) | ncbi-slice (F1) | Average |" in md and "**" in md
    assert "Verdict over the suite" in md and "P(modernbert > bert)" in md and "sha256" in md
    assert (out / "suite.html").exists() and (out / "figures" / "deltas-1.html").exists()
    # each task is an ordinary evaluation folder: a rerun resumes it (nothing trains again)
    assert (out / "tasks" / "demo-ner" / "results.json").exists()
    assert cli(args) == 0
    assert "already done" in capsys.readouterr().out


def test_the_stability_table_says_seeds_as_seeds_and_none_as_none(tmp_path):
    """'0' meant none in the failed and diverged columns and seed 0 in the constant-answer column ('0 | 0 | 0, 2, 3'
    read like counts)."""
    from backend.evaluation.suite_report import write_suite_report

    out = tmp_path / "suite"
    (out / "tasks" / "t1").mkdir(parents=True)
    runs = [{"seed": s, "status": "ok", "test": {"f1": 0.5, "constant": "O" if s in (0, 2, 3) else None}}
            for s in range(4)] + [{"seed": 4, "status": "failed", "error": "non-finite loss at step 3"}]  # fmt: skip
    res = {"primary_metric": "f1", "task": "ner", "models": [{"label": "A", "path": "/m/A", "runs": runs}]}
    (out / "tasks" / "t1" / "results.json").write_text(json.dumps(res))
    spec = {"name": "s", "path": str(tmp_path / "s.yaml"), "tasks": [{"name": "t1"}]}
    write_suite_report(out, spec, png=False)
    row = next(ln for ln in (out / "suite.md").read_text().splitlines() if ln.startswith("| A | t1 |"))
    assert row.endswith("| none | seed 4 | seeds 0, 2, 3 |"), row

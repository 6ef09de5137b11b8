"""Every command that writes an output, pointed at what it must not take: a user's file, a user's folder, a folder
(or file) of another kind of artifact, and a link to one of its own kind elsewhere. Each is refused with one line
(exit 2) and every file under the test folder keeps its bytes: nothing is overwritten, nothing is added."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from backend.__main__ import main
from backend.core import atomic, catalogue, paths
from backend.engine import rundir
from backend.engine.config import default_config
from tests.catalogue.roots import roots  # noqa: F401  (autouse: each test's own sweeps/evals/reports)


def suite_file(root: Path, name: str) -> Path:
    p = root / f"{name}.yaml"
    p.write_text(f"name: {name}\ndefaults:\n  seeds: 1\n  epochs: 1\ntasks:\n  - name: t1\n    task: ner\n"
                 f"    data: {paths.DEMO_NER_DIR}\n")  # fmt: skip
    return p


# ------------------------------------------------------------------------------------------------ what is there


def make_kind(kind: str, d: Path) -> Path:
    """A folder (or, for cka, a file) that an artifact of ``kind`` wrote."""
    if kind == "cka":
        d.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_json(d, {"kind": "weight_change", "layers": []})
        return d
    d.mkdir(parents=True)
    if kind == "run":
        atomic.write_yaml(d / "config.yaml", {**default_config(), "name": d.name})
        rundir.write_status(d, state="done")
    elif kind == "sweep":
        from backend.sweeps.sweep import plan_sweep, write_manifest

        write_manifest(d, plan_sweep(None, [], ["train.lr=1e-4,2e-4"], 1, name=d.name))
        (d / "report.md").write_text("# Sweep\n")
    elif kind == "evaluation":
        atomic.write_json(d / "results.json", {"models": [], "task": "ner"})
    elif kind == "suite":
        atomic.write_json(d / "suite.json", {"suite": "first"})
        (d / "suite.md").write_text("# Suite first\n")
    elif kind == "report":
        atomic.write_json(d / "settings.json", {"preset": "quick"})
        (d / "report.md").write_text("# Replication\n")
    elif kind == "export":
        (d / "README.md").write_text("---\nlicense: unknown\n---\n# a model\n")
        atomic.write_json(d / "config.json", {"model_type": "modernbert"})
    return d


def make_target(target: str, own: str, tmp: Path) -> Path:
    """The path a command is pointed at: ``file``, ``foreign`` (a user's folder), ``link`` (to an artifact of the
    command's own kind, outside), or ``kind:X`` (an artifact of kind X)."""
    if target == "file":
        (tmp / "notes.txt").write_text("my notes\n")
        return tmp / "notes.txt"
    if target == "foreign":
        (tmp / "mine").mkdir()
        (tmp / "mine" / "report.md").write_text("my own report\n")
        return tmp / "mine"
    if target == "link":
        real = make_kind(own, tmp / "elsewhere" / ("own.json" if own == "cka" else "own"))
        (tmp / "link").symlink_to(real)
        return tmp / "link"
    if target.startswith("under:"):  # a new path inside an artifact: ``under:KIND:SUB`` -> ARTIFACT/SUB/new
        _, kind, sub = target.split(":")
        d = make_kind(kind, tmp / "artifacts" / kind)
        if kind == "suite":  # a suite's task folder holds the task's evaluation
            make_kind("evaluation", d / "tasks" / "t1")
        (d / sub).mkdir(parents=True, exist_ok=True)
        return d / sub / ("new.json" if own == "cka" else "new")
    if target.startswith("inside:"):  # a file that an artifact of another kind holds
        kind = target.split(":")[1]
        d = make_kind(kind, tmp / "artifacts" / kind)
        return d / {"run": "config.yaml", "evaluation": "results.json", "sweep": "sweep.json"}[kind]
    kind = target.split(":")[1]
    return make_kind(kind, tmp / "artifacts" / (f"{kind}.json" if kind == "cka" else kind))


COMMANDS = {  # name -> (its kind, argv with OUT)
    "cka --out": ("cka", ["cka", "--a", "detour-tiny-en", "--b", "detour-tiny-en", "--weights-only", "--out", "OUT"]),
    "sweep --out": ("sweep", ["sweep", "--grid", "train.lr=1e-4,2e-4", "--out", "OUT"]),
    "sweep --report": ("sweep", ["sweep", "--report", "OUT"]),
    "sweep --resume": ("sweep", ["sweep", "--resume", "OUT"]),
    "evaluate --out": ("evaluation", ["evaluate", "--models", "detour-tiny-en", "--seeds", "1", "--epochs", "1",
                                      "--max-train-examples", "4", "--out", "OUT"]),  # fmt: skip
    "evaluate --suite --out": ("suite", ["evaluate", "--suite", "SUITE", "--models", "detour-tiny-en", "--out", "OUT"]),
    "replicate --out": ("report", ["replicate", "--preset", "quick", "--plan", "--out", "OUT"]),
    "replicate --budgets --out": ("report", ["replicate", "--budgets", "8192", "--suite",
                                             str(paths.REPO_ROOT / "configs/suites/bio-ner.yaml"), "--plan", "--out",
                                             "OUT"]),
    "replicate --study hybrid-splits --out": (
        "report", ["replicate", "--study", "hybrid-splits", "--preset", "quick", "--plan", "--out", "OUT"]),
    "export --out": ("export", ["export", "some-run", "--out", "OUT"]),
}  # fmt: skip
OTHER_KINDS = ("run", "sweep", "evaluation", "suite", "report", "cka")
UNDER = (  # a new output inside another artifact: a suite's task folder or tasks/, another sweep's runs/, a study
    ("cka --out", "under:suite:tasks/t1"), ("sweep --out", "under:suite:tasks"), ("sweep --out", "under:sweep:runs"),
    ("evaluate --out", "under:sweep:runs"), ("replicate --budgets --out", "under:suite:tasks"),
    ("evaluate --suite --out", "under:report:x"), ("replicate --study hybrid-splits --out", "under:evaluation:x"),
)  # fmt: skip


def cases():
    for cmd, (own, _) in COMMANDS.items():
        for target in ("file", "foreign", "link", *(f"kind:{k}" for k in OTHER_KINDS if k != own)):
            if own == "cka" and target == "foreign":
                continue  # a folder as a file output: refused as a folder (kind:run and kind:sweep cover it)
            yield cmd, target
    for kind in ("run", "evaluation", "sweep"):
        yield "cka --out", f"inside:{kind}"  # the run's config.yaml, an evaluation's results.json, a sweep.json
    yield "evaluate --suite --out", "kind:suite"  # a suite of another name ('first')
    yield from UNDER
    yield "replicate --study hybrid-splits --out", "kind:report"  # a replication, not the hybrid study


def snapshot(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "link->" + os.readlink(p)
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[rel] = "dir"
    return out


def attempt(cmd: str, target: str, tmp: Path, capsys) -> tuple[int, str, dict, dict]:
    """Run ``cmd`` onto ``target``; returns (exit code, its stderr, files before, files after)."""
    own, argv = COMMANDS[cmd]
    area = tmp / "area"
    area.mkdir()
    out = make_target(target, own, area)
    suite = suite_file(tmp, "other")
    before = snapshot(area)
    capsys.readouterr()
    rc = main([str(out) if a == "OUT" else str(suite) if a == "SUITE" else a for a in argv])
    return rc, capsys.readouterr().err, before, snapshot(area)


@pytest.mark.parametrize("cmd, target", list(cases()))
def test_an_output_never_takes_what_is_not_its_own(cmd, target, tmp_path, capsys):
    rc, err, before, after = attempt(cmd, target, tmp_path, capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2, (rc, err)
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    assert after == before  # not one file replaced, removed or added
    own = COMMANDS[cmd][0]
    for marker in ("a free one: --out ", "e.g. --out "):  # a path offered instead is really free for this command
        if marker in err:
            alt = Path(err.split(marker)[1].split(")")[0].strip())
            assert not alt.exists()
            check = catalogue.check_out_file if own == "cka" else catalogue.check_out_folder
            check(alt, own)


@pytest.mark.parametrize("cmd, target", UNDER)
def test_a_new_output_inside_another_artifact_is_refused_for_that(cmd, target, tmp_path, capsys):
    """Not for another reason met first (a missing suite, a pair recipe): for being inside the artifact."""
    rc, err, before, after = attempt(cmd, target, tmp_path, capsys)
    _, kind, sub = target.split(":")
    kind = "evaluation" if sub.startswith("tasks/") else kind  # a suite's task folder is the task's evaluation
    assert rc == 2 and f"is inside {'an' if kind[0] in 'aeiou' else 'a'} {kind} " in err, err
    assert after == before


def test_a_refusal_names_a_free_alternative(tmp_path, capsys):
    rc, err, _, _ = attempt("evaluate --out", "foreign", tmp_path, capsys)
    alt = Path(err.split("a free one: --out ")[1].rstrip(")\n"))
    assert rc == 2 and not alt.exists()
    catalogue.check_out_folder(alt, "evaluation")  # the alternative is really free

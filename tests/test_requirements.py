"""The requirements files cannot drift from the code: every module of backend/ and app/ imports in this environment,
every third-party import in backend/, app/, bench/ and tests/ (lazy ones inside functions included) is pinned in the
requirements file that installs it, and every pin is exact.

Which file may provide what: backend/ and app/ run from requirements.txt alone (the Dockerfile installs only that);
bench/ and tests/ also get requirements-dev.txt; requirements-gpu.txt (flash-attn) is never installed on CPU, so code
may use it only behind a guard (inside a function, or a try that catches ImportError)."""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.metadata
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RUNTIME, DEV, GPU = "requirements.txt", "requirements-dev.txt", "requirements-gpu.txt"
SCANNED = {"backend": (RUNTIME,), "app": (RUNTIME,), "bench": (RUNTIME, DEV), "tests": (RUNTIME, DEV)}
FIRST_PARTY = {"backend", "app", "bench", "tests", "conftest"}
# scripts the tests put on sys.path by folder (bench/bench_train.py, tests/sweeps/slurm_cluster.py): this repository's
LOCAL_SCRIPTS = {p.stem for d in ("bench", "tests") for p in (REPO / d).rglob("*.py")}
REQ_LINE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?P<op>==|>=)\s*(?P<version>[^\s;#]+)\s*$")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_requirements(fname: str) -> dict[str, tuple[int, str]]:
    """{normalized name: (line number, line)} for the requirement lines of one file (``-r`` lines are not followed)."""
    reqs = {}
    for i, raw in enumerate((REPO / fname).read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-r "):
            continue
        name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)
        assert name, f"{fname}:{i}: cannot read a package name in {raw!r}"
        reqs[normalize(name.group(0))] = (i, line)
    return reqs


@dataclass(frozen=True)
class Import:
    top: str  # top-level module name
    file: str
    line: int
    guarded: bool  # inside a function, or a try that catches ImportError

    def where(self) -> str:
        return f"{self.file}:{self.line}"


def _catches_import_error(node: ast.Try) -> bool:
    names = set()
    for h in node.handlers:
        if h.type is None:
            return True
        for t in h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]:
            names.add(t.id if isinstance(t, ast.Name) else getattr(t, "attr", ""))
    return bool(names & {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def imports_of(path: Path) -> list[Import]:
    """Every absolute import in a file, at any depth, with whether it is guarded."""
    rel = str(path.relative_to(REPO))
    found: list[Import] = []

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if isinstance(node, ast.Import) or node.level == 0:
                found.extend(Import(m.split(".")[0], rel, node.lineno, guarded) for m in mods)
            return
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            guarded = True
        if isinstance(node, ast.Try) and _catches_import_error(node):
            for child in node.body:
                visit(child, True)
            for part in (node.handlers, node.orelse, node.finalbody):
                for child in part:
                    visit(child, guarded)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(ast.parse(path.read_text(), filename=rel), False)
    return found


def third_party_imports(path: Path) -> list[Import]:
    """Drop the standard library, this repository's packages and sibling scripts (bench/common.py)."""
    return [
        imp
        for imp in imports_of(path)
        if imp.top
        and imp.top not in sys.stdlib_module_names
        and imp.top not in FIRST_PARTY
        and not (path.parent / f"{imp.top}.py").exists()
        and imp.top not in LOCAL_SCRIPTS
        and not (path.parent / imp.top / "__init__.py").exists()
    ]


@functools.cache
def _packages_distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()  # scans every installed distribution: once


def distributions_of(top: str) -> list[str]:
    """Distribution names that provide an import name; the import name itself when nothing installed provides it."""
    dists = _packages_distributions().get(top, [])
    return sorted({normalize(d) for d in dists}) or [normalize(top)]


def source_files(folder: str) -> list[Path]:
    return sorted(p for p in (REPO / folder).rglob("*.py") if "__pycache__" not in p.parts)


def module_names(package: str) -> list[str]:
    names = []
    for p in source_files(package):
        parts = list(p.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


@pytest.mark.parametrize("module", module_names("backend") + module_names("app"))
def test_every_module_imports(module):
    importlib.import_module(module)


def test_every_third_party_import_is_pinned_in_the_file_that_installs_it():
    reqs = {f: read_requirements(f) for f in (RUNTIME, DEV, GPU)}
    problems, seen = [], set()
    for folder, allowed in SCANNED.items():
        for path in source_files(folder):
            for imp in third_party_imports(path):
                seen.add(imp.top)
                dists = distributions_of(imp.top)
                if any(d in reqs[f] for d in dists for f in allowed):
                    continue
                dist = " or ".join(dists)
                if any(d in reqs[GPU] for d in dists):
                    if not imp.guarded:
                        problems.append(
                            f"{imp.where()}: imports {imp.top} (distribution {dist}, GPU extra only: {GPU}) unguarded;"
                            " import it inside a function or a try/except ImportError so CPU machines still run"
                        )
                    continue
                elsewhere = [f for f in (RUNTIME, DEV) if any(d in reqs[f] for d in dists)]
                if elsewhere:
                    hint = (
                        f"it is only in {', '.join(elsewhere)}, which {folder}/ does not get: move it to {allowed[0]}"
                    )
                else:
                    hint = f"missing: pin it in {allowed[0]}"
                problems.append(
                    f"{imp.where()}: imports {imp.top} (distribution {dist}) but it is in no file {folder}/ installs"
                    f" ({' / '.join(allowed)}); {hint}"
                )
    assert not problems, "\n".join(problems)
    assert {"torch", "transformers", "gradio", "kaleido", "pytest"} <= seen  # the scan saw the code it is meant to


def test_every_third_party_import_is_installed_here():
    """A lazy import (kaleido, scipy) is only exercised on some paths: check it resolves in this environment."""
    gpu = read_requirements(GPU)
    missing = sorted(
        f"{imp.where()}: {imp.top} is not installed (pip install -r {DEV})"
        for folder in SCANNED
        for path in source_files(folder)
        for imp in third_party_imports(path)
        if importlib.util.find_spec(imp.top) is None and not any(d in gpu for d in distributions_of(imp.top))
    )
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("fname", [RUNTIME, DEV, GPU])
def test_every_requirement_is_pinned(fname):
    ops = ("==", ">=") if fname == GPU else ("==",)
    bad = [
        f"{fname}:{i}: {line!r} is not pinned with {' or '.join(ops)}"
        for i, line in read_requirements(fname).values()
        if not (m := REQ_LINE.match(line)) or m["op"] not in ops
    ]
    assert not bad, "\n".join(bad)


def test_no_package_is_listed_twice():
    where: dict[str, list[str]] = {}
    for fname in (RUNTIME, DEV, GPU):
        for name, (i, _) in read_requirements(fname).items():
            where.setdefault(name, []).append(f"{fname}:{i}")
    assert (REPO / DEV).read_text().splitlines()[0] == f"-r {RUNTIME}"
    dup = {n: w for n, w in where.items() if len(w) > 1}
    assert not dup, f"listed more than once (one pin per package): {dup}"


def test_the_scan_sees_lazy_and_guarded_imports(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    (tmp_path / "sibling.py").write_text("")
    src = tmp_path / "mod.py"
    src.write_text(
        "import os\nimport numpy as np\nfrom sibling import x\nfrom . import rel\n"
        "def f():\n    import kaleido\n"
        "try:\n    import flash_attn\nexcept ImportError:\n    flash_attn = None\n"
        "try:\n    import yaml\nexcept ValueError:\n    pass\n"
    )
    got = [(i.top, i.line, i.guarded) for i in third_party_imports(src)]
    assert got == [("numpy", 2, False), ("kaleido", 6, True), ("flash_attn", 8, True), ("yaml", 12, False)]
    assert distributions_of("yaml") == ["pyyaml"] and distributions_of("flash_attn") == ["flash-attn"]

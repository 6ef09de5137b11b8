"""The architecture as a test: data flows config -> data -> detour -> run dir -> analysis/evaluation -> sweeps
-> replication -> commands/app. Every import (function-local ones too) may only point to the same or a lower layer,
and no two modules import each other, directly or through others."""

from __future__ import annotations

import ast
from pathlib import Path

from backend.core.paths import REPO_ROOT

LAYERS = {  # package -> layer; an import may go sideways within a package or down, never up
    "backend.core": 0,
    "backend.engine": 1,
    "backend.reporting": 1,  # figure files and the HTML page every report writes
    "backend.cards": 1.5,  # model cards and export: from run directories; runs and evaluations write them
    "backend.detour": 2,
    "backend.objectives": 0.5,  # what each objective declares (torch only): the config checks read it
    "backend.presets": 0.5,  # the named recipes as data (YAML): the schema lists them
    "backend.analysis": 2,
    "backend.evaluation": 2,
    "backend.runs": 3,
    "backend.explain": 3,
    "backend.bundle": 3,
    "backend.sweeps": 4,
    "backend.replication": 5,
    "backend.commands": 6,
    "backend.__main__": 7,
    "app": 8,
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, name: str) -> set[str]:
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)  # "from backend.engine import data"
    return {m for m in out if m.split(".")[0] in ("backend", "app")}


def _graph() -> dict[str, set[str]]:
    files = sorted((REPO_ROOT / "backend").rglob("*.py")) + sorted((REPO_ROOT / "app").rglob("*.py"))
    mods = {_module_name(f): f for f in files}
    graph = {}
    for name, f in mods.items():
        graph[name] = {m for m in _imports(f, name) if m in mods and m != name}
    return graph


def _layer(mod: str) -> tuple[str, int]:
    for pkg in sorted(LAYERS, key=len, reverse=True):
        if mod == pkg or mod.startswith(pkg + "."):
            return pkg, LAYERS[pkg]
    return mod, -1


def test_every_module_belongs_to_a_layer():
    unplaced = [m for m in _graph() if _layer(m)[1] < 0 and m not in ("backend", "app")]
    assert not unplaced, f"modules outside the package layers {sorted(LAYERS)}: {unplaced}"


def test_no_import_climbs_to_a_higher_layer():
    bad = []
    for mod, deps in _graph().items():
        pkg, layer = _layer(mod)
        for dep in deps:
            dpkg, dlayer = _layer(dep)
            if dep in ("backend", "app"):
                continue
            if dlayer > layer or (dlayer == layer and dpkg != pkg):
                bad.append(f"{mod} ({pkg}, layer {layer}) imports {dep} ({dpkg}, layer {dlayer})")
    assert not bad, "imports against the data flow:\n" + "\n".join(sorted(bad))


def test_no_import_circles():
    graph = _graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycles.append(" -> ".join(stack[stack.index(dep) :] + [dep]))
            elif dep not in state:
                visit(dep, stack + [dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import circles:\n" + "\n".join(cycles)

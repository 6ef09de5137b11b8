"""The front door and the guide: the README stays short, its links and the command CI runs hold; the generated
reference pages cover every config key and every CLI argument; no text says who built or measured the project."""

from __future__ import annotations

import argparse
import importlib.util
import re

from backend.core.paths import REPO_ROOT
from backend.engine import schema

README = REPO_ROOT / "README.md"


def _hook():
    spec = importlib.util.spec_from_file_location(
        "reference_pages", REPO_ROOT / "docs" / "hooks" / "reference_pages.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)


def test_readme_is_short_and_every_relative_link_resolves():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links, "the README links into the guide"
    for link in links:
        if re.match(r"[a-z]+:", link) or link.startswith("#"):
            continue
        target = REPO_ROOT / link.split("#")[0]
        assert target.exists(), f"README links to {link}, which does not exist"
    assert (REPO_ROOT / "docs" / "images" / "launch.png").stat().st_size < 300_000  # screenshots stay small


def test_ci_runs_the_readmes_test_command():
    """`.ci/run` and the README name one test command: the README's Tests block is the pytest line CI runs."""
    ci_lines = [ln.strip() for ln in (REPO_ROOT / ".ci" / "run").read_text().splitlines()]
    ci_pytest = [ln for ln in ci_lines if ln.startswith("python -m pytest")]
    assert len(ci_pytest) == 1, ci_pytest
    readme = README.read_text(encoding="utf-8")
    tests_section = readme.split("## Tests", 1)[1].split("\n## ", 1)[0]
    blocks = [b.strip() for b in _code_blocks(tests_section)]
    assert blocks and blocks[0] == ci_pytest[0], (blocks, ci_pytest)
    assert any("mkdocs build --strict" in ln for ln in ci_lines)


def test_the_config_reference_names_every_key_with_its_default():
    page = _hook().config_reference()
    for key in schema.SCHEMA:
        row = next((ln for ln in page.splitlines() if ln.startswith(f"| `{key.key}` |")), None)
        assert row is not None, f"{key.key} is missing from the generated config reference"
        assert key.help.split()[0].replace("|", "\\|") in row
    assert "| `pair` | pair |" in page and "| `custom` | list |" in page  # the recipes, from backend/presets


def test_the_cli_reference_names_every_command_and_argument():
    import backend.__main__ as backend_main

    page = _hook().cli_reference()
    parser = backend_main.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(backend_main.COMMANDS)

    def check(title: str, p: argparse.ArgumentParser, level: str) -> None:
        section = page.split(f"{level} `{title}`\n", 1)[1].split("\n#", 1)[0]
        for action in p._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    check(f"{title} {name}", child, level + "#")
                continue
            flag = action.option_strings[0] if action.option_strings else (action.metavar or action.dest)
            assert f"`{flag}`" in section, f"{title}: {flag} is missing from the generated CLI reference"

    for name, p in sub.choices.items():
        check(f"python -m backend {name}", p, "###")
    assert "`--share`" in page.split("## `python -m backend`")[0]  # the app's flags


# Words about who built or measured the project, not about what it does (a measurement says when, on which
# machine, at which load, with which command).
WHO = re.compile(
    r"\bengineers?\b|\bother helpers\b|\bhelpers ran\b|\b(this|last|previous) round\b|\bround before\b"
    r"|\bearlier session\b|\bother sessions\b|shared by \w+ sessions|\bwe measured\b|\bI measured\b|\bwas lent\b",
    re.I,
)


def test_no_text_says_who_built_or_measured_it():
    paths = [
        README,
        *sorted((REPO_ROOT / "docs").rglob("*.md")),
        *sorted((REPO_ROOT / "bench" / "results").glob("*.md")),
    ]
    for folder in ("backend", "app", "bench", "tests"):
        paths += sorted((REPO_ROOT / folder).rglob("*.py"))
    this_file = REPO_ROOT / "tests" / "docs" / "test_guide.py"
    found = [
        f"{p.relative_to(REPO_ROOT)}:{i}: {line.strip()[:100]}"
        for p in paths
        if p != this_file
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if WHO.search(line)
    ]
    assert not found, "\n".join(found)

"""MkDocs hook: the guide's reference pages for the config keys and the CLI, written at build time from the config
schema (``backend/engine/schema.py``), the objective and preset registries and the argument parsers
(``backend/__main__.py``, ``app/__main__.py``). Nothing is committed, so the pages cannot drift from the code.

``config_reference()`` and ``cli_reference()`` return the Markdown; ``on_files`` adds them to the site as
``reference/config.md`` and ``reference/cli.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _project_on_path() -> None:
    """The hook reads the project's code; mkdocs restores ``sys.path`` after loading a hook, so this runs per call."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


PAGES = {"reference/config.md": "config_reference", "reference/cli.md": "cli_reference"}
GENERATED = "<!-- Generated at build time by docs/hooks/reference_pages.py; edit the code it reads, not this. -->"


def _cell(text: object) -> str:
    """One Markdown table cell: pipes escaped, newlines folded."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _value(v: object) -> str:
    if v is None:
        return "`null`"
    if isinstance(v, float):
        return f"`{v:g}`"
    return f"`{json.dumps(v) if isinstance(v, (list, dict, bool)) else v}`"


def _allowed(k) -> str:
    from backend.engine.schema import MAX_INT

    if k.choices:
        text = " \\| ".join(f"`{c}`" for c in k.choices)
    elif k.kind == "int" and k.hi == MAX_INT:  # the bound every count has; no user meets it
        text = "int" + (f" >= {k.lo:g}" if k.lo is not None else "")
    elif k.kind in ("int", "float"):
        text = f"{k.kind} {k.range_text()}"
    elif k.kind == "autobool":
        text = "`auto` \\| `true` \\| `false`"
    else:
        text = k.kind
    return text + (", or `null`" if k.optional else "")


def config_reference() -> str:
    """Every config key (default, allowed values, meaning, Launch-form field), then the objectives a phase list may
    name and the named recipes, all read from the code that checks them."""
    _project_on_path()
    import backend.objectives as objectives
    import backend.presets as presets
    from backend.engine import schema

    out = [
        GENERATED,
        "# Config keys",
        "",
        "Every key of an experiment config, read from `backend/engine/schema.py`: the same table gives the defaults, "
        "the checks and their messages, `python -m backend validate --print` and the app's Launch form. Every key is "
        "optional; `--set KEY=VALUE` sets one from the command line. A phase *list* (`phases:` as a list, "
        "[Configs and the timeline](../configs.md)) takes the per-phase keys and the objective settings listed "
        "below the table.",
        "",
    ]
    sections: dict[str, list] = {}
    for k in schema.SCHEMA:
        sections.setdefault(k.key.split(".")[0] if "." in k.key else "(top level)", []).append(k)
    for section, keys in sections.items():
        out += [f"## `{section}`" if section != "(top level)" else "## Top level", ""]
        out += ["| key | default | allowed | meaning | Launch form |", "|---|---|---|---|---|"]
        for k in keys:
            form = _cell(k.label) + (" (Advanced)" if k.advanced else "") if k.label else ""
            out.append(f"| `{k.key}` | {_value(k.default)} | {_allowed(k)} | {_cell(k.help)} | {form} |")
        out.append("")

    out += [
        "## Objectives (`objective:` of a phase)",
        "",
        "One module each in `backend/objectives/` ([Objectives](../objectives.md)). A phase of a list names one "
        "and may carry its settings; a setting with no default must be given.",
        "",
        "| objective | attention | what is predicted | settings |",
        "|---|---|---|---|",
    ]
    for o in objectives.all_objectives():
        settings = "; ".join(
            f"`{s.name}` ({'required' if s.default is None else f'default {s.default:g}'}, "
            f"{'(' if s.lo_open else '['}{s.lo:g}, {s.hi:g}{')' if s.hi_open else ']'}): {_cell(s.help)}"
            for s in o.settings
        )
        out.append(f"| `{o.name}` | {o.attention} | {_cell(o.explanation)} | {settings or '—'} |")
    out += [
        "",
        "## Recipes (`recipe:`)",
        "",
        "One YAML file each in `backend/presets/`; `custom` is a phase list written out.",
        "",
        "| recipe | timeline shape | in the Launch form | what |",
        "|---|---|---|---|",
    ]
    for name in presets.names():
        if name == presets.CUSTOM:
            out.append(f"| `{name}` | list | yes | the phases written as a list |")
            continue
        p = presets.get(name)
        form = "yes" if "form" in p else "no"
        what = [p.get("help") or ""]
        if isinstance(p.get("objectives"), dict):
            what.append(", ".join(f"{phase}: `{obj}`" for phase, obj in p["objectives"].items()))
        elif p.get("objectives"):
            what.append(" then ".join(f"`{obj}`" for obj in p["objectives"]))
        if p.get("objective"):
            what.append(f"`{p['objective']}`")
        if isinstance(p.get("runs"), dict):
            what.append(", ".join(f"{role}: `{preset}`" for role, preset in p["runs"].items()))
        out.append(f"| `{name}` | {p['shape']} | {form} | {_cell('; '.join(w for w in what if w))} |")
    out.append("")
    return "\n".join(out)


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    return ", ".join(f"`{s}`" for s in action.option_strings)


def _arg_default(action: argparse.Action) -> str:
    if action.default in (None, argparse.SUPPRESS, False, []) or action.option_strings == []:
        return ""
    if isinstance(action, argparse._StoreTrueAction):
        return ""
    return f"`{action.default}`"


def _parser_section(title: str, parser: argparse.ArgumentParser, level: str) -> list[str]:
    usage = parser.format_usage().removeprefix("usage: ").strip()
    out = [f"{level} `{title}`", ""]
    if parser.description:
        out += [" ".join(parser.description.split()), ""]
    out += ["```text", usage, "```", ""]
    rows = []
    for group in parser._action_groups:  # argparse keeps its groups only here
        for action in group._group_actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            heading = "" if group.title in ("options", "optional arguments", "positional arguments") else group.title
            help_text = "" if action.help == argparse.SUPPRESS else (action.help or "")
            if action.choices and not isinstance(action.choices, dict):
                help_text += f" (one of: {', '.join(map(str, action.choices))})"
            rows.append(
                f"| {_flags(action)} | {_arg_default(action)} | {_cell(help_text)}"
                f"{' *(' + _cell(heading) + ')*' if heading else ''} |"
            )
    if rows:
        out += ["| argument | default | what |", "|---|---|---|", *rows, ""]
    for action in parser._actions:  # a command with its own sub-commands (explain masks | surprise | ...)
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _parser_section(f"{title} {name}", sub, level + "#")
    return out


def cli_reference() -> str:
    """``python -m app`` and every ``python -m backend`` command, each argument with its default and help, read from
    the parsers the programs run."""
    _project_on_path()
    import app.__main__ as app_main
    import backend.__main__ as backend_main

    out = [
        GENERATED,
        "# Command line",
        "",
        "Every command and argument, read from the argument parsers the programs use (`backend/commands/`, one module "
        "per command; `app/__main__.py`). `python -m backend COMMAND --help` prints the same.",
        "",
    ]
    out += _parser_section("python -m app", app_main.build_parser(), "##")
    parser = backend_main.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out += ["## `python -m backend`", "", "| command | what |", "|---|---|"]
    out += [f"| [`{name}`](#python-m-backend-{name}) | {_cell(p.description)} |" for name, p in sub.choices.items()]
    out.append("")
    for name, p in sub.choices.items():
        out += _parser_section(f"python -m backend {name}", p, "###")
    return "\n".join(out)


def on_files(files, config):  # noqa: ANN001, ANN201 (mkdocs hook signature)
    """Add the generated pages to the site (they exist only in the build)."""
    from mkdocs.structure.files import File

    for uri, fn in PAGES.items():
        files.append(File.generated(config, uri, content=globals()[fn]()))
    return files

"""YAML with unique mapping keys and a bound on what a document may expand to.

Unique keys: PyYAML's ``safe_load`` keeps the last of duplicate keys without a word: a config with ``train:`` twice
silently dropped the whole first block. YAML 1.2 requires mapping keys to be unique; this loader enforces it at every
depth.

Bounds: aliases let a 692-byte file ("billion laughs", 9 levels of 9 aliases) stand for 387 million values; PyYAML
builds it in no time (aliases share one object) but everything after it (merging, validation, ``config.json``)
walks the expansion and hangs. Every document is measured on its composed node graph, before any object is built:
the text's size, the nesting depth, the number of aliases and the number of values it expands to. Past any bound it
is refused with one ``YAMLBoundsError`` (a ``YAMLError``) naming the bound, in every loader of the project.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_CHARS = 1 << 20  # a config, a suite, a run's config.yaml: a few KB; 1 MiB is far beyond any real one
MAX_DEPTH = 64  # nesting of mappings and lists (PyYAML's composer recurses: 10,000 levels is a RecursionError)
MAX_ALIASES = 1_000  # '*name' references in one document
MAX_VALUES = 10_000  # scalars, lists and mappings once every alias is expanded (a full config: about 150)


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping holds one key twice (the message names the key and both lines, 1-based)."""

    def __str__(self) -> str:
        return str(self.problem)


class YAMLBoundsError(yaml.YAMLError):
    """A document past one of the bounds (size, depth, aliases, expanded values); the message names which."""


class UniqueKeyLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses duplicate keys in any mapping and documents past the bounds."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise YAMLBoundsError(f"more than {MAX_ALIASES:,} aliases ('*name'); write the values out")
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise YAMLBoundsError(f"nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if node is not None:
            expanded_size(node)
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # '<<: *base' may be overridden: only written keys
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    duplicate = key in seen
                except TypeError:  # an unhashable key: SafeLoader's own error follows
                    continue
                if duplicate:
                    raise DuplicateKeyError(
                        None, None, f"key '{key}' appears twice (lines {seen[key]} and {line}); keep one",
                        key_node.start_mark,
                    )  # fmt: skip
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def expanded_size(root: yaml.Node) -> int:
    """How many values ``root`` stands for once every alias is expanded (a shared node counts each time it is
    reached). Memoised per node, so the walk costs the composed graph, not the expansion; a node that contains
    itself (``&a [*a]``) is refused: no config is infinite."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            children = _children(node)
            total = 1 + sum(sizes[id(c)] for c in children)
            open_.discard(key)
            sizes[key] = total
            if total > MAX_VALUES:
                raise YAMLBoundsError(
                    f"expands to more than {MAX_VALUES:,} values through its aliases ('*name'); a config is a few "
                    "hundred: write the values out"
                )
            continue
        if key in sizes:
            continue
        if key in open_:
            raise YAMLBoundsError("an alias refers to a collection that contains it (an infinite value)")
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in sizes)
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def load(text: str) -> Any:
    """``yaml.safe_load`` with unique keys and bounds: DuplicateKeyError names the key and its lines,
    YAMLBoundsError the bound a document passed (both are YAMLErrors)."""
    if len(text) > MAX_CHARS:
        raise YAMLBoundsError(f"{len(text):,} characters, more than the {MAX_CHARS:,} a YAML file here may hold")
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except RecursionError as exc:  # deep flow nesting the depth bound did not reach first
        raise YAMLBoundsError(f"nested too deep to read (more than {MAX_DEPTH} levels)") from exc

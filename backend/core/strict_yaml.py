"""YAML with unique mapping keys: a key written twice is an error naming both lines, never "the last one wins".

PyYAML's ``safe_load`` keeps the last of duplicate keys without a word: a config with ``train:`` twice silently
dropped the whole first block. YAML 1.2 requires mapping keys to be unique; this loader enforces it at every depth.
"""

from __future__ import annotations

from typing import Any

import yaml


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping holds one key twice (the message names the key and both lines, 1-based)."""

    def __str__(self) -> str:
        return str(self.problem)


class UniqueKeyLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses duplicate keys in any mapping, nested ones included."""

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


def load(text: str) -> Any:
    """``yaml.safe_load`` with unique keys; DuplicateKeyError (a YAMLError) names the key and its lines."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)

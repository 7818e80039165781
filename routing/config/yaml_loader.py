"""YAML for config files: PyYAML's safe loader, except that a key given twice is an error.

Plain YAML keeps the last of two equal keys silently, so a second `health:` block, or a
`port:` typed twice, would drop settings without a word. Merge keys (`<<: *defaults`) still
override as YAML says: only keys written out in one mapping are compared.
"""

from __future__ import annotations

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node

_MERGE_TAG = "tag:yaml.org,2002:merge"


class UniqueKeyLoader(yaml.SafeLoader):
    """A `yaml.SafeLoader` that rejects a mapping with a repeated key, naming its line."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[object, object]:
        seen: dict[object, Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                earlier = seen.get(key)
            except TypeError:  # an unhashable key: the base class reports it
                continue
            if earlier is not None:
                raise ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key!r} (first on line {earlier.start_mark.line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def load_yaml(data: bytes | str) -> object:
    """Parse one YAML document safely; `yaml.YAMLError` on bad YAML or a repeated key."""
    return yaml.load(data, Loader=UniqueKeyLoader)

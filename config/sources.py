"""Where raw settings come from: the YAML file, then dotted-key overrides (flags) on top of it."""

from __future__ import annotations

import os
from collections.abc import Mapping

import yaml

from sluice.config.errors import ConfigError

FILE_KEY = "<file>"


class _NoDuplicateKeysLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping, which PyYAML would let the last one win."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[object, object]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue  # merge keys (<<) legitimately repeat keys; non-scalar keys fail in super()
            key = self.construct_object(key_node)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key!r}",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def read_yaml_file(path: str | os.PathLike[str]) -> dict[object, object]:
    """The file's top-level mapping; an empty file is an empty mapping."""
    shown = os.fspath(path)
    try:
        with open(path, "rb") as stream:
            try:
                document = yaml.load(stream, Loader=_NoDuplicateKeysLoader)  # a SafeLoader
            # ValueError: PyYAML builds dates like 2024-13-01 without catching datetime's complaint.
            except (yaml.YAMLError, ValueError, RecursionError) as error:
                raise ConfigError(FILE_KEY, shown, f"valid YAML ({_one_line(error)})") from None
    except (OSError, ValueError) as error:  # ValueError here: a path with a NUL byte
        raise ConfigError(FILE_KEY, shown, f"a readable file ({_one_line(error)})") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ConfigError(
            FILE_KEY, shown, f"a YAML mapping of settings at the top level, not a {type(document).__name__}"
        )
    return document


def _matching_key(mapping: Mapping[object, object], name: str) -> object:
    """The existing key that `name` refers to, so the override `broker_ports.3` replaces a YAML `3:`."""
    for key in mapping:
        if key == name or (isinstance(key, int) and not isinstance(key, bool) and str(key) == name):
            return key
    return name


def apply_overrides(tree: Mapping[object, object], overrides: Mapping[str, object]) -> dict[object, object]:
    """A copy of `tree` with each dotted key set to its value; None values mean "not given" and are skipped.

    Neither `tree` nor the overrides are changed: every mapping on a path that is written is copied.
    """
    merged = dict(tree)
    for dotted, value in overrides.items():
        if value is None:
            continue
        names = dotted.split(".") if isinstance(dotted, str) else [""]
        if not all(names):
            raise ConfigError(str(dotted), value, "a dotted key such as 'upstream.bootstrap'")
        node = merged
        for depth, name in enumerate(names[:-1], start=1):
            key = _matching_key(node, name)
            child = node.get(key)
            if child is None:
                child = {}
            elif not isinstance(child, Mapping):
                raise ConfigError(".".join(names[:depth]), child, f"a mapping, to set {dotted} inside it")
            node[key] = node = dict(child)
        node[_matching_key(node, names[-1])] = value
    return merged

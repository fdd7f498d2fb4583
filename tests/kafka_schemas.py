"""Kafka's message schemas as the tests read them: kafka-python's bundled JSON, and Kafka's own of 3.9.1 and a
2026 trunk where the reference copies sit beside the repository (`shared/kafka-schemas/`, next to the clone;
CI has them). Each schema is the JSON Kafka generates its protocol code from, `//` comments removed and its
common structs put in place, so a field's `fields` are always there.

`schema_sources()` lists the sources present; `SHARED_MISSING` says why the reference copies are not (None
when they are), for the tests that need them to say so when they skip.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import kafka.protocol.schemas.resources as kafka_python_resources

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "kafka-schemas"
SHARED_VERSIONS = ("3.9.1", "trunk-2026-08")
KAFKA_PYTHON = Path(kafka_python_resources.__file__).parent
SHARED_MISSING = (
    None
    if all((SHARED / version).is_dir() for version in SHARED_VERSIONS)
    else f"Kafka's reference schemas are not at {SHARED} (the clone's sibling shared/kafka-schemas/)"
)

_COMMENT_LINES = re.compile(r"(?m)^\s*//.*\n?")
Schema = dict[str, Any]


@dataclass(frozen=True)
class SchemaSource:
    name: str  # "kafka-python", "3.9.1", "trunk-2026-08"
    folder: Path

    def messages(self) -> Iterator[Schema]:
        """Every request and response schema of this source (the ones with an apiKey)."""
        for path in sorted(self.folder.glob("*.json")):
            schema = load_schema(path)
            if "apiKey" in schema and schema.get("type") in ("request", "response"):
                yield schema


def schema_sources(*, with_shared: bool = True) -> list[SchemaSource]:
    """kafka-python's schemas, then Kafka's reference copies when present (and asked for)."""
    sources = [SchemaSource("kafka-python", KAFKA_PYTHON)]
    if with_shared and SHARED_MISSING is None:
        sources += [SchemaSource(version, SHARED / version) for version in SHARED_VERSIONS]
    return sources


@cache
def load_schema(path: Path) -> Schema:
    text = _COMMENT_LINES.sub("", path.read_text())  # Kafka writes comments on lines of their own
    schema = json.loads(text)
    common = {struct["name"]: struct["fields"] for struct in schema.get("commonStructs", [])}
    _resolve(schema.get("fields", []), common)
    return schema


def _resolve(fields: list[Schema], common: dict[str, list[Schema]]) -> None:
    for field in fields:
        kind = field["type"].removeprefix("[]")
        if "fields" not in field and kind in common:
            field["fields"] = common[kind]
        if "fields" in field:
            _resolve(field["fields"], common)


def parse_versions(text: str | None) -> tuple[int, int] | None:
    """Kafka's version ranges: "3", "3-7", "3+" (open: 32767), "none" or absent (None)."""
    if text is None or text == "none":
        return None
    if text.endswith("+"):
        return int(text[:-1]), 0x7FFF
    low, _, high = text.partition("-")
    return int(low), int(high or low)


def in_versions(version: int, text: str | None) -> bool:
    found = parse_versions(text)
    return found is not None and found[0] <= version <= found[1]

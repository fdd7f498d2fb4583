"""One ApiKey enum: it names every API of the table, by Kafka's own names, and kafka-python agrees on the
numbers and names; and protocol/'s modules import each other without a cycle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from kafka.protocol.api_key import ApiKey as KafkaApiKey

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.apis import API_SPECS

PROTOCOL = Path(__file__).resolve().parents[2] / "protocol"


def _upper_snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).upper()


def test_every_api_of_the_table_has_its_key_by_kafkas_name_and_no_other_key_exists() -> None:
    assert {key: _upper_snake(spec.name) for key, spec in API_SPECS.items()} == {
        member.value: member.name for member in ApiKey
    }


def test_keys_agree_with_kafka_pythons_own_enum_as_far_as_it_goes() -> None:
    known = {member.value for member in KafkaApiKey}
    assert known <= {member.value for member in ApiKey}
    for member in ApiKey:
        if member.value in known:  # newer keys come from Kafka's own schemas (test_api_table.py)
            assert _upper_snake(KafkaApiKey(member.value).name) == member.name


def test_a_member_is_the_int_on_the_wire() -> None:
    assert ApiKey.PRODUCE == 0 and hash(ApiKey.FETCH) == hash(1)
    assert {ApiKey.METADATA: "m"}[3] == "m"  # tables keyed by members answer plain ints


def _protocol_imports(path: Path) -> set[str]:
    """The protocol modules `path` imports when it runs (TYPE_CHECKING blocks never run)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
        for node in ast.walk(block)
    }
    names = set()
    for node in ast.walk(tree):
        if id(node) in skipped or not isinstance(node, ast.ImportFrom) or not node.module:
            continue
        if node.module.startswith("sluice.protocol."):
            names.add(node.module.removeprefix("sluice.protocol."))
    return names


def test_protocol_modules_import_each_other_without_a_cycle() -> None:
    graph = {path.stem: _protocol_imports(path) for path in PROTOCOL.glob("*.py")}
    visiting: list[str] = []
    done: set[str] = set()

    def visit(module: str) -> None:
        assert module not in visiting, f"import cycle: {' -> '.join([*visiting, module])}"
        if module in done:
            return
        visiting.append(module)
        for imported in graph.get(module, ()):
            visit(imported)
        visiting.pop()
        done.add(module)

    for module in graph:
        visit(module)

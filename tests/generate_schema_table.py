"""Writes protocol/schema_table.py: what Kafka's message schemas say about each API, for the proxy to vet.

    .venv/bin/python tests/generate_schema_table.py          # rewrite the table
    .venv/bin/python tests/generate_schema_table.py --check  # exit 1 if it differs from the schemas

The proxy cannot read the schemas at run time (kafka-python does not ship the newer APIs, and Kafka's own
copies are reference data beside the repository), so the facts it needs are derived here and committed:
per API key, its name, the versions the schemas define (the union of every source: kafka-python's bundled
JSON, Kafka 3.9.1's and a 2026 trunk's), whether brokers serve its requests at all (a request schema whose
`listeners` name only the controller is for KRaft controllers alone), and where its responses carry a broker
address, that is a struct with both a `Host` and a `Port` field, at which versions; and, for the answers a
hand-written walk goes past to reach their NodeEndpoints, their top-level fields and versions.

tests/protocol/test_schema_table.py derives the table's data from the schemas and fails on any difference
from the committed module's (data, not text: `ruff format` lays the file out, and a newer ruff may lay it
out otherwise), so it cannot fall behind the schemas: a new kafka-python or new reference schemas fail the
suite until this is run again.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kafka_schemas import REPO, Schema, SchemaSource, in_versions, parse_versions, schema_sources

TABLE = REPO / "protocol" / "schema_table.py"
BROKER_LISTENERS = frozenset({"broker", "zkBroker"})


@dataclass
class _Api:
    name: str = ""
    ranges: list[tuple[int, int]] = field(default_factory=list)
    listeners: set[str] = field(default_factory=set)
    listeners_known: bool = False
    addresses: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    # Top-level response field -> (the versions its responses have it in, its tag or None), in order.
    fields: dict[str, tuple[set[int], int | None]] = field(default_factory=dict)


def address_paths(fields: list[Schema], version: int, path: str = "") -> Iterable[str]:
    """The path ("" for the message itself) of every struct holding both a Host and a Port at `version`."""
    present = [f for f in fields if in_versions(version, f.get("versions"))]
    names = {f["name"] for f in present}
    if {"Host", "Port"} <= names:
        yield path
    for f in present:
        if "fields" in f:
            yield from address_paths(f["fields"], version, f"{path}/{f['name']}" if path else f["name"])


def collect(sources: list[SchemaSource]) -> dict[int, _Api]:
    apis: dict[int, _Api] = defaultdict(_Api)
    for source in sources:
        for schema in source.messages():
            api = apis[schema["apiKey"]]
            valid = parse_versions(schema.get("validVersions"))
            kind = schema["type"]
            api.name = schema["name"].removesuffix(kind.capitalize())  # the last source's (the trunk's)
            if valid is None:
                continue  # an API this source lists as removed (Kafka 4 dropped the ZooKeeper ones)
            if kind == "request":
                api.ranges.append(valid)
                if "listeners" in schema:
                    api.listeners_known = True
                    api.listeners.update(schema["listeners"])
                continue
            for version in range(valid[0], valid[1] + 1):
                for path in address_paths(schema.get("fields", []), version):
                    api.addresses[path].add(version)
            # In the order of the last source read (the trunk's), fields only older sources have after.
            ordered: dict[str, tuple[set[int], int | None]] = {}
            for top in schema.get("fields", []):
                present = {v for v in range(valid[0], valid[1] + 1) if in_versions(v, top.get("versions"))}
                versions, tag = api.fields.get(top["name"], (set(), top.get("tag")))
                ordered[top["name"]] = (versions | present, tag)
            api.fields = ordered | {name: kept for name, kept in api.fields.items() if name not in ordered}
    return apis


# The answers whose top-level response fields are written into the table: those a hand-written walk in
# protocol/response_walks.py goes past to reach their NodeEndpoints, and which take the versions of those
# fields from here (the share answers' acquisition lock timeout, say).
WALKED_FOR_NODE_ENDPOINTS = ("Produce", "Fetch", "ShareFetch", "ShareAcknowledge")


@dataclass(frozen=True)
class TableData:
    """What protocol/schema_table.py holds, as plain values: the check compares these, not the text."""

    known_apis: dict[int, tuple[str, tuple[int, int], bool, tuple[tuple[str, int, int], ...]]]
    response_fields: dict[int, tuple[tuple[str, int, int, int | None], ...]]


def table_data(sources: list[SchemaSource]) -> TableData:
    known: dict[int, tuple[str, tuple[int, int], bool, tuple[tuple[str, int, int], ...]]] = {}
    fields: dict[int, tuple[tuple[str, int, int, int | None], ...]] = {}
    for key, api in sorted(collect(sources).items()):
        if not api.ranges:
            continue  # no source defines a version of it any more
        on_brokers = not api.listeners_known or bool(api.listeners & BROKER_LISTENERS)
        addresses = tuple(
            (path, first, last)
            for path, versions in sorted(api.addresses.items())
            for first, last in _runs(versions)
        )
        known[key] = (api.name, _union(api.ranges, api.name), on_brokers, addresses)
        if api.name in WALKED_FOR_NODE_ENDPOINTS:
            fields[key] = tuple(
                (name, min(versions), max(versions), tag)
                for name, (versions, tag) in api.fields.items()
                if versions
            )
    return TableData(known, fields)


def _union(ranges: list[tuple[int, int]], what: str) -> tuple[int, int]:
    low, high = min(r[0] for r in ranges), max(r[1] for r in ranges)
    covered = set().union(*(range(a, b + 1) for a, b in ranges))
    if covered != set(range(low, high + 1)):
        raise SystemExit(
            f"{what}: the schemas' versions {sorted(ranges)} leave a gap, the table holds one range"
        )
    return low, high


def _runs(versions: set[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for version in sorted(versions):
        if runs and runs[-1][1] == version - 1:
            runs[-1] = (runs[-1][0], version)
        else:
            runs.append((version, version))
    return runs


def render(sources: list[SchemaSource]) -> str:
    data = table_data(sources)
    rows = []
    for key, (name, (low, high), on_brokers, addresses) in data.known_apis.items():
        listed = [f"({json.dumps(path)}, {first}, {last})" for path, first, last in addresses]
        joined = f"{listed[0]}," if len(listed) == 1 else ", ".join(listed)
        rows.append(f'    {key}: KnownApi("{name}", ({low}, {high}), {on_brokers}, ({joined})),')
    field_rows = []
    for key, top in data.response_fields.items():
        listed = [f"({json.dumps(name)}, {first}, {last}, {tag})" for name, first, last, tag in top]
        field_rows.append(f"    {key}: ({', '.join(listed)}),")
    names = ", ".join(source.name for source in sources)
    text = _HEADER.format(sources=names) + "\n".join(rows) + "\n}\n" + _FIELDS_HEADER + "\n".join(field_rows)
    return _ruff_format(text + "\n}\n")


def _ruff_format(text: str) -> str:
    """The table as `ruff format` leaves it, so the committed file passes the house's format check."""
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", str(TABLE), "-"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    return done.stdout


_HEADER = '''"""What Kafka's message schemas say about each API, for vetting what the proxy lets clients use.

GENERATED by tests/generate_schema_table.py from Kafka's message schemas
({sources}); do not edit: tests/protocol/test_schema_table.py derives the same data
from the schemas and fails on any difference.

Per API key: its name (the newest schema's); the lowest and highest version any of those schemas defines;
whether brokers serve its requests (False: its request schema names only the KRaft controller's listener,
so no client sends it to a broker); and every struct in its responses that holds a broker's `Host` and
`Port`, as (path, first version, last version), the path naming the fields from the message down ("" is
the message itself). For the answers a hand-written walk goes past to reach their NodeEndpoints, their
top-level fields (RESPONSE_FIELDS).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple


class KnownApi(NamedTuple):
    name: str
    versions: tuple[int, int]
    on_brokers: bool
    addresses: tuple[tuple[str, int, int], ...]


KNOWN_APIS: Mapping[int, KnownApi] = {{
'''

_FIELDS_HEADER = """

# Per answer a hand-written walk goes past to reach its NodeEndpoints (protocol/response_walks.py), its
# top-level response fields in order: (name, first version, last version, tag: None when not tagged).
RESPONSE_FIELDS: Mapping[int, tuple[tuple[str, int, int, int | None], ...]] = {
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed table differs")
    args = parser.parse_args(argv)
    sources = schema_sources()
    if len(sources) == 1:
        print("Kafka's reference schemas are missing: the table needs them (see tests/kafka_schemas.py)")
        return 2
    if args.check:
        return 0 if committed_data() == table_data(sources) else 1
    Path(TABLE).write_text(render(sources))
    return 0


def committed_data() -> TableData:
    """What the committed protocol/schema_table.py holds (compared as data: a ruff upgrade that lays the
    file out otherwise changes nothing here)."""
    from sluice.protocol import schema_table

    known = {
        key: (a.name, a.versions, a.on_brokers, a.addresses) for key, a in schema_table.KNOWN_APIS.items()
    }
    return TableData(known, dict(schema_table.RESPONSE_FIELDS))


if __name__ == "__main__":
    sys.exit(main())

"""Writes protocol/schema_table.py: what Kafka's message schemas say about each API, for the proxy to vet.

    .venv/bin/python tests/generate_schema_table.py          # rewrite the table
    .venv/bin/python tests/generate_schema_table.py --check  # exit 1 if it differs from the schemas

The proxy cannot read the schemas at run time (kafka-python does not ship the newer APIs, and Kafka's own
copies are reference data beside the repository), so the facts it needs are derived here and committed:
per API key, its name, the versions the schemas define (the union of every source: kafka-python's bundled
JSON, Kafka 3.9.1's and a 2026 trunk's), whether brokers serve its requests at all (a request schema whose
`listeners` name only the controller is for KRaft controllers alone), and where its responses carry a broker
address, that is a struct with both a `Host` and a `Port` field, at which versions.

tests/protocol/test_schema_table.py regenerates the table and fails on any difference, so it cannot fall
behind the schemas: a new kafka-python or new reference schemas fail the suite until this is run again.
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
    return apis


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
    rows = []
    for key, api in sorted(collect(sources).items()):
        if not api.ranges:
            continue  # no source defines a version of it any more
        name = api.name
        low, high = _union(api.ranges, name)
        on_brokers = not api.listeners_known or bool(api.listeners & BROKER_LISTENERS)
        addresses = [
            f"({json.dumps(path)}, {first}, {last})"
            for path, versions in sorted(api.addresses.items())
            for first, last in _runs(versions)
        ]
        joined = f"{addresses[0]}," if len(addresses) == 1 else ", ".join(addresses)
        rows.append(f'    {key}: KnownApi("{name}", ({low}, {high}), {on_brokers}, ({joined})),')
    names = ", ".join(source.name for source in sources)
    return _ruff_format(_HEADER.format(sources=names) + "\n".join(rows) + "\n}\n")


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
({sources}); do not edit: tests/protocol/test_schema_table.py regenerates it and
fails on any difference.

Per API key: its name (the newest schema's); the lowest and highest version any of those schemas defines;
whether brokers serve its requests (False: its request schema names only the KRaft controller's listener,
so no client sends it to a broker); and every struct in its responses that holds a broker's `Host` and
`Port`, as (path, first version, last version), the path naming the fields from the message down ("" is
the message itself).
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed table differs")
    args = parser.parse_args(argv)
    sources = schema_sources()
    if len(sources) == 1:
        print("Kafka's reference schemas are missing: the table needs them (see tests/kafka_schemas.py)")
        return 2
    text = render(sources)
    if args.check:
        return 0 if TABLE.read_text() == text else 1
    Path(TABLE).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Deterministic record sets and an order-independent digest, for byte-for-byte read-back checks."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable


def make_records(count: int, size: int = 200, seed: int = 7) -> list[tuple[bytes, bytes]]:
    rng = random.Random(seed)
    return [(f"key-{i}".encode(), rng.randbytes(size)) for i in range(count)]


def digest(records: Iterable[tuple[bytes | None, bytes | None]]) -> str:
    """SHA-256 over the sorted (key, value) pairs: equal iff the same multiset of records."""
    h = hashlib.sha256()
    for key, value in sorted((k or b"", v or b"") for k, v in records):
        h.update(len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value)
    return h.hexdigest()

"""The C allocator's thresholds `sluice run` fixes at start-up (proxy/process/process_memory.py): a block of a
few hundred kB freed at the top of the heap keeps its pages for the next one, and a block of megabytes still
goes back to the operating system when freed. Counted in page faults, in a fresh interpreter of its own."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's (elsewhere nothing is set)"
)

CYCLES = 40
PAGE = 4096

_FAULTS_PER_CYCLE = """
import resource, sys
from sluice.proxy.process.process_memory import return_large_buffers_to_os

assert return_large_buffers_to_os()
size, cycles = int(sys.argv[1]), int(sys.argv[2])
bytearray(size)  # the first one may take the heap's pages
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(cycles):
    bytearray(size)  # zeroed, so every page is touched; freed at once
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / cycles)
"""


def faults_per_cycle(size: int) -> float:
    """Page faults per allocation and free of a `size`-byte block, after the thresholds are fixed."""
    done = subprocess.run(
        [sys.executable, "-c", _FAULTS_PER_CYCLE, str(size), str(CYCLES)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return float(done.stdout)


def test_a_fetch_answer_of_a_few_hundred_kb_freed_keeps_its_pages_for_the_next() -> None:
    """At glibc's default 128 KiB trim threshold each such block gave its ~90 pages back and faulted them in
    again (340 faults per MiB of Fetch answers through the proxy, docs/benchmarks.md)."""
    size = 365_000
    assert faults_per_cycle(size) < 0.1 * size / PAGE


def test_a_block_of_megabytes_still_goes_back_when_freed() -> None:
    """Over the 1 MiB mmap threshold: mapped for itself, unmapped at free, so each faults its pages in."""
    size = 4 * 1024 * 1024
    assert faults_per_cycle(size) > 0.5 * size / PAGE

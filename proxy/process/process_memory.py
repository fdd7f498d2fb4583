"""Large buffers go back to the operating system when freed, and the heap when asked (`trim_heap`).

glibc serves allocations of 128 KiB and more with mmap, so freeing them returns the memory at once, but it
raises that threshold as the program frees such blocks (up to 32 MiB): afterwards frames being assembled
come from the heap, and when a connection closes its memory is free for Python but not returned. `sluice
run` fixes the threshold at start-up (glibc's mallopt; elsewhere nothing is done), at 1 MiB: a frame of
megabytes still comes from mmap and goes back when freed, while the many buffers below it (a socket read
of up to 256 KiB, a Fetch answer of a few hundred kB joined from its reads) reuse the heap instead of
costing an mmap, an munmap and a page fault per 4 KiB each time; what they leave in the heap after a
spike is given back by the memory_return service's trim. Measured: docs/benchmarks.md (section 2b).

The trim threshold is fixed with it (fixing one leaves the other at its 128 KiB default), at 16 MiB:
glibc shrinks the heap whenever more than the trim threshold lies free at its top, and every block freed
there below it is faulted in again by the next allocation. At 128 KiB each Fetch answer of a few hundred
kB freed at the top gave its pages back: 340 page faults per MiB of Fetch answers with 64 KiB batches,
none at 2 MiB (docs/benchmarks.md, section 2b). Since `sluice run` takes Python's objects from glibc too
(`proxy/allocator.py`), work that makes and frees many of them frees megabytes at the top at once: a
describe of 10,000 quota entities took 56-61 ms with the heap given back at 2 MiB each time, 42-47
at 16 MiB (40.8 at 64; 27 with pymalloc). At most 16 MiB stays free at the top between spikes; the
memory_return service's trim (`malloc_trim(0)`, which ignores the threshold) returns it after one.

The C library and its two functions are looked up once, at start-up (`return_large_buffers_to_os`): a
lookup runs `ldconfig -p` (ctypes' find_library) and makes a class for the library's functions, and made
at each trim, after a spike of connections, its objects (cyclic, so left to the collector) took blocks in
the arenas the spike had used and kept pymalloc from freeing them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the type of a C function, known to the checker's stubs only
    from ctypes import _NamedFuncPointer

_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 1024 * 1024
TRIM_THRESHOLD_BYTES = 16 * MMAP_THRESHOLD_BYTES


@functools.cache
def _libc_function(name: str, *argtypes: type[ctypes._SimpleCData[int]]) -> _NamedFuncPointer | None:
    """The C library's function `name` returning a C int, or None where it is not there (not glibc)."""
    library = _libc()
    if library is None:
        return None
    try:
        function = library[name]
    except AttributeError:
        return None
    function.argtypes = list(argtypes)
    function.restype = ctypes.c_int
    return function


@functools.cache
def _libc() -> ctypes.CDLL | None:
    library = ctypes.util.find_library("c")
    if library is None:
        return None
    try:
        return ctypes.CDLL(library)
    except OSError:
        return None


def _malloc_trim() -> _NamedFuncPointer | None:
    return _libc_function("malloc_trim", ctypes.c_size_t)


def return_large_buffers_to_os() -> bool:
    """Fix the mmap and trim thresholds (which also stops glibc moving them); True when both were set.
    Also looks up malloc_trim, for `trim_heap`."""
    _malloc_trim()
    mallopt = _libc_function("mallopt", ctypes.c_int, ctypes.c_int)
    if mallopt is None:
        return False
    mmap_set: int = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)  # restype c_int
    trim_set: int = mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    return mmap_set == 1 and trim_set == 1


def trim_heap() -> bool:
    """glibc's malloc_trim(0): give the operating system the free pages anywhere in the heap (glibc keeps
    freed memory for later allocations otherwise). True when memory was returned; False when none was, or
    elsewhere than glibc."""
    malloc_trim = _malloc_trim()
    if malloc_trim is None:
        return False
    returned: int = malloc_trim(0)  # restype c_int
    return returned == 1

"""Large buffers go back to the operating system when freed, and the heap when asked (`trim_heap`).

glibc serves allocations of 128 KiB and more with mmap, so freeing them returns the memory at once, but it
raises that threshold as the program frees such blocks (up to 32 MiB): afterwards frames being assembled
come from the heap, and when a connection closes its memory is free for Python but not returned. `sluice
run` fixes the threshold at start-up (glibc's mallopt; elsewhere nothing is done), at 1 MiB: a frame of
megabytes still comes from mmap and goes back when freed, while the many buffers below it (a socket read
of up to 256 KiB, a Fetch answer of a few hundred kB joined from its reads) reuse the heap instead of
costing an mmap, an munmap and a page fault per 4 KiB each time; what they leave in the heap after a
spike is given back by the memory_return service's trim. Measured: docs/benchmarks.md (section 2b).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the type of a C function, known to the checker's stubs only
    from ctypes import _NamedFuncPointer

_M_MMAP_THRESHOLD = -3  # glibc's malloc.h
MMAP_THRESHOLD_BYTES = 1024 * 1024


def _libc_function(name: str) -> _NamedFuncPointer | None:
    library = ctypes.util.find_library("c")
    if library is None:
        return None
    try:
        return ctypes.CDLL(library)[name]
    except (OSError, AttributeError):  # not glibc
        return None


def return_large_buffers_to_os() -> bool:
    """Fix the mmap threshold (which also stops glibc raising it); True when it was set."""
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done: int = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)  # restype c_int
    return done == 1


def trim_heap() -> bool:
    """glibc's malloc_trim(0): give the operating system the free pages anywhere in the heap (glibc keeps
    freed memory for later allocations otherwise). True when memory was returned; False when none was, or
    elsewhere than glibc."""
    malloc_trim = _libc_function("malloc_trim")
    if malloc_trim is None:
        return False
    malloc_trim.argtypes = [ctypes.c_size_t]
    malloc_trim.restype = ctypes.c_int
    returned: int = malloc_trim(0)  # restype c_int
    return returned == 1

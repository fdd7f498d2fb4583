"""Large buffers go back to the operating system when freed, and the heap when asked (`trim_heap`).

glibc serves allocations of 128 KiB and more with mmap, so freeing them returns the memory at once, but it
raises that threshold as the program frees such blocks (up to 32 MiB): afterwards frames being assembled
(copied in pieces of up to 256 KiB) come from the heap, and when a connection closes its memory is free
for Python but not returned (docs/architecture.md has the figures). `sluice run` fixes the threshold at
start-up (glibc's mallopt; elsewhere nothing is done).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

_M_MMAP_THRESHOLD = -3  # glibc's malloc.h
MMAP_THRESHOLD_BYTES = 128 * 1024


def _libc_function(name: str) -> Callable[..., int] | None:
    library = ctypes.util.find_library("c")
    if library is None:
        return None
    try:
        return getattr(ctypes.CDLL(library), name)
    except (OSError, AttributeError):  # not glibc
        return None


def return_large_buffers_to_os() -> bool:
    """Fix the mmap threshold (which also stops glibc raising it); True when it was set."""
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]  # type: ignore[attr-defined]
    mallopt.restype = ctypes.c_int  # type: ignore[attr-defined]
    return mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1


def trim_heap() -> bool:
    """glibc's malloc_trim(0): give the operating system the free pages anywhere in the heap (glibc keeps
    freed memory for later allocations otherwise). True when memory was returned; False when none was, or
    elsewhere than glibc."""
    malloc_trim = _libc_function("malloc_trim")
    if malloc_trim is None:
        return False
    malloc_trim.argtypes = [ctypes.c_size_t]  # type: ignore[attr-defined]
    malloc_trim.restype = ctypes.c_int  # type: ignore[attr-defined]
    return malloc_trim(0) == 1

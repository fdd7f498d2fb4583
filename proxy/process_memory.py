"""Large buffers go back to the operating system when freed.

glibc serves allocations of 128 KiB and more with mmap, so freeing them returns the memory at once, but it
raises that threshold as the program frees such blocks (up to 32 MiB): afterwards frames being assembled
(copied in pieces of up to 256 KiB) come from the heap, and when a connection closes its memory is free
for Python but not returned. Measured here: 8 connections each holding 23 MiB of a frame took the proxy
from 42 MB to 228 MB, and after they closed it stayed at 205 MB; with the threshold fixed it went back to
44 MB. `sluice run` fixes it at start-up (glibc's mallopt; elsewhere nothing is done).
"""

from __future__ import annotations

import ctypes
import ctypes.util

_M_MMAP_THRESHOLD = -3  # glibc's malloc.h
MMAP_THRESHOLD_BYTES = 128 * 1024


def return_large_buffers_to_os() -> bool:
    """Fix the mmap threshold (which also stops glibc raising it); True when it was set."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1

"""Keep the learner's freed memory for reuse instead of handing it back to the OS.

glibc serves every allocation above its mmap threshold (at most 32 MiB) with a
fresh ``mmap`` and returns it with ``munmap`` when freed.  A CPU learner update
allocates and frees the same few large tensors each time (an AtariNet batch of
T=20, B=32 holds a 76 MB float copy of the observations alone), so every update
page-faulted its activations in again: 670k page faults per 10 updates and 14%
of the learner thread in the kernel.  With mmap off and trimming raised, freed
blocks stay in the heap and the next update reuses them (145k faults per 10
updates; one update 0.30 -> 0.26 s on one thread).  The resident size stays at
the learner's peak.  When the heap cannot grow, glibc still falls back to mmap.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("allocator")

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_KEEP = 2**31 - 1  # the largest value mallopt takes: never trim


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to reuse large blocks; False where there is no glibc mallopt."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _KEEP))
    if not ok:
        log.debug("mallopt refused; large blocks keep going back to the OS")
    return ok

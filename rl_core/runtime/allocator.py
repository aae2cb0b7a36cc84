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

The learner is a thread, and glibc gives a thread an arena of its own, whose
heaps grow to 64 MiB at most: a larger block there is mmap'd whatever
``M_MMAP_MAX`` says, and unmapped when freed.  The IMPALA ResNet on 1,600 Procgen
frames holds 420 MB in one layer's activations, so its learner thread faulted
137k pages a second in again and spent 38% of its time in the kernel.  So every
thread allocates from the main arena (``M_ARENA_MAX`` 1): that holds for threads
started after the call, provided none had an arena of its own before, hence
the entry points call it before they start any thread.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("allocator")

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
_KEEP = 2**31 - 1  # the largest value mallopt takes: never trim


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to reuse large blocks, in one arena for every thread; False where there is no glibc
    mallopt.  Call it before the process starts a thread."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = all(
        mallopt(option, value) for option, value in ((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, _KEEP))
    )
    if not ok:
        log.debug("mallopt refused; large blocks keep going back to the OS")
    return ok

"""keep_freed_memory: freed large blocks are reused, not faulted in again from the OS."""

import subprocess
import sys

import pytest

PROBE = """
import resource, sys, threading
import torch
from rl_core.runtime.allocator import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
mib = int(sys.argv[3])
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
def learn():
    for i in range(16):  # what a learner does each update: the same large tensors, allocated and freed
        before = faults()
        x = torch.empty(mib * 2**18, dtype=torch.float32).fill_(1.0)
        del x
        print(faults() - before, rss_mb())
if sys.argv[2] == "thread":  # as the learner runs: a thread of its own
    learner = threading.Thread(target=learn)
    learner.start()
    learner.join()
else:
    learn()
"""


def _run(mode: str, where: str = "main", mib: int = 64) -> list[tuple[int, float]]:
    argv = [sys.executable, "-c", PROBE, mode, where, str(mib)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [(int(a), float(b)) for a, b in (line.split() for line in out.stdout.split("\n") if line)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc tuning")
def test_freed_large_blocks_are_reused():
    pages = 64 * 2**20 // 4096
    default = _run("default")
    # glibc's default: each block is mmap'd and munmap'd, so every page faults again each time.
    assert all(f > pages // 2 for f, _ in default[-4:])
    kept = _run("keep")
    # Kept: after the heap has grown to hold them, the blocks are reused without faults...
    assert sum(f for f, _ in kept[-4:]) < pages // 20
    # ...and the heap stops growing, at a plateau a few blocks above the default's
    # (glibc grew it by 8 blocks here before freed ones were merged and reused).
    assert kept[-1][1] == pytest.approx(kept[-5][1], abs=8)
    assert kept[-1][1] < default[-1][1] + 12 * 64


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc tuning")
def test_a_thread_reuses_blocks_larger_than_a_thread_arena():
    """A thread's own glibc arena grows to 64 MiB at most and maps a larger block afresh each time; kept, the
    learner thread allocates from the main arena and reuses it."""
    pages = 128 * 2**20 // 4096
    default = _run("default", "thread", 128)
    assert all(f > pages // 2 for f, _ in default[-4:])
    kept = _run("keep", "thread", 128)
    assert sum(f for f, _ in kept[-4:]) < pages // 20

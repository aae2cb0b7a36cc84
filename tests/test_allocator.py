"""keep_freed_memory: freed large blocks are reused, not faulted in again from the OS."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.multiprocess

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
    for i in range(int(sys.argv[4])):  # what a learner does each update: the same large tensors, allocated and freed
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


# Kept, glibc grows the heap by up to 12 blocks before freed ones are merged and reused (1 to 12 in 20 runs of 64 MiB
# blocks, 8 to 12 in 12 runs of 128 MiB in a thread: torch's worker threads allocate in the same arena between them);
# 24 updates leave the last 4 well past it.
UPDATES = 24
GROWTH = 12


def _run(mode: str, where: str = "main", mib: int = 64, updates: int = UPDATES) -> list[tuple[int, float]]:
    argv = [sys.executable, "-c", PROBE, mode, where, str(mib), str(updates)]
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
    # ...and the heap stops growing, at a plateau at most GROWTH + 1 blocks above the default's.
    assert kept[-1][1] == pytest.approx(kept[-5][1], abs=8)
    assert kept[-1][1] <= default[-1][1] + (GROWTH + 1) * 64


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc tuning")
def test_a_thread_reuses_blocks_larger_than_a_thread_arena():
    """A thread's own glibc arena grows to 64 MiB at most and maps a larger block afresh each time; kept, the
    learner thread allocates from the main arena and reuses it."""
    pages = 128 * 2**20 // 4096
    default = _run("default", "thread", 128)
    assert all(f > pages // 2 for f, _ in default[-4:])
    kept = _run("keep", "thread", 128)
    assert sum(f for f, _ in kept[-4:]) < pages // 20

"""keep_freed_memory: freed large blocks are reused, not faulted in again from the OS."""

import subprocess
import sys

import pytest

PROBE = """
import resource, sys
import torch
from rl_core.runtime.allocator import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
for i in range(16):  # what a learner does each update: the same large tensors, allocated and freed
    before = faults()
    x = torch.empty(16 * 2**20, dtype=torch.float32).fill_(1.0)  # 64 MiB
    del x
    print(faults() - before, rss_mb())
"""


def _run(mode: str) -> list[tuple[int, float]]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=120)
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

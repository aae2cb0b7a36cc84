"""Torch ops and time per call of the recurrences over time, the per-step Python loops they were
(tests/loop_reference.py) against the scans they are (rl_core/losses/scan.py; docs/design-notes.md): GAE,
V-trace (``from_importance_weights``) and RND's reward forward filter, at T=16 and T=512, B=32,
on the CPU (one thread by default) and on CUDA when there is one.

    python benchmarks/scan_ops.py [--batch 32] [--lengths 16,512] [--threads 1] [--dtype float32]

ops: the aten calls of one call, internals included (the CPU profiler's ``key_averages`` counts,
as tests/test_scan.py counts them); us: the best of 5 timings of a batch of calls, per call.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rl_core.losses import advantages as adv_lib
from rl_core.losses import rnd as rnd_lib
from rl_core.losses import vtrace as vtrace_lib
from tests import loop_reference as ref


def cases(T, B, dtype, device):
    g = torch.Generator().manual_seed(T)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype=dtype, device=device)

    discounts = (0.99 * (torch.rand(T, B, generator=g) > 0.05)).to(dtype=dtype, device=device)
    values, rewards, bootstrap, log_rhos = randn(T, B), randn(T, B), randn(B), randn(T, B)
    gae = dict(values=values, rewards=rewards, discounts=discounts, bootstrap_value=bootstrap, lambda_=0.95)
    vtrace = dict(log_rhos=log_rhos, discounts=discounts, rewards=rewards, values=values, bootstrap_value=bootstrap)
    rff = dict(rewards=rewards.abs(), initial=bootstrap.abs(), gamma=0.99)
    return [
        ("gae", ref.gae, adv_lib.gae, gae),
        ("vtrace", ref.vtrace, vtrace_lib.from_importance_weights, vtrace),
        ("rnd filter", ref.reward_forward_filter, rnd_lib.reward_forward_filter, rff),
    ]


def op_count(fn, kwargs) -> int:
    fn(**kwargs)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn(**kwargs)
    return sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))


def microseconds(fn, kwargs, device, budget_s=0.05) -> float:
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    fn(**kwargs)
    sync()
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < budget_s / 5:
        fn(**kwargs)
        n += 1
    sync()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn(**kwargs)
        sync()
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lengths", default="16,512", help="comma-separated unroll lengths T")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    lengths = [int(t) for t in args.lengths.split(",")]
    print(
        f"B={args.batch}, {args.dtype}, {torch.get_num_threads()} CPU thread(s), torch {torch.__version__}"
        + (f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else "")
    )
    header = (
        f"{'':11} {'device':6} {'T':>4} | {'ops loop':>8} {'ops scan':>8} | "
        f"{'us loop':>9} {'us scan':>9} {'loop/scan':>9}"
    )
    print(header)
    print("-" * len(header))
    for device in devices:
        for T in lengths:
            for name, slow, fast, kwargs in cases(T, args.batch, dtype, device):
                ops_slow, ops_fast = op_count(slow, kwargs), op_count(fast, kwargs)
                us_slow, us_fast = microseconds(slow, kwargs, device), microseconds(fast, kwargs, device)
                print(
                    f"{name:11} {device.type:6} {T:4d} | {ops_slow:8d} {ops_fast:8d} | "
                    f"{us_slow:9.1f} {us_fast:9.1f} {us_slow / us_fast:9.2f}"
                )


if __name__ == "__main__":
    main()

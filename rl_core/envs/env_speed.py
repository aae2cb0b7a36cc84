"""A quick throughput figure for an environment package: ``python -m torchbeast_X.env [name] [steps]``.

Steps one env of ``create_env(name, seed=0)`` with uniformly random actions in one process and
prints its steps/s; what the env packages' ``__main__`` blocks share.
"""

from __future__ import annotations

import sys
import time


def main(create_env, default_name: str, default_steps: int, argv=None) -> float:
    argv = sys.argv[1:] if argv is None else argv
    name = argv[0] if argv else default_name
    n = int(argv[1]) if len(argv) > 1 else default_steps
    env = create_env(name, 0)
    env.reset()
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(n)]
    start = time.perf_counter()
    for a in actions:
        _, _, terminated, truncated, _ = env.step(a)
        if terminated or truncated:
            env.reset()
    rate = n / (time.perf_counter() - start)
    print(f"{name}: {rate:.0f} steps/s (one env, one process)")
    env.close()
    return rate

"""Transport overhead: K envs stepped in-process vs. the same K envs behind an env server.

The server runs in its own process (as in training) and a client drives it with
random actions through the real transport (unix socket, typed-array frames).
Prints steps/s of both and their ratio for K = 1, 8, 32.

    python benchmarks/transport_overhead.py [--envs cartpole atari procgen football] [--seconds 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import tempfile
import time

import numpy as np


def make_factory(kind: str):
    if kind == "cartpole":
        import gymnasium as gym

        return lambda seed: gym.make("CartPole-v1")
    if kind == "atari":
        from torchbeast_atari.env import create_env

        return lambda seed: create_env("PongNoFrameskip-v4", seed)
    if kind == "procgen":
        from torchbeast_procgen.env import create_env as create_procgen

        return lambda seed: create_procgen("chaser", seed)
    if kind == "football":
        from torchbeast_football.env import create_env as create_football

        return lambda seed: create_football("academy_empty_goal_close", seed)
    raise ValueError(kind)


def in_process(kind: str, k: int, seconds: float) -> float:
    factory = make_factory(kind)
    envs = [factory(i) for i in range(k)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    n_actions = envs[0].action_space.n
    rng = np.random.default_rng(0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        actions = rng.integers(0, n_actions, k)
        for env, a in zip(envs, actions):
            _, _, terminated, truncated, _ = env.step(int(a))
            if terminated or truncated:
                env.reset()
        steps += k
    return steps / (time.perf_counter() - start)


def _serve(kind: str, k: int, path: str) -> None:
    from rl_core.runtime import transport as tp
    from rl_core.runtime.env_server import EnvServer

    factory = make_factory(kind)
    server = EnvServer(tp.Address("unix", path=path), [lambda i=i: factory(i) for i in range(k)], list(range(k)))
    server.serve_forever()


def through_transport(kind: str, k: int, seconds: float) -> float:
    from rl_core.data.env_spec import EnvSpec
    from rl_core.runtime import transport as tp

    path = os.path.join(tempfile.mkdtemp(), "bench.0")
    proc = mp.get_context("spawn").Process(target=_serve, args=(kind, k, path), daemon=True)
    proc.start()
    try:
        sock = tp.connect(tp.Address("unix", path=path), timeout=60)
        conn = tp.Connection(sock)
        _, hello = conn.recv()
        n_actions = EnvSpec.from_json(tp.field_json(hello["spec"])).num_actions
        conn.recv()  # the reset step
        rng = np.random.default_rng(0)
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            conn.send(tp.ACTION, {"action": rng.integers(0, n_actions, k)})
            conn.recv()
            steps += k
        rate = steps / (time.perf_counter() - start)
        conn.close()
        return rate
    finally:
        proc.terminate()
        proc.join(5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=["cartpole", "atari", "procgen", "football"])
    parser.add_argument("--ks", nargs="+", type=int, default=[1, 8, 32])
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    print(f"{'env':<10} {'K':>3} {'in-process steps/s':>19} {'via transport steps/s':>22} {'ratio':>6}")
    for kind in args.envs:
        for k in args.ks:
            a = in_process(kind, k, args.seconds)
            b = through_transport(kind, k, args.seconds)
            print(f"{kind:<10} {k:>3} {a:>19,.0f} {b:>22,.0f} {b / a:>6.2f}", flush=True)


if __name__ == "__main__":
    main()

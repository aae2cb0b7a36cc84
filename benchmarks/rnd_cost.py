"""What RND adds to a learner update, measured in one run: core-seconds per agent step of one
learner batch of PPO with and without ``--rnd`` (Atari shapes, the package's RND defaults:
T=128, 8 envs, 4 epochs x 4 minibatches), on one thread, and the ratio.

    python benchmarks/rnd_cost.py [--repeats 3] [--threads 1] [--agent ppo]

RND's share: the target and the predictor on every frame of the batch (the intrinsic reward),
and the predictor's training on a quarter of the batch per epoch.  A GPU learner makes both
small next to the env servers' cost (an Atari step is ~275 us of a core here).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def batch_for(agent, spec, T, B, seed=0):
    g = torch.Generator().manual_seed(seed)
    n = spec.num_actions
    batch = {
        "obs": torch.randint(0, 255, (T + 1, B, *spec.obs.shape), dtype=torch.uint8, generator=g),
        "reward": torch.zeros(T + 1, B),
        "done": torch.zeros(T + 1, B, dtype=torch.bool),
        "truncated": torch.zeros(T + 1, B, dtype=torch.bool),
        "action": torch.randint(0, n, (T + 1, B), generator=g),
    }
    for name, (shape, _) in agent.unroll_fields().items():
        batch.setdefault(name, torch.zeros(T + 1, B, *shape))
    batch["log_prob"] = torch.full((T + 1, B), -float(np.log(n)))
    if "env_id" in batch:
        batch["env_id"][:] = torch.arange(B, dtype=torch.float32)
    return batch


def update_seconds(argv, repeats):
    import torchbeast_atari.env as atari
    from rl_core.agents import make_agent
    from rl_core.data.env_spec import DiscreteActions, EnvSpec, Observation
    from rl_core.runtime.entry import parse_flags

    f = parse_flags(atari, argv)
    spec = EnvSpec(Observation((4, 84, 84), "|u1"), DiscreteActions(18))
    agent = make_agent(f, spec)
    torch.manual_seed(0)
    model = agent.build_model()
    if getattr(model, "rnd_ready", None) is not None:
        model.rnd_ready.fill_(True)
    optimizer, _ = agent.make_optimizer(model)
    batch = batch_for(agent, spec, f.unroll_length, f.batch_size)
    times = []
    for r in range(repeats + 1):
        start = time.process_time()
        for loss, _ in agent.updates(model, batch, ()):
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        if r:  # the first is a warm-up
            times.append(time.process_time() - start)
    return float(np.median(times)), f.unroll_length * f.batch_size


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--agent", default="ppo", choices=["ppo", "impala"])
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    base = ["--env=MontezumaRevenge", f"--agent={args.agent}"]
    if args.agent == "impala":  # the same batch for both: 8 unrolls of 128
        base += ["--unroll_length=128", "--batch_size=8"]
    rows = []
    for name, argv in (("without RND", base), ("with --rnd", base + ["--rnd"])):
        seconds, steps = update_seconds(argv, args.repeats)
        rows.append((name, seconds, steps))
    print(
        f"learner update of one batch, {args.agent}, Atari [4, 84, 84], {args.threads} thread(s), "
        f"median of {args.repeats}:"
    )
    print(f"| {'':12} | core-s per batch | core-us per agent step | ratio |")
    print("|---|---|---|---|")
    for name, seconds, steps in rows:
        print(f"| {name:12} | {seconds:.2f} | {1e6 * seconds / steps:.0f} | {seconds / rows[0][1]:.2f} |")


if __name__ == "__main__":
    main()

"""A checkpoint's whole-game returns on Atari with the start's no-op count fixed: the probe behind
docs/experiments/impala.md's "Half the games" note on IMPALA Pong.

    python scripts/returns_by_noops.py RUN/model.tar [--noops 0 1 2 3 4 5 6 7] [--games 1] [--greedy]

DeepMind's protocol starts each game with a random number (0 to --noop_max) of single emulator frames of
no-op; with a frame skip of 4 that count fixes, for the whole game, which emulator frames the agent sees
and acts on.  This plays ``--games`` games per no-op count, all counts side by side (one batched forward
per step), sampling the policy's actions (``--greedy``: its most likely ones, as the final test does), and
prints each game's return and length, then the mean return over odd and over even counts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class _Exactly:
    """Stands in for an AtariEnv's no-op RNG: every draw in [0, n] gives n."""

    def __init__(self, n: int):
        self.n = n

    def integers(self, low, high=None, *args, **kwargs):
        return self.n


def fixed_noop_env(env_pkg, flags, seed: int, noops: int):
    """The package's test env (seeded ``seed``) whose every new game starts with exactly ``noops`` no-ops."""
    env = env_pkg.make_test_env(flags, seed, record=False)
    base = env.unwrapped
    if not hasattr(base, "_np_random") or not hasattr(base, "noop_max"):
        raise SystemExit(f"error: {type(base).__name__} draws no no-ops; this probe needs torchbeast_atari's AtariEnv")
    env.reset(seed=seed)  # seeds the env's RNGs; the fixed draw replaces the no-op one after
    base.noop_max = max(base.noop_max, noops)
    base._np_random = _Exactly(noops)
    return env


def play_games(model, agent, envs: list, greedy: bool) -> list[tuple[float, int]]:
    """One whole game on each env, side by side; (return, length) per env, in the envs' order."""
    n = len(envs)
    obs = [env.reset()[0] for env in envs]
    reward = np.zeros(n, np.float32)
    done = np.ones(n, np.bool_)
    last_action = np.zeros(n, np.int64)
    returns, lengths = np.zeros(n), np.zeros(n, np.int64)
    playing = np.ones(n, np.bool_)
    state = model.initial_state(n)
    while playing.any():
        inputs = {
            "obs": torch.from_numpy(np.stack(obs)[None]),
            "reward": torch.from_numpy(reward[None]),
            "done": torch.from_numpy(done[None]),
            "last_action": torch.from_numpy(last_action[None]),
        }
        with torch.inference_mode():
            actions, _, state = agent.act(model, inputs, state, greedy=greedy)
        for i, env in enumerate(envs):
            if not playing[i]:
                continue
            a = int(actions[0, i])
            o, r, terminated, truncated, info = env.step(a)
            returns[i] += r
            lengths[i] += 1
            reward[i], done[i], last_action[i] = r, bool(terminated or truncated), a
            if info.get("episode_end", terminated or truncated):
                playing[i] = False
            elif done[i]:
                o, _ = env.reset()  # a lost life: the game goes on
            obs[i] = o
    return list(zip(returns.tolist(), lengths.tolist()))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--noops", type=int, nargs="+", default=list(range(8)))
    parser.add_argument("--games", type=int, default=1, help="games per no-op count")
    parser.add_argument("--greedy", action="store_true", help="the most likely action, as the final test plays")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    from rl_core.records import checkpoint_file
    from rl_core.agents import make_agent
    from rl_core.runtime.evaluate_checkpoint import local_spec
    from torchbeast_atari import env as env_pkg

    saved = checkpoint_file.load(str(args.checkpoint), fix="pass the model.tar of a torchbeast_atari run")
    flags = SimpleNamespace(**saved["flags"])
    probe = env_pkg.make_test_env(flags, 0, record=False)
    agent = make_agent(flags, local_spec(probe))
    probe.close()
    model = agent.build_model()
    model.load_state_dict(saved["model_state_dict"])
    model.eval()

    counts = [n for n in args.noops for _ in range(args.games)]
    envs = [fixed_noop_env(env_pkg, flags, args.seed + i, n) for i, n in enumerate(counts)]
    try:
        results = play_games(model, agent, envs, args.greedy)
    finally:
        for env in envs:
            env.close()
    print(f"{args.checkpoint} (step {saved.get('step')}), {'greedy' if args.greedy else 'sampled'} actions")
    print("| no-ops | return | length |\n|---|---|---|")
    for n, (ret, length) in zip(counts, results):
        print(f"| {n} | {ret:.0f} | {length} |")
    for name, parity in (("odd", 1), ("even", 0)):
        rets = [ret for n, (ret, _) in zip(counts, results) if n % 2 == parity]
        if rets:
            print(f"{name} no-op counts: mean return {np.mean(rets):.2f} over {len(rets)} games")


if __name__ == "__main__":
    main()

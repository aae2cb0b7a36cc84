"""What one ReDo recycling does to a trained Atari policy: the probe behind docs/experiments/impala.md's Breakout notes.

    python scripts/recycling_probe.py RUN/model.tar [--draws 4] [--games 16] [--steps 2000] [--envs 8]

The checkpoint's policy plays ``--envs`` training envs (the run's flags: episodic life, sampled actions) for
``--steps`` steps each; every step's inputs are kept.  Then ``--draws`` times: a batch as the learner's
(``--batch_size`` windows of ``--unroll_length`` + 1 consecutive frames, from different envs, at a random step)
is what ``models.recycling.recycle_dormant`` scores, as ``--recycle_period`` does in a run (``--recycle_tau``),
on a copy of the model.  For each draw: the units recycled per layer; on every kept step, the policy's KL
divergence KL(before || after), the share of steps whose most likely action changed, and the mean |change| of
the value; and the mean whole-game return of ``--games`` games played (sampled) by the recycled copy, beside
the unrecycled model's.

Recycling zeroes a dormant unit's outgoing weights, so the function changes by what the dormant units still
contributed: by construction little on the scored batch, but on states the batch lacks it may not be.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from torchbeast_atari import env as atari


def load(path: str):
    """(flags, agent, model, step) of a torchbeast_atari checkpoint, the flags as the run had them."""
    from rl_core.records import checkpoint_file
    from rl_core.agents import make_agent
    from rl_core.data.env_spec import EnvSpec
    from rl_core.runtime.entry import parse_flags

    saved = checkpoint_file.load(path, fix="pass the model.tar of a torchbeast_atari run")
    run_flags = saved.get("flags", {})
    flags = parse_flags(atari, ["--env", run_flags["env"], "--agent", run_flags.get("agent", "impala")])
    for key, value in run_flags.items():
        if hasattr(flags, key):
            setattr(flags, key, value)
    env = atari.make_env(flags, 0)
    obs, _ = env.reset(seed=0)
    spec = EnvSpec.of_env(obs, env.action_space)
    env.close()
    agent = make_agent(flags, spec)
    model = agent.build_model()
    model.load_state_dict(saved["model_state_dict"])
    return flags, agent, model.eval(), saved.get("step")


def keep_inputs(flags, agent, model, envs: int, steps: int, seed: int) -> dict:
    """The model's inputs [steps, envs, ...] (obs, reward, done, last_action) while it plays ``envs`` training envs
    for ``steps`` steps (sampled actions, a game going on after a lost life as in training)."""
    env_list = [atari.make_env(flags, seed + i) for i in range(envs)]
    obs = [np.asarray(env.reset(seed=seed + i)[0]) for i, env in enumerate(env_list)]
    reward = np.zeros(envs, np.float32)
    done = np.ones(envs, np.bool_)
    last_action = np.zeros(envs, np.int64)
    kept = {"obs": [], "reward": [], "done": [], "last_action": []}
    torch.manual_seed(seed)
    for _ in range(steps):
        inputs = {
            "obs": torch.from_numpy(np.stack(obs)[None]),
            "reward": torch.from_numpy(reward[None]),
            "done": torch.from_numpy(done[None]),
            "last_action": torch.from_numpy(last_action[None]),
        }
        for key, value in inputs.items():
            kept[key].append(value[0].clone())
        with torch.inference_mode():
            actions, _, _ = agent.act(model, inputs, (), greedy=False)
        for i, env in enumerate(env_list):
            o, r, terminated, truncated, _ = env.step(int(actions[0, i]))
            reward[i], done[i], last_action[i] = r, terminated or truncated, int(actions[0, i])
            obs[i] = np.asarray(env.reset()[0] if terminated or truncated else o)
    for env in env_list:
        env.close()
    return {k: torch.stack(v) for k, v in kept.items()}


def game_returns(flags, agent, model, envs: int, games: int, seed: int) -> list[float]:
    """Whole-game returns of ``games`` games on training envs, sampled actions (``rl_core.evaluation.episodes.play``); the
    same ``seed`` gives the same envs and the same draws, so two models compare on common random numbers."""
    from rl_core.evaluation import episodes

    torch.manual_seed(seed)
    played = episodes.play(
        model, lambda s: atari.make_env(flags, s), [seed + i for i in range(envs)], games, greedy=False, agent=agent
    )
    return [e["return"] for e in played]


@torch.no_grad()
def outputs(model, inputs: dict, chunk: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Policy log-probabilities [S, B, A] and values [S, B] on kept inputs, ``chunk`` steps at a time."""
    logps, values = [], []
    for start in range(0, inputs["obs"].shape[0], chunk):
        part = {k: v[start : start + chunk] for k, v in inputs.items()}
        out, _ = model(part, ())
        logps.append(F.log_softmax(out["policy_logits"], -1))
        values.append(out["baseline"])
    return torch.cat(logps), torch.cat(values)


def recycled_copy(model, frames: torch.Tensor, tau: float, seed: int):
    """A copy of ``model`` with its units that are tau-dormant on ``frames`` recycled, as a run's learner does
    (the optimizer's state aside); and the units recycled per layer."""
    from models.recycling import recycle_dormant

    recycled = copy.deepcopy(model)
    counts = recycle_dormant(recycled.recycle_pairs(frames[:256]), tau, None, torch.Generator().manual_seed(seed))
    return recycled, list(counts.values())


def policy_change(before, after) -> dict:
    """How far ``after`` = (log-probabilities [S, B, A], values [S, B]) moved from ``before`` on the same inputs:
    KL(before || after) per step (mean, 99th percentile, max), the share of steps whose most likely action
    changed, the mean |change| of the value."""
    (logp0, value0), (logp1, value1) = before, after
    kl = (logp0.exp() * (logp0 - logp1)).sum(-1).flatten()
    return {
        "kl_mean": kl.mean().item(),
        "kl_p99": kl.quantile(0.99).item(),
        "kl_max": kl.max().item(),
        "greedy_changed": (logp0.argmax(-1) != logp1.argmax(-1)).float().mean().item(),
        "value_change": (value1 - value0).abs().mean().item(),
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint")
    p.add_argument("--draws", type=int, default=4)
    p.add_argument("--games", type=int, default=16)
    p.add_argument("--steps", type=int, default=2000, help="steps of each env whose inputs are kept")
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    flags, agent, model, step = load(args.checkpoint)
    T, B, tau = flags.unroll_length, flags.batch_size, flags.recycle_tau
    print(f"{args.checkpoint}: {flags.env}, step {step}; recycling as --recycle_tau {tau} on batches of {B} x {T + 1}")
    kept = keep_inputs(flags, agent, model, args.envs, args.steps, args.seed)
    before = outputs(model, kept)
    base = game_returns(flags, agent, model, args.envs, args.games, args.seed + 1000)
    print(f"unrecycled: {len(base)} games, mean return {np.mean(base):.1f} +- {np.std(base):.1f}")
    print(
        "draw  units recycled per layer  KL(before||after) mean / p99 / max  greedy changed  |dV| mean  games' return"
    )
    rng = np.random.default_rng(args.seed)
    for draw in range(args.draws):
        start = int(rng.integers(0, kept["obs"].shape[0] - T))
        envs = rng.choice(args.envs, size=min(B, args.envs), replace=False)
        frames = kept["obs"][start : start + T + 1, envs].reshape(-1, *kept["obs"].shape[2:])
        recycled, counts = recycled_copy(model, frames, tau, 1_000_003 * args.seed + draw)
        change = policy_change(before, outputs(recycled, kept))
        games = game_returns(flags, agent, recycled, args.envs, args.games, args.seed + 1000)
        units = ", ".join(str(v) for v in counts)
        print(
            f"{draw:>4}  {units:>26s}  {change['kl_mean']:.2e} / {change['kl_p99']:.2e} / {change['kl_max']:.2e}"
            f"  {change['greedy_changed']:14.3f}  {change['value_change']:9.3f}  {np.mean(games):.1f} +- "
            f"{np.std(games):.1f}"
        )


if __name__ == "__main__":
    main()

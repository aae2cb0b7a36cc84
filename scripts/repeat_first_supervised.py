"""How many steps a core needs to hold POPGym's first card when it is told the answer at every step.

RepeatFirst (popgym) pays the agent for naming, at every step, the suit of an episode's first card.  Here the
package's model (the MLP stem, the core, the policy head; ``models.build_model``) is trained by cross-entropy
to that suit, on real POPGym episodes stepped by a uniformly random behaviour, with the learner's unrolls,
carried state, optimizer and gradient clipping (torchbeast_memory's IMPALA defaults).  It separates what the
core and its gradient (truncated BPTT or RTRL at the same unroll) can learn from what the RL signal, a reward
of +-1/414 a step, lets IMPALA learn.

    python scripts/repeat_first_supervised.py --core rtrl --updates 20000
    python scripts/repeat_first_supervised.py --core elstm --env popgym-RepeatFirstEasy-v0
    python scripts/repeat_first_supervised.py --core rtrl --optimizer adam --learning_rate 0.001
    python scripts/repeat_first_supervised.py --core rtrl --mlp_sizes=

Prints the accuracy over the last 200 updates every tenth of the run.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch.nn import functional as F

from models import build_model
from rl_core.config.flags import make_parser
from rl_core.data.env_spec import DiscreteActions, EnvSpec, Observation
from rl_core.numerics.optim import make_optimizer
from torchbeast_memory.env import popgym_env
from torchbeast_memory.presets import IMPALA_DEFAULTS

CORE_FLAGS = {"lstm": "--use_lstm", "elstm": "--use_elstm", "rtrl": "--use_rtrl"}


def unrolls(env_id: str, num_envs: int, unroll_length: int, seed: int):
    """Endless [T, B] unrolls of ``num_envs`` POPGym envs stepped by uniformly random actions, as the learner
    gets them (the model's inputs: obs, done at an episode's first step, the reward and action before it),
    with ``target``, the suit of each episode's first card; the envs start at scattered points of their
    episodes (every RepeatFirst episode has one length)."""
    rng = np.random.default_rng(seed)
    envs = [popgym_env(argparse.Namespace(env=env_id)) for _ in range(num_envs)]  # the package's encoding
    n_act = envs[0].action_space.n
    obs = [env.reset(seed=seed * 1000 + b)[0] for b, env in enumerate(envs)]
    for env in envs:
        for _ in range(int(rng.integers(env.unwrapped.max_episode_length))):
            env.step(int(rng.integers(n_act)))
    first = [int(o.argmax()) for o in obs]
    done, reward, last = [True] * num_envs, [0.0] * num_envs, [0] * num_envs
    while True:
        steps = {k: [] for k in ("obs", "done", "reward", "last_action", "target")}
        for _ in range(unroll_length):
            for k, v in (("obs", np.stack(obs)), ("done", done), ("reward", reward), ("last_action", last)):
                steps[k].append(np.array(v))
            steps["target"].append(np.array(first))
            for b, env in enumerate(envs):
                last[b] = int(rng.integers(n_act))
                obs[b], reward[b], term, trunc, _ = env.step(last[b])
                done[b] = term or trunc
                if done[b]:
                    obs[b], reward[b] = env.reset()[0], 0.0
                    first[b] = int(obs[b].argmax())
        out = {k: torch.as_tensor(np.stack(v)) for k, v in steps.items()}
        out["obs"], out["reward"] = out["obs"].float(), out["reward"].float()
        yield out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="popgym-RepeatFirstMedium-v0")
    p.add_argument("--core", choices=sorted(CORE_FLAGS), default="rtrl")
    p.add_argument("--updates", type=int, default=20000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--forget_bias", type=float, default=IMPALA_DEFAULTS["forget_bias"])
    p.add_argument("--optimizer", choices=["rmsprop", "adam"], default="rmsprop")
    p.add_argument("--learning_rate", type=float, default=IMPALA_DEFAULTS["learning_rate"])
    p.add_argument("--epsilon", type=float, default=IMPALA_DEFAULTS["epsilon"])
    p.add_argument(
        "--mlp_sizes",
        default=IMPALA_DEFAULTS["mlp_sizes"],
        help="The stem's sizes; empty: the observation into the core.",
    )
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    d = IMPALA_DEFAULTS
    flags = make_parser().parse_args(
        [
            CORE_FLAGS[args.core],
            f"--hidden_size={d['hidden_size']}",
            f"--mlp_sizes={args.mlp_sizes}",
            f"--forget_bias={args.forget_bias}",
            f"--optimizer={args.optimizer}",
            f"--learning_rate={args.learning_rate}",
            f"--epsilon={args.epsilon}",
            "--lr_decay=none",
        ]
    )
    B, T = d["num_actors"], d["unroll_length"]
    probe = popgym_env(argparse.Namespace(env=args.env))
    n_obs, n_act = probe.observation_space.shape[0], probe.action_space.n
    model = build_model(flags, EnvSpec(Observation((n_obs,), "<f4"), DiscreteActions(n_act)))
    optimizer, _ = make_optimizer(flags, list(model.parameters()))
    state = model.initial_state(B)
    accuracy, start = [], time.time()
    for update, inputs in enumerate(unrolls(args.env, B, T, args.seed), 1):
        if update > args.updates:
            break
        target = inputs.pop("target")
        outputs, state = model(inputs, state)
        state = tuple(s.detach() for s in state)
        logits = outputs["policy_logits"]
        loss = F.cross_entropy(logits.reshape(-1, n_act), target.reshape(-1), reduction="sum") / B
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), flags.grad_norm_clipping)
        optimizer.step()
        accuracy.append((logits.argmax(-1) == target).float().mean().item())
        if update % max(1, args.updates // 10) == 0:
            print(
                f"{args.env} {args.core} {args.optimizer} {args.learning_rate}: update {update} "
                f"({update * T * B / 1e6:.2f}M steps): accuracy over the last 200 updates "
                f"{np.mean(accuracy[-200:]):.3f} ({time.time() - start:.0f} s)",
                flush=True,
            )


if __name__ == "__main__":
    main()

"""Soft actor-critic from uniform replay (Haarnoja et al. 2018), box or discrete actions (Christodoulou 2019).

Its configuration (torch-free, read by the flags' parser); the agent is ``agent.py``.
"""

from __future__ import annotations

import argparse

from rl_core.agents import shared_flags
from rl_core.agents.spec import AgentSpec
from rl_core.agents.traits import AgentTraits
from rl_core.flag_types import ranged

# SAC's published settings (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications",
# Table 1): Adam 3e-4 for the actor, the critics and the temperature, batches of 256 transitions,
# a replay of 1e6, one gradient step per env step (each transition sampled 256 times on average;
# SEED RL's MuJoCo SAC samples each 4 times with hundreds of actors), tau 0.005, gamma 0.99, two
# hidden layers of 256, no gradient clipping, target entropy -|A|; 10,000 uniformly random steps
# before learning (softlearning's n_initial_exploration_steps).  Sequences of 8 steps travel to
# the replay (storage only: a transition reaches the learner at most 8 steps after it happened).
SAC_DEFAULTS = dict(
    optimizer="adam",
    learning_rate=3e-4,
    epsilon=1e-8,
    lr_decay="none",
    grad_norm_clipping=0.0,
    reward_clipping="none",
    batch_size=256,
    unroll_length=8,
    replay_buffer_size=1_000_000,
    replay_buffer_min_size=10_000,
    random_init_steps=10_000,
    replay_ratio=256.0,
    discounting=0.99,
    mlp_sizes="256,256",
    squash=True,
    std_kind="exp",
    min_std=1e-4,
)


# Discrete SAC on Atari (Christodoulou 2019, Table 2): batches of 64, one update every 4 env steps
# (each transition sampled 16 times), 20,000 random steps first, target entropy 0.98 log|A|, the
# DQN network (here the stem's fc 512 and no further hidden layer), rewards clipped.  The paper copies
# its targets every 8,000 steps; here they follow by Polyak averaging (tau 0.005).  The replay is
# 200,000 transitions (the paper's 1e6 of Atari frames is 7 GB even with each frame kept once).
# Image packages (Atari, Procgen, DMLab) take these for --agent sac.
SAC_DISCRETE_IMAGE_DEFAULTS = dict(
    batch_size=64,
    replay_ratio=16.0,
    random_init_steps=20_000,
    replay_buffer_min_size=20_000,
    replay_buffer_size=200_000,
    target_entropy_ratio=0.98,
    mlp_sizes="",
    reward_clipping="abs_one",
)


def add_flags(p: argparse.ArgumentParser) -> None:
    a = p.add_argument_group(
        "sac (--replay_buffer_size, --replay_buffer_min_size, --batch_size count transitions, "
        "--replay_ratio samples; --target_entropy)"
    ).add_argument
    a(
        "--polyak_tau",
        type=ranged(float, "(0, 1]"),
        default=0.005,
        help="Target critics move by tau towards the critics every learner step.",
    )
    a(
        "--random_init_steps",
        type=ranged(int, "[0, inf)"),
        default=0,
        help="A fresh run's first steps (all envs together) take uniformly random actions.",
    )
    a(
        "--learn_temperature",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Learn alpha towards --target_entropy (else alpha is --entropy_cost).",
    )
    a(
        "--initial_temperature",
        type=ranged(float, "(0, inf)"),
        default=1.0,
        help="alpha at the start when it is learned.",
    )
    a(
        "--target_entropy_ratio",
        type=ranged(float, "[0, 1]"),
        default=0.98,
        help="Discrete actions: the target entropy is this times log|A| unless --target_entropy is given "
        "(box actions: -|A|).",
    )


def check_flags(parser: argparse.ArgumentParser, flags: argparse.Namespace) -> None:
    if flags.stem_value:
        parser.error(
            "--stem_value adds a value head on the stem beside the core of impala and the on-policy agents; "
            "--agent sac has no recurrent core: drop --stem_value"
        )
    if flags.entropy_decay != "none":
        parser.error(
            "--entropy_decay schedules the entropy cost of impala and the on-policy agents; --agent sac "
            "learns its temperature or keeps --entropy_cost: drop --entropy_decay"
        )
    if not flags.squash:
        parser.error(
            "--agent sac samples a tanh-squashed Gaussian (its log-probabilities carry the tanh "
            "correction): drop --no-squash"
        )
    shared_flags.check_replay(parser, flags)
    if not flags.learn_temperature and flags.entropy_cost <= 0:
        parser.error("--no-learn_temperature fixes alpha at --entropy_cost, which must be > 0")


SPECS = (
    AgentSpec(
        name="sac",
        summary="soft actor-critic, box or discrete actions",
        make="rl_core.agents.sac.agent:SACAgent",
        traits=AgentTraits(
            replays=True,
            sizing="fixed",
            recurrent=False,
            rank_shares=("replay_buffer_size", "replay_buffer_min_size", "random_init_steps"),
        ),
        action_kinds=("discrete", "box"),
        defaults=SAC_DEFAULTS,
        flag_groups=(
            shared_flags.learning,
            shared_flags.actor_critic,
            shared_flags.replay,
            shared_flags.continuous,
            add_flags,
        ),
        check=check_flags,
    ),
)

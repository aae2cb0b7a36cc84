"""R2D2: recurrent distributed Q-learning from prioritized sequence replay (Kapturowski et al. 2019).

Its configuration (torch-free, read by the flags' parser); the agent is ``agent.py``.
"""

from __future__ import annotations

import argparse

from rl_core.agents import shared_flags
from rl_core.agents.spec import AgentSpec
from rl_core.agents.traits import AgentTraits
from rl_core.flag_types import ranged

# R2D2's published settings (Kapturowski et al. 2019, Table 2; SEED RL's Atari R2D2): Adam 1e-4 with
# eps 1e-3, gradient norm clip 40, batches of 64 sequences of 80 steps after a 40-step burn-in,
# 5-step double-Q targets with gamma 0.997 and value rescaling instead of reward clipping, the
# target network copied every 2,500 learner steps, each env step replayed 1.5 times (SEED).  A
# package's own defaults (``agent_defaults``) go over these.
R2D2_DEFAULTS = dict(
    optimizer="adam",
    learning_rate=1e-4,
    epsilon=1e-3,
    lr_decay="none",
    grad_norm_clipping=40.0,
    reward_clipping="none",
    batch_size=64,
    unroll_length=80,
    burn_in=40,
    n_steps=5,
    discounting=0.997,
    target_update_period=2500,
    replay_ratio=1.5,
    hidden_size=512,
    dueling_hidden_size=512,
    replay_buffer_min_size=200,
)

# The paper's agent at the scale of small tasks on a CPU (T=20 after a burn-in of 10, B=32, replay ratio 8, Adam at
# 5e-4 decaying linearly: torchbeast_gym's, chosen on CartPole-v1, docs/experiments/r2d2.md), with 100k steps of
# replay (sequences overlap by half) and a greedy validation every 250k steps: what torchbeast_minatar and
# torchbeast_memory start from.
R2D2_SMALL_TASK_DEFAULTS = dict(
    learning_rate=5e-4,
    lr_decay="linear",
    num_actors=16,
    num_servers=1,
    unroll_length=20,
    burn_in=10,
    batch_size=32,
    replay_buffer_size=10_000,
    replay_buffer_min_size=500,
    replay_ratio=8.0,
    target_update_period=200,
    discounting=0.99,
    hidden_size=128,
    dueling_hidden_size=128,
    validate_step_every=250_000,
)


def add_flags(p: argparse.ArgumentParser) -> None:
    a = p.add_argument_group("r2d2 (prioritized sequence replay)").add_argument
    a(
        "--burn_in",
        type=ranged(int, "[0, inf)"),
        default=40,
        help="Steps before each training sequence of --unroll_length that only warm up the recurrent state "
        "(no gradient); a stored sequence holds burn_in + unroll_length + 1 steps.",
    )
    a(
        "--sequence_stride",
        type=ranged(int, "[0, inf)"),
        default=0,
        help="New steps between consecutive stored sequences of an env (0: unroll_length / 2, so that training "
        "sequences overlap by half, as in R2D2).",
    )
    a(
        "--priority_exponent",
        type=ranged(float, "[0, inf)"),
        default=0.9,
        help="Priority exponent alpha: P(i) ~ p_i^alpha.",
    )
    a(
        "--importance_sampling_exponent",
        type=ranged(float, "[0, 1]"),
        default=0.6,
        help="Importance-sampling exponent beta: w_i ~ (N P(i))^-beta, normalized by the batch's maximum.",
    )
    a(
        "--priority_eta",
        type=ranged(float, "[0, 1]"),
        default=0.9,
        help="Sequence priority eta max|delta| + (1 - eta) mean|delta|.",
    )
    a("--n_steps", type=ranged(int, "[1, inf)"), default=5, help="n of the n-step double-Q targets.")
    a(
        "--value_function_rescaling_epsilon",
        type=ranged(float, "[0, inf)"),
        default=1e-3,
        help="epsilon of h(x) (0: no epsilon x).",
    )
    a(
        "--target_update_period",
        type=ranged(int, "[1, inf)"),
        default=2500,
        help="Learner steps between target network copies.",
    )
    a(
        "--eval_epsilon",
        type=ranged(float, "[0, 1]"),
        default=1e-3,
        help="epsilon-greedy rate of validation and the final test.",
    )
    a(
        "--epsilon_base",
        type=ranged(float, "[0, 1]"),
        default=0.4,
        help="Env i of N explores with base^(1 + alpha i / (N - 1)).",
    )
    a("--epsilon_alpha", type=ranged(float, "[0, inf)"), default=7.0, help="alpha of the per-env epsilons (Ape-X).")
    a("--dueling_hidden_size", type=ranged(int, "[1, inf)"), default=512, help="Hidden layer of each dueling stream.")
    a(
        "--replay_frame_stack",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="Observations are frame stacks [C, H, W] shifting by a frame a step (Atari's): the replay keeps "
        "each frame once, not C times (Atari's default).",
    )


def check_flags(parser: argparse.ArgumentParser, flags: argparse.Namespace) -> None:
    if flags.stem_value:
        parser.error(
            "--stem_value adds a value head on the stem beside the core of impala and the on-policy agents; "
            "--agent r2d2 learns Q-values through its core: drop --stem_value"
        )
    if flags.entropy_decay != "none":
        parser.error(
            "--entropy_decay schedules the entropy cost of impala and the on-policy agents; --agent r2d2 "
            "has no entropy term: drop --entropy_decay"
        )
    shared_flags.check_replay(parser, flags)
    if flags.batch_size > flags.replay_buffer_min_size:
        parser.error(
            f"--batch_size {flags.batch_size} exceeds --replay_buffer_min_size "
            f"{flags.replay_buffer_min_size}: raise the minimum or lower the batch"
        )
    if flags.sequence_stride > flags.burn_in + flags.unroll_length:
        parser.error(
            "--sequence_stride exceeds the stored sequence (burn_in + unroll_length): steps would never be stored"
        )


SPECS = (
    AgentSpec(
        name="r2d2",
        summary="recurrent Q-learning from prioritized sequence replay",
        make="rl_core.agents.r2d2.agent:R2D2Agent",
        traits=AgentTraits(replays=True, sizing="scaled", rank_shares=("replay_buffer_size", "replay_buffer_min_size")),
        action_kinds=("discrete",),
        defaults=R2D2_DEFAULTS,
        flag_groups=(shared_flags.learning, shared_flags.replay, add_flags),
        check=check_flags,
    ),
)

"""torchbeast_minatar's presets: the package's flag values (every agent's) and per agent, as a table (``PRESETS``,
rl_core/config/presets.py).  Data only: no torch, no minatar; the measurements behind each value are in
docs/experiments/minatar.md."""

from __future__ import annotations

from rl_core.config.presets import RECURRENT, Preset, on_policy_rows
from rl_core.agents.r2d2 import R2D2_SMALL_TASK_DEFAULTS
from rl_core.agents.sac import SAC_DISCRETE_IMAGE_DEFAULTS

# Every agent: MinAtar's stem, its rewards unclipped (a step may score 2 in Asterix) and 5M agent steps, the budget of
# the MinAtar paper's curves.
PACKAGE_DEFAULTS = dict(model="minatar", reward_clipping="none", total_steps=5_000_000)

# IMPALA: the classic-control settings (torchbeast_gym's, 16 envs on one server, B=8, T=20, lr 0.003) on MinAtar's
# stem: docs/experiments/minatar.md (IMPALA).
IMPALA = dict(
    num_actors=16,
    num_servers=1,
    batch_size=8,
    unroll_length=20,
    learning_rate=0.003,
    entropy_cost=0.01,
)

# PPO: gymnax-blines' MinAtar settings (64 envs, 4 epochs of 8 minibatches, lr 5e-4 constant, discount 0.999)
# without its value clipping, fed as cleanrl feeds it (lockstep, split minibatches), and 16-step rollouts where
# gymnax-blines has 128: eight times the updates per agent step.  With the value clipped at 0.2 Breakout stayed near 6
# from 1M to 5M; unclipped at T=128 it reached 14.4 at seed 1 and stayed near 6 at seed 2; at T=16 21.9 at 5M (seed 1)
# and 10.75 at 2M (seed 2), Freeway 56.1 (62.9 at T=128): docs/experiments/minatar.md (PPO).
PPO = dict(
    num_actors=64,
    num_servers=2,
    unroll_length=16,
    batch_size=64,
    optimizer="adam",
    learning_rate=5e-4,
    epsilon=1e-5,
    lr_decay="none",
    num_epochs=4,
    num_minibatches=8,
    batch_mode="split",
    ppo_clip=0.2,
    advantage="gae",
    gae_lambda=0.95,
    discounting=0.999,
    entropy_cost=0.01,
    baseline_cost=0.5,
    grad_norm_clipping=0.5,
    advantage_normalization=True,
    init="orthogonal",
    deterministic=True,
)
PPO_ONLY = ("batch_mode", "deterministic")  # the one-pass variants keep the asynchronous runtime

# R2D2: the paper's recurrent agent (rl_core.agents.r2d2.R2D2_DEFAULTS: an LSTM over prioritized sequences with
# burn-in and stored state, Adam, n-step double Q with value rescaling) at the small-task scale, which is MinAtar DQN's
# discount (0.99) and replay (100k steps): docs/experiments/minatar.md (R2D2).
R2D2 = dict(R2D2_SMALL_TASK_DEFAULTS, use_lstm=True, valid_num_episodes=16)

# Discrete SAC (Christodoulou 2019) as on Atari (rl_core.agents.sac.SAC_DISCRETE_IMAGE_DEFAULTS: batches of 64, no
# MLP after the stem) at MinAtar's replay (100k transitions, learning from 5,000), each transition sampled 4 times, a
# lower target entropy, and uniform random actions for the first 100k steps (MinAtar DQN's epsilon goes from 1 to 0.1
# over them).  With 5,000 random steps Freeway's rare crossings never reached the critic before the policy narrowed:
# 0.00 by 0.71M; with 100k, 33.7 at 1M: docs/experiments/minatar.md (SAC).
SAC = dict(
    SAC_DISCRETE_IMAGE_DEFAULTS,
    num_actors=16,
    num_servers=1,
    replay_buffer_size=100_000,
    replay_buffer_min_size=5_000,
    random_init_steps=100_000,
    replay_ratio=4.0,
    target_entropy_ratio=0.5,
    reward_clipping="none",
)


# The one-pass variants (VPG, AWR, V-MPO, V-trace): PPO's optimizer and loss settings on IMPALA's data shape, 16 envs
# and batches of 8 unrolls of 20 steps (31k updates in 5M steps, where PPO's batches of 64 x 128 give 610): VPG on
# Breakout reached 5.08 at 1M against 1.36 with PPO's batches: docs/experiments/minatar.md (The one-pass agents).
ONE_PASS = dict(num_actors=16, num_servers=1, unroll_length=20, batch_size=8)

# AWR at a temperature of 3 over its normalised advantages (the paper's 1 collapsed its policy on Freeway, whose
# rewards are rare: entropy 1.79 -> 0.0008 by 0.63M, return 0 at 5M; at 3 the policy kept its entropy near 1 and
# reached 25.2 at 1M): docs/experiments/minatar.md (AWR's temperature).
AWR = dict(awr_beta=3.0)


PRESETS = (
    Preset(IMPALA, agents="impala"),
    Preset(R2D2, agents="r2d2"),
    Preset(SAC, agents="sac"),
    *on_policy_rows(PPO, PPO_ONLY),
    Preset(ONE_PASS, agents=("vpg", "awr", "vmpo", "vtrace")),
    Preset(AWR, agents="awr"),
    # with a recurrent core, PPO's minibatches keep unrolls whole (a core cannot learn from split transitions)
    Preset(dict(batch_mode="shuffle"), agents="ppo", core=RECURRENT),
)

"""torchbeast_gym's presets: flag values per agent, with a recurrent core and with --rnd, as a table (``PRESETS``,
rl_core/config/presets.py).  Data only: no torch, no gymnasium; the measurements behind each value are in
docs/experiments/."""

from __future__ import annotations

from rl_core.config.presets import RECURRENT, Preset

# IMPALA for classic control (RMSprop eps 0.01, a value MLP of its own), by a sweep on CartPole-v1:
# docs/experiments/impala.md (CartPole); one env server: docs/experiments/throughput.md (Every agent, one table).
IMPALA_DEFAULTS = dict(
    num_actors=16,
    num_servers=1,
    batch_size=8,
    unroll_length=20,
    learning_rate=0.003,
    entropy_cost=0.01,
    total_steps=500_000,
)
# With a recurrent core, by sweeps on the memory task and CartPole-v1: docs/experiments/recurrent.md.
IMPALA_RECURRENT_DEFAULTS = dict(batch_size=16, learning_rate=0.002, epsilon=1e-4, forget_bias=1.0, mlp_sizes="256")


# The on-policy agents: cleanrl's ppo.py CartPole settings (Huang et al. 2022, "The 37 Implementation Details of
# PPO"), as 4 unrolls of 128 steps from 8 envs: docs/experiments/ppo.md (On-policy variants).
ON_POLICY = dict(
    optimizer="adam",
    learning_rate=2.5e-4,
    epsilon=1e-5,
    num_actors=8,
    unroll_length=128,
    batch_size=4,
    grad_norm_clipping=0.5,
    reward_clipping="none",
    entropy_cost=0.01,
    baseline_cost=0.5,
    gae_lambda=0.95,
    advantage_normalization=True,
    init="orthogonal",
    ppo_clip_decay="none",
)
# PPO: rl-baselines3-zoo's tuned CartPole-v1 settings (Raffin et al., hyperparams/ppo.yml), the clip decaying too,
# over 200k steps: docs/experiments/ppo.md (PPO: why the tuned settings; the fix: the clip decays).
PPO_TUNED = dict(
    unroll_length=32,
    batch_size=8,
    num_epochs=20,
    num_minibatches=1,
    discounting=0.98,
    gae_lambda=0.8,
    entropy_cost=0.0,
    learning_rate=1e-3,
    total_steps=200_000,
    ppo_clip_decay="linear",
)
# cleanrl's PPO minibatches, which AWR takes, and --agent ppo --rnd keeps (the corridor: docs/experiments/rnd.md).
CLEANRL_PPO = dict(num_epochs=4, num_minibatches=4, batch_mode="split")
# V-MPO takes PPO's tuned settings: docs/experiments/ppo.md (V-MPO's flake and its new defaults).
# R2D2 for classic control and small memory tasks, by a sweep on CartPole-v1 with an LSTM: docs/experiments/r2d2.md.
R2D2 = dict(
    optimizer="adam",
    learning_rate=5e-4,
    epsilon=1e-3,
    lr_decay="linear",
    grad_norm_clipping=40.0,
    reward_clipping="none",
    num_actors=16,
    unroll_length=20,
    burn_in=10,
    batch_size=32,
    replay_buffer_size=5000,
    replay_buffer_min_size=200,
    replay_ratio=8.0,
    target_update_period=100,
    discounting=0.99,
    n_steps=5,
    hidden_size=64,
    dueling_hidden_size=64,
    total_steps=500_000,
)


# SAC: the paper's update with smaller networks and a shorter start, by a sweep on CartPole-v1 and Pendulum-v1:
# docs/experiments/sac.md (CartPole and Pendulum).
SAC = dict(
    num_actors=4,
    num_servers=1,
    mlp_sizes="64,64",
    replay_buffer_size=100_000,
    replay_buffer_min_size=1000,
    random_init_steps=1000,
    replay_ratio=256.0,
    target_entropy_ratio=0.1,
    learning_rate=1e-3,
    total_steps=100_000,
)


# RND on small tasks: the paper's settings (rl_core.agents.RND_DEFAULTS) over the agent's, one batch of random steps
# first; IMPALA takes the paper's entropy cost, PPO and V-MPO cleanrl's PPO: docs/experiments/rnd.md.
RND = dict(rnd_init_steps=1024)


# cleanrl's values of the flags PPO's tuned settings change (``discounting`` aside: RND's 0.999 sets it): what
# ``--agent ppo --rnd`` runs with, and what the corridor's control without RND is given.
CLEANRL_OVER_TUNED = dict(
    unroll_length=128,
    batch_size=4,
    num_epochs=4,
    num_minibatches=4,
    gae_lambda=0.95,
    entropy_cost=0.01,
    learning_rate=2.5e-4,
    total_steps=IMPALA_DEFAULTS["total_steps"],
    ppo_clip_decay="none",
)

# With a recurrent core, IMPALA takes its recurrent settings and the on-policy agents' minibatches keep unrolls whole
# (``split`` modes need transitions).  RND: IMPALA takes the paper's entropy cost, PPO and V-MPO cleanrl's PPO.
PRESETS = (
    Preset(ON_POLICY, agents=("vpg", "ppo", "awr", "vmpo", "vtrace")),
    Preset(dict(CLEANRL_PPO, **PPO_TUNED), agents="ppo"),
    Preset(dict(num_epochs=1, num_minibatches=1, learning_rate=1e-3), agents="vpg"),
    Preset(CLEANRL_PPO, agents="awr"),
    Preset(dict(CLEANRL_PPO, **PPO_TUNED), agents="vmpo", why="docs/experiments/ppo.md (V-MPO's flake)"),
    Preset(dict(num_epochs=1, num_minibatches=1, advantage="vtrace", learning_rate=1e-3), agents="vtrace"),
    Preset(R2D2, agents="r2d2"),
    Preset(SAC, agents="sac"),
    Preset(IMPALA_RECURRENT_DEFAULTS, agents="impala", core=RECURRENT),
    Preset(dict(batch_mode="shuffle"), agents=("ppo", "awr", "vmpo"), core=RECURRENT),
    Preset(RND, rnd=True),
    Preset(dict(entropy_cost=0.001), agents="impala", rnd=True),
    Preset(CLEANRL_OVER_TUNED, agents=("ppo", "vmpo"), rnd=True),
)

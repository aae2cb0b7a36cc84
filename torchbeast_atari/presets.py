"""torchbeast_atari's presets: flag values per agent, with a recurrent core and with --rnd, as a table
(``PRESETS``, rl_core/config/presets.py).  Data only: no torch, no ALE; the measurements behind each value are in
docs/experiments/."""

from __future__ import annotations

from rl_core.agents.sac import SAC_DISCRETE_IMAGE_DEFAULTS
from rl_core.config.presets import RECURRENT, MemoryShare, Preset, on_policy_rows

FRAME_BYTES = 84 * 84  # one preprocessed frame, uint8 (env.py: FRAME_SIZE)
FRAME_STACK = 4  # frames an observation stacks (env.py: FRAME_STACK)

# PPO as Schulman et al. 2017 (Table 5) and cleanrl's ppo_atari.py train it, fed as cleanrl feeds it (lockstep, split
# minibatches, the value clipped): docs/experiments/ppo.md (Side by side with cleanrl's ppo_atari.py).
PPO_DEFAULTS = dict(
    num_actors=8,
    num_servers=2,
    unroll_length=128,
    batch_size=8,
    optimizer="adam",
    learning_rate=2.5e-4,
    epsilon=1e-5,
    num_epochs=4,
    num_minibatches=4,
    batch_mode="split",
    ppo_clip=0.1,
    advantage="gae",
    gae_lambda=0.95,
    entropy_cost=0.01,
    baseline_cost=0.5,
    grad_norm_clipping=0.5,
    reward_clipping="abs_one",
    advantage_normalization=True,
    init="orthogonal",
    total_steps=10_000_000,
    value_clip=0.1,
    deterministic=True,
)
PPO_ONLY = ("batch_mode", "value_clip", "deterministic")  # the one-pass variants keep the asynchronous runtime


# With a recurrent core, PPO's minibatches keep unrolls whole (a core cannot learn from split transitions); IMPALA's
# stem gets a value head of its own (--stem_value): read only through the core, the stem's features grew until the
# core's gates saturated and Pong stayed at -20.3 to 2.4M; with it the RTRL eLSTM learned Pong from scratch
# (docs/experiments/recurrent.md, "A value head on the stem").
RECURRENT_PPO = dict(batch_mode="shuffle")
RECURRENT_IMPALA = dict(stem_value=True)


# R2D2: the paper's recurrent agent (rl_core.agents.r2d2.R2D2_DEFAULTS) scaled to thousands of updates on 2 cores:
# docs/experiments/r2d2.md (R2D2 on Atari: the defaults).
R2D2_SEQUENCE = dict(batch_size=8, unroll_length=40, burn_in=20)


# Its replay fills a quarter of the machine's memory, each sequence's frames kept once: burn-in, T, the bootstrap
# step and the first stack's three older frames.
R2D2_REPLAY = MemoryShare(0.25, item_bytes=(20 + 40 + 1 + FRAME_STACK - 1) * FRAME_BYTES, minimum=1000)
R2D2 = dict(
    R2D2_SEQUENCE,
    use_lstm=True,
    replay_ratio=1.0,
    learning_rate=2e-4,
    target_update_period=100,
    replay_buffer_size=R2D2_REPLAY,
    replay_buffer_min_size=500,
    replay_frame_stack=True,
    validate_step_every=250_000,
    valid_num_episodes=8,
    total_steps=50_000_000,
)


# IMPALA: torchbeast's settings with six changes, each kept after runs to 5M agent steps on 2 cores:
# docs/experiments/impala.md (Atari: every run to 5M, one row each; the history, run by run).
IMPALA_ATARI = dict(
    init="orthogonal",
    batch_size=8,
    num_actors=56,
    recycle_period=1000,
    lr_decay="none",
    entropy_cost=0.01,
    entropy_decay="linear",
)


# RND as Burda et al. 2018 (Table 5, Appendix A; OpenAI's run_atari.py) play and train it, on 8 envs with the
# observation statistics' random start scaled to them (50 rollouts of 128 steps each): docs/design-notes.md (RND).
RND_ENV = dict(
    sticky_actions=0.25,
    disable_episodic_life=True,
    max_episode_frames=18_000,
    reward_clipping="abs_one",
    rnd_channels=1,
)
# RND keeps the asynchronous runtime and whole-unroll minibatches it was measured with.
RND_PPO = dict(
    learning_rate=1e-4,
    lr_decay="none",
    entropy_cost=0.001,
    ppo_clip=0.1,
    num_epochs=4,
    num_minibatches=4,
    unroll_length=128,
    gae_lambda=0.95,
    baseline_cost=1.0,
    ext_coef=2.0,
    int_coef=1.0,
    intrinsic_discounting=0.99,
    discounting=0.999,
    rnd_init_steps=50 * 128 * 8,
    num_actors=8,
    batch_size=8,
    batch_mode="shuffle",
    value_clip=0.0,
    deterministic=False,
)


# IMPALA keeps torchbeast's settings with the changes above, PPO the published Atari ones fed as cleanrl's, R2D2 the
# paper's recurrent agent at this scale; VPG, AWR, V-MPO and V-trace take PPO's data path and optimizer with one pass
# per batch, on the asynchronous runtime.  With --rnd: the paper's Atari environment for every agent, and its PPO
# settings for PPO.
PRESETS = (
    Preset(IMPALA_ATARI, agents="impala"),
    Preset(R2D2, agents="r2d2"),
    Preset(dict(SAC_DISCRETE_IMAGE_DEFAULTS, replay_frame_stack=True), agents="sac"),
    *on_policy_rows(PPO_DEFAULTS, PPO_ONLY),
    Preset(RECURRENT_PPO, agents="ppo", core=RECURRENT),
    Preset(RECURRENT_IMPALA, agents="impala", core=RECURRENT),
    Preset(RND_ENV, rnd=True),
    Preset(RND_PPO, agents="ppo", rnd=True),
)

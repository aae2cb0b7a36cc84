"""torchbeast_procgen's presets: flag values per agent, as a table (``PRESETS``, rl_core/config/presets.py; IMPALA
keeps the R2AC settings that ``env.add_flags`` sets, with the schedules below).  Data only: no torch, no envpool."""

from __future__ import annotations

from rl_core.config.presets import Preset, on_policy_rows
from rl_core.agents.sac import SAC_DISCRETE_IMAGE_DEFAULTS

# PPO as Cobbe et al. 2020 ("Leveraging Procedural Generation", Table 1) train it, scaled from 64 envs to this
# package's 48; their reward normalization is the return-std value normalization here.
PPO_DEFAULTS = dict(
    unroll_length=256,
    batch_size=48,
    optimizer="adam",
    learning_rate=5e-4,
    epsilon=1e-5,
    num_epochs=3,
    num_minibatches=8,
    batch_mode="shuffle",
    discounting=0.999,
    gae_lambda=0.95,
    ppo_clip=0.2,
    entropy_cost=0.01,
    baseline_cost=0.5,
    grad_norm_clipping=0.5,
    reward_clipping="none",
    value_normalization="return_std",
    advantage_normalization=True,
    lr_decay="none",
    total_steps=25_000_000,
)

# IMPALA: R2AC's settings (env.py's) with the Atari package's schedules, a constant learning rate and the entropy
# cost decaying linearly to 0 over --total_steps, kept after starpilot runs to 5M agent steps on 2 cores:
# docs/experiments/impala.md (Procgen starpilot).
IMPALA_SCHEDULES = dict(lr_decay="none", entropy_decay="linear")


# PPO Cobbe et al.'s; the other on-policy agents PPO's with one pass per batch; SAC discrete SAC's image settings.
PRESETS = (
    Preset(IMPALA_SCHEDULES, agents="impala"),
    Preset(SAC_DISCRETE_IMAGE_DEFAULTS, agents="sac"),
    *on_policy_rows(PPO_DEFAULTS),
)

"""torchbeast_football's presets: SEED RL's Football V-trace settings (the package's, IMPALA's) and PPO's, as a table
(``PRESETS``, rl_core/config/presets.py).  Data only: no torch, no envpool; each value names its source."""

from __future__ import annotations

from rl_core.config.presets import Preset, on_policy_rows

# Where the defaults come from (google-research/seed_rl):
#   [sh]  gcp/train_football_scoring.sh: 11_vs_11_hard_stochastic, reward_experiment scoring, batch_size 32,
#         unroll_length 32, inference_batch_size 64, 500M frames, discounting 0.997, entropy_cost 3.19e-5,
#         lambda_ 0.9, learning_rate 5.53e-5
#   [net] football/networks.py GFootball: the IMPALA ResNet with four stacks (16, 32, 32, 32) of a conv, a
#         max-pool and two residual blocks each, fc 256, no LSTM; frames divided by 255
#   [src] football/vtrace_main.py: Adam (Keras's epsilon 1e-7), constant rate; agents/vtrace/learner.py:
#         baseline_cost 0.5, max_abs_reward 0 (no reward clipping), no gradient clipping
IMPALA_DEFAULTS = {
    "model": "resnet",
    "resnet_channels": "16,32,32,32",  # [net]
    "num_actors": 32,  # SEED: 25 workers x 8 envs; 32 envs on 2 servers fit 2 cores
    "num_servers": 2,
    "batch_size": 32,  # [sh]
    "unroll_length": 32,  # [sh]
    "discounting": 0.997,  # [sh]
    "entropy_cost": 3.1948e-5,  # [sh]
    "vtrace_lambda": 0.9,  # [sh]
    "optimizer": "adam",  # [src]
    "learning_rate": 3e-4,  # [sh] has 5.53e-5 for 500M steps; 3e-4 chosen by runs on
    # academy_empty_goal_close: see docs/experiments/football.md
    "epsilon": 1e-7,  # [src]
    "lr_decay": "none",  # [src]
    "baseline_cost": 0.5,  # [src]
    "reward_clipping": "none",  # [src]
    "grad_norm_clipping": 0.0,  # [src]
    "total_steps": 50_000_000,  # [sh] trains 500M; a tenth of it is days on a 2-core machine
}

# PPO: the gfootball repository's scoring-reward PPO runs (google-research/football,
# gfootball/examples/repro_scoring_{easy,hard}_ppo2.sh: 16 envs x 512 steps) on this package's network and 32 envs.
PPO_DEFAULTS = {
    **IMPALA_DEFAULTS,
    "unroll_length": 512,
    "batch_size": 32,
    "learning_rate": 1.1879e-4,
    "epsilon": 1e-5,
    "num_epochs": 2,
    "num_minibatches": 4,
    "batch_mode": "shuffle",
    "ppo_clip": 0.115,
    "discounting": 0.997,
    "gae_lambda": 0.95,
    "entropy_cost": 0.00155,
    "baseline_cost": 0.5,
    "grad_norm_clipping": 0.76,
}


# Every agent takes SEED RL's Football V-trace settings (above); PPO the gfootball repository's; VPG, AWR, V-MPO and
# V-trace PPO's with one pass per batch.
PRESETS = (Preset(IMPALA_DEFAULTS), *on_policy_rows(PPO_DEFAULTS))

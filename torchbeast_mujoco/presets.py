"""torchbeast_mujoco's presets: every agent's flag values on MuJoCo, and per agent, as a table (``PRESETS``,
rl_core/config/presets.py).  Data only: no torch, no envpool; each value names its source."""

from __future__ import annotations

from rl_core.config.presets import Preset, on_policy_rows

# Where the defaults come from (google-research/seed_rl):
#   [sh]  mujoco/local_baseline_HalfCheetah-v2.sh: run_local.sh mujoco ppo 8 32 --total_environment_frames=2000000
#         --batch_mode=split --epochs_per_step=10 --lr_decay_multiplier=0 --step_size_transitions=2048
#         --batch_size_transitions=64 --unroll_length=16 --learning_rate=3e-4 --clip_norm=0.5
#   [gin] mujoco/gin/ppo.gin
#   [src] SEED's code defaults: GeneralizedOnPolicyLoss(baseline_cost=1., huber_delta=None,
#         value_ppo_style_clip_eps=None, max_abs_reward=None); ppo(normalize_advantages=False);
#         continuous_action_config(action_postprocessor='Tanh'); tf.keras.optimizers.Adam(epsilon=1e-7).

# Every agent on MuJoCo (add_flags sets these too).
ENV_DEFAULTS = {
    "num_actors": 16,  # SEED runs 8 actors x 32 envs = 256 [sh]; 16 envs on 2 servers fit 2 cores
    "num_servers": 2,
    "reward_clipping": "none",  # [src] max_abs_reward=None
    "discounting": 0.99,  # [gin] GeneralizedOnPolicyLoss.discount_factor
    "mlp_sizes": "64,64",  # [gin] num_layers_* = 2, num_units_* = 64; models/mlp.py's MLP is tanh [gin]
    "value_net": "separate",  # [gin] ContinuousControlAgent.shared = False
    "unroll_length": 16,  # [sh] --unroll_length=16
    "grad_norm_clipping": 0.5,  # [sh] --clip_norm=0.5
}

# SEED's on-policy agent as ppo.gin configures it, less what is PPO's own.
ON_POLICY_DEFAULTS = {
    **ENV_DEFAULTS,
    "optimizer": "adam",  # [gin] create_optimizer.optimizer_fn = Adam
    "learning_rate": 3e-4,  # [sh] --learning_rate=3e-4
    "epsilon": 1e-7,  # [src] Keras Adam's default epsilon (--epsilon is Adam's eps with adam)
    "lr_decay": "linear",  # [sh] --lr_decay_multiplier=0: PolynomialDecay (power 1) to 0 over the run
    "batch_size": 128,  # [sh] --step_size_transitions=2048 per learner step = 128 unrolls of 16
    "loss_reduction": "mean",  # SEED's losses are means over steps
    "advantage": "gae",  # [gin] advantage_estimator = GAE
    "gae_lambda": 0.95,  # [gin] GAE.lambda_
    "entropy_cost": 0.0,  # [gin] KLPolicyRegularizer.entropy = 0.
    "kl_cost": 0.0,  # [gin] no KL term
    "baseline_cost": 1.0,  # [src] GeneralizedOnPolicyLoss's default (ppo.gin keeps it), on normalized targets
    "value_loss": "mse",  # [src] huber_delta=None
    "value_clip": 0.0,  # [src] value_ppo_style_clip_eps=None
    "value_normalization": "popart",  # [gin] reward_normalizer = PopArt(AverageMeanStd, compensate=False)
    # SEED divides advantages by PopArt's std (ppo(normalize_advantages=False)); here they are normalized per
    # minibatch instead, chosen by runs on HalfCheetah-v5: see docs/experiments/ppo.md (MuJoCo).
    "advantage_normalization": True,
    "obs_normalization": True,  # [gin] observation_normalizer = InputNormalization(AverageMeanStd)
    "obs_clip": 10.0,  # [gin] ContinuousControlAgent.input_clipping = 10.
    "init": "orthogonal",  # [gin] hidden Orthogonal(gain sqrt 2), last value layer Orthogonal(1.0)
    "policy_init_scale": 0.01,  # [gin] last policy layer Orthogonal(gain 0.01)
    "squash": True,  # [src] continuous_action_config's default postprocessor 'Tanh' (ppo.gin keeps
    # it): a tanh-squashed Gaussian on actions rescaled to [-1, 1] (env.py there)
    "std_kind": "exp",  # [gin] action_gaussian_std_fn = 'safe_exp'
    "min_std": 1e-3,  # [gin] action_min_gaussian_std = 1e-3
    "initial_std": 1.0,  # [gin] action_std_for_zero_param = 1.
    "state_dependent_std": False,  # [gin] std_independent_of_input = True
}

PPO_DEFAULTS = {
    **ON_POLICY_DEFAULTS,
    "ppo_clip": 0.2,  # [gin] ppo.epsilon = 0.2
    "num_epochs": 10,  # [sh] --epochs_per_step=10
    "batch_mode": "split",  # [sh] --batch_mode=split: advantages once, then shuffled transitions
    "num_minibatches": 32,  # [sh] --batch_size_transitions=64: 2048 / 64 = 32 minibatches per epoch
}

# What PPO alone takes: the other on-policy agents take the rest, with one pass per batch and (SEED's
# agent) GAE advantages, V-trace too.
PPO_ONLY = ("ppo_clip", "num_epochs", "batch_mode", "num_minibatches")

# SAC: the paper's MuJoCo settings (rl_core.agents.sac.SAC_DEFAULTS: 256 x 256 ReLU networks, batches of
# 256, one update per env step, 10,000 random steps, no gradient clipping) on 16 envs; 1M steps.
SAC_DEFAULTS = {
    **ENV_DEFAULTS,
    "mlp_sizes": "256,256",
    "grad_norm_clipping": 0.0,
    "unroll_length": 8,
    "total_steps": 1_000_000,
}


# ``ppo``: SEED RL's MuJoCo PPO baseline (sources in the comments above); ``vpg`` / ``awr`` / ``vmpo`` / ``vtrace``: the
# same network, optimizer and normalizations, one pass per batch, GAE advantages; ``sac``: the paper's (Haarnoja et
# al. 2018); any other agent: the environment's values only.
PRESETS = (
    Preset(ENV_DEFAULTS),
    *on_policy_rows(PPO_DEFAULTS, PPO_ONLY, vtrace_advantages=False),
    Preset(SAC_DEFAULTS, agents="sac"),
)

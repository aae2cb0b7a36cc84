#!/usr/bin/env bash
# PPO on MuJoCo HalfCheetah: SEED RL's baseline (mujoco/local_baseline_HalfCheetah-v2.sh with
# mujoco/gin/ppo.gin) on gymnasium's HalfCheetah-v5, simulated by envpool. SEED runs 256 envs
# (8 actors x 32); 16 envs on 2 servers fit a small machine. Each learner step: 2048 transitions
# (128 unrolls of 16), 10 epochs of 32 minibatches of 64 transitions.
# Extra flags are passed on, e.g. --dry_run or --record_video.
set -euo pipefail
SAVE_DIR=${SAVE_DIR:-saved_models_mujoco}
ENV_ID=${ENV_ID:-HalfCheetah-v5}
SEED=${SEED:-1}
NUM_ACTORS=${NUM_ACTORS:-16}
python3 -m torchbeast_mujoco.polybeast \
     --env "${ENV_ID}" \
     --agent ppo \
     --seed "${SEED}" \
     --pipes_basename "unix:/tmp/pb_ppo_${ENV_ID}_seed${SEED}" \
     --num_actors "${NUM_ACTORS}" \
     --num_servers 2 \
     --total_steps 2_000_000 \
     --optimizer adam \
     --learning_rate 3e-4 \
     --epsilon 1e-7 \
     --lr_decay linear \
     --grad_norm_clipping 0.5 \
     --unroll_length 16 \
     --batch_size 128 \
     --num_epochs 10 \
     --batch_mode split \
     --num_minibatches 32 \
     --advantage gae \
     --gae_lambda 0.95 \
     --discounting 0.99 \
     --ppo_clip 0.2 \
     --entropy_cost 0.0 \
     --baseline_cost 1.0 \
     --value_loss mse \
     --value_normalization popart \
     --advantage_normalization \
     --obs_normalization \
     --obs_clip 10 \
     --reward_clipping none \
     --mlp_sizes 64,64 \
     --value_net separate \
     --init orthogonal \
     --policy_init_scale 0.01 \
     --squash \
     --std_kind exp \
     --min_std 0.001 \
     --initial_std 1.0 \
     --no-state_dependent_std \
     --validate_step_every 250_000 \
     --valid_num_episodes 5 \
     --xpid "ppo_${ENV_ID}_seed${SEED}" \
     --savedir "${SAVE_DIR}" \
     "$@"

#!/usr/bin/env bash
# SAC on HalfCheetah-v5 with the paper's settings (Haarnoja et al. 2018, "Soft Actor-Critic
# Algorithms and Applications", Table 1): a tanh-squashed Gaussian policy and twin critics, each two
# ReLU layers of 256; Adam 3e-4 for the policy, the critics and the temperature; batches of 256
# transitions from a uniform replay of 1e6; one gradient step per env step (each transition sampled
# 256 times on average: --replay_ratio counts samples per inserted transition; SEED RL's sac_main
# used 4 with hundreds of actors); target critics averaged with tau 0.005; gamma 0.99; the temperature
# learned towards an entropy of -|A| = -6; 10,000 uniformly random steps before learning; the final
# test plays the squashed mean.  These are torchbeast_mujoco's defaults for --agent sac.
#
# Scaled to this machine: 16 envs on 2 servers.  The learner is the bottleneck (one update per env
# step): a GPU learner (used when CUDA is available) raises the steps/s, not the learning per step.
# Extra flags are passed on, e.g. --dry_run or --checkpoint_replay.
set -euo pipefail
SAVE_DIR=${SAVE_DIR:-saved_models_mujoco}
ENV=${ENV:-HalfCheetah-v5}
SEED=${SEED:-1}
NUM_ACTORS=${NUM_ACTORS:-16}
NUM_SERVERS=${NUM_SERVERS:-2}
python -m torchbeast_mujoco.polybeast \
     --env "${ENV}" \
     --seed "${SEED}" \
     --agent sac \
     --pipes_basename "unix:/tmp/pb_sac_${ENV}_seed${SEED}" \
     --num_actors "${NUM_ACTORS}" \
     --num_servers "${NUM_SERVERS}" \
     --total_steps 1_000_000 \
     --mlp_sizes 256,256 \
     --batch_size 256 \
     --unroll_length 8 \
     --replay_buffer_size 1_000_000 \
     --replay_buffer_min_size 10_000 \
     --random_init_steps 10_000 \
     --replay_ratio 256 \
     --polyak_tau 0.005 \
     --discounting 0.99 \
     --optimizer adam \
     --learning_rate 0.0003 \
     --lr_decay none \
     --grad_norm_clipping 0 \
     --reward_clipping none \
     --validate_every 30 \
     --valid_num_episodes 5 \
     --xpid "sac_${ENV}_seed${SEED}" \
     --savedir "${SAVE_DIR}" \
     "$@"

#!/usr/bin/env bash
# RND on Montezuma's Revenge (Burda et al. 2018, "Exploration by Random Network Distillation"):
# PPO with an intrinsic-reward head, the paper's settings (Table 5, Appendix A; OpenAI's run_atari.py):
# sticky actions 0.25, no episodic life, games cut after 18,000 frames (4,500 agent steps), extrinsic
# rewards clipped; gamma_E 0.999, gamma_I 0.99, GAE lambda 0.95, 128-step rollouts, 4 epochs x 4
# minibatches, Adam 1e-4, entropy 0.001, clip 0.1, advantages weighted 2 (extrinsic) and 1 (intrinsic),
# the predictor trained on 25% of each batch; the observation statistics first initialised by a random
# agent for 50 rollouts of 128 steps per env.
#
# Scaled to the envs this machine has: NUM_ACTORS envs (default 8) on NUM_SERVERS servers, each learner
# batch one 128-step rollout of every env.  The paper's runs used 32 to 1,024 envs (its headline
# result 1,024 envs, 1.97B frames); to scale up, raise NUM_ACTORS (a multiple of NUM_SERVERS, e.g.
# NUM_ACTORS=128 NUM_SERVERS=16 on a machine with the cores) and TOTAL_STEPS; the batch and the random
# initialisation follow NUM_ACTORS.  rooms_seen.json in the run directory lists the rooms found so far.
# Extra flags are passed on, e.g. --dry_run, --use_wandb, --record_video.
set -euo pipefail
SAVE_DIR=${SAVE_DIR:-saved_models_atari}
SEED=${SEED:-1}
NUM_ACTORS=${NUM_ACTORS:-8}
NUM_SERVERS=${NUM_SERVERS:-2}
TOTAL_STEPS=${TOTAL_STEPS:-50_000_000}
python -m torchbeast_atari.polybeast \
     --env MontezumaRevengeNoFrameskip-v4 \
     --agent ppo \
     --rnd \
     --seed "${SEED}" \
     --pipes_basename "unix:/tmp/pb_rnd_montezuma_seed${SEED}" \
     --num_actors "${NUM_ACTORS}" \
     --num_servers "${NUM_SERVERS}" \
     --batch_size "${NUM_ACTORS}" \
     --total_steps "${TOTAL_STEPS}" \
     --sticky_actions 0.25 \
     --disable_episodic_life \
     --max_episode_frames 18_000 \
     --reward_clipping abs_one \
     --unroll_length 128 \
     --num_epochs 4 \
     --num_minibatches 4 \
     --batch_mode shuffle \
     --optimizer adam \
     --learning_rate 1e-4 \
     --lr_decay none \
     --epsilon 1e-5 \
     --grad_norm_clipping 0.5 \
     --advantage gae \
     --gae_lambda 0.95 \
     --discounting 0.999 \
     --intrinsic_discounting 0.99 \
     --ext_coef 2.0 \
     --int_coef 1.0 \
     --ppo_clip 0.1 \
     --entropy_cost 0.001 \
     --baseline_cost 1.0 \
     --advantage_normalization \
     --init orthogonal \
     --rnd_update_proportion 0.25 \
     --rnd_init_steps $((50 * 128 * NUM_ACTORS)) \
     --rnd_channels 1 \
     --validate_step_every 2_000_000 \
     --valid_num_episodes 3 \
     --xpid "rnd_montezuma_seed${SEED}" \
     --savedir "${SAVE_DIR}" \
     "$@"

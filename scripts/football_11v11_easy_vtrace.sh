#!/usr/bin/env bash
# IMPALA (V-trace) on Google Research Football, 11 vs 11 against the easy built-in AI, with SEED RL's
# Football V-trace settings (google-research/seed_rl gcp/train_football_scoring.sh, football/networks.py):
# the scoring reward (+1 / -1 per goal); the super-minimap of the last 4 frames (16 x 72 x 96); the
# IMPALA ResNet with four stages (16, 32, 32, 32) and fc 256, no LSTM; unrolls of 32, batches of 32;
# Adam (constant rate); gamma 0.997; V-trace lambda 0.9; entropy cost 3.19e-5; baseline cost 0.5; no
# reward or gradient clipping.  These are torchbeast_football's defaults for --agent impala.
#
# Scaled to this machine: 32 envs on 2 servers (SEED: 25 workers x 8 envs), 50M steps (SEED: 500M) and
# a learning rate of 3e-4 (SEED: 5.53e-5, which barely moves the policy within 1e5-1e7 steps; 3e-4 took
# academy_empty_goal_close to a mean score of 0.93 in 161k steps).
# On a 2-core CPU the learner is the bottleneck (about 13 core-ms per agent step for this ResNet, 85
# steps/s); a GPU learner (used when CUDA is available) lifts that, and then more env servers
# (NUM_SERVERS, NUM_ACTORS) on more cores are what raise the steps/s: an 11 vs 11 env steps about
# 95 times a second on one core.  SCENARIO=academy_empty_goal_close ... plays another scenario.
# Extra flags are passed on, e.g. --dry_run or --record_video.
set -euo pipefail
SAVE_DIR=${SAVE_DIR:-saved_models_football}
SCENARIO=${SCENARIO:-11_vs_11_easy_stochastic}
SEED=${SEED:-1}
NUM_ACTORS=${NUM_ACTORS:-32}
NUM_SERVERS=${NUM_SERVERS:-2}
python -m torchbeast_football.polybeast \
     --env "${SCENARIO}" \
     --seed "${SEED}" \
     --agent impala \
     --rewards scoring \
     --pipes_basename "unix:/tmp/pb_football_${SCENARIO}_seed${SEED}" \
     --num_actors "${NUM_ACTORS}" \
     --num_servers "${NUM_SERVERS}" \
     --total_steps 50_000_000 \
     --model resnet \
     --resnet_channels 16,32,32,32 \
     --unroll_length 32 \
     --batch_size 32 \
     --optimizer adam \
     --learning_rate 0.0003 \
     --epsilon 1e-7 \
     --lr_decay none \
     --discounting 0.997 \
     --vtrace_lambda 0.9 \
     --entropy_cost 0.000031948 \
     --baseline_cost 0.5 \
     --reward_clipping none \
     --grad_norm_clipping 0 \
     --validate_every 60 \
     --valid_num_episodes 10 \
     --project_name football \
     --xpid "vtrace_${SCENARIO}_seed${SEED}" \
     --savedir "${SAVE_DIR}" \
     "$@"

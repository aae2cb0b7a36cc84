#!/usr/bin/env bash
# R2D2 on Atari with SEED RL's settings (Kapturowski et al. 2019, Table 2): LSTM core of 512 under a
# dueling head of 512, sequences of 80 steps after a 40-step burn-in, stored every 40 steps (training
# sequences overlap by half) with the LSTM state at their start; prioritized replay (alpha 0.9,
# beta 0.6, eta 0.9); 5-step double-Q targets, gamma 0.997, value rescaling h (eps 1e-3), no reward
# clipping; Adam 1e-4 (eps 1e-3), gradient clip 40, target copy every 2,500 learner steps, batches of
# 64 sequences, each env step replayed 1.5 times; env i of N explores with 0.4^(1 + 7 i / (N - 1)),
# evaluation with epsilon 0.001.  torchbeast_atari's defaults for --agent r2d2 scale these down to a
# 2-core machine (batches of 8 x 40 after a 20-step burn-in, replay ratio 1, a target copy every 100
# updates, Adam 2e-4; torchbeast_atari/presets.py); this script runs the paper's own values.
#
# Here: 16 envs on 2 servers (R2D2: 256 actors) and a replay of 4,000 sequences
# (3.5 GB: each 84x84 frame is kept once, 0.87 MB a sequence; R2D2 keeps 4M steps = 100k sequences,
# 87 GB).  To scale up: NUM_ACTORS / NUM_SERVERS with your cores (a server per ~8 envs), REPLAY with
# your memory (0.87 MB a sequence), and a GPU learner (used when CUDA is available).
# Extra flags are passed on, e.g. --dry_run or --checkpoint_replay.
set -euo pipefail
SAVE_DIR=${SAVE_DIR:-saved_models_atari}
GAME=${GAME:-PongNoFrameskip-v4}
SEED=${SEED:-1}
NUM_ACTORS=${NUM_ACTORS:-16}
NUM_SERVERS=${NUM_SERVERS:-2}
REPLAY=${REPLAY:-4000}
python -m torchbeast_atari.polybeast \
     --env "${GAME}" \
     --seed "${SEED}" \
     --agent r2d2 \
     --model atari \
     --use_lstm \
     --hidden_size 512 \
     --dueling_hidden_size 512 \
     --pipes_basename "unix:/tmp/pb_r2d2_${GAME}_seed${SEED}" \
     --num_actors "${NUM_ACTORS}" \
     --num_servers "${NUM_SERVERS}" \
     --total_steps 50_000_000 \
     --unroll_length 80 \
     --burn_in 40 \
     --batch_size 64 \
     --replay_buffer_size "${REPLAY}" \
     --replay_buffer_min_size 200 \
     --replay_ratio 1.5 \
     --replay_frame_stack \
     --priority_exponent 0.9 \
     --importance_sampling_exponent 0.6 \
     --priority_eta 0.9 \
     --n_steps 5 \
     --discounting 0.997 \
     --value_function_rescaling_epsilon 0.001 \
     --reward_clipping none \
     --optimizer adam \
     --learning_rate 0.0001 \
     --epsilon 0.001 \
     --lr_decay none \
     --grad_norm_clipping 40 \
     --target_update_period 2500 \
     --eval_epsilon 0.001 \
     --validate_every 30 \
     --valid_num_episodes 5 \
     --xpid "r2d2_${GAME}_seed${SEED}" \
     --savedir "${SAVE_DIR}" \
     "$@"

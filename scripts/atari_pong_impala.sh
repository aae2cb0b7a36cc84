#!/usr/bin/env bash
# IMPALA baseline on Pong: feedforward AtariNet, torchbeast's hyperparameters.
# Extra flags are passed on, e.g. --dry_run or --use_lstm.
set -euo pipefail
SAVE_DIR=${SAVE_DIR:-saved_models_atari}
GAME=${GAME:-PongNoFrameskip-v4}
SEED=${SEED:-1}
python -m torchbeast_atari.polybeast \
     --env "${GAME}" \
     --seed "${SEED}" \
     --model atari \
     --pipes_basename "unix:/tmp/pb_impala_${GAME}_seed${SEED}" \
     --num_actors 16 \
     --num_servers 2 \
     --total_steps 20_000_000 \
     --learning_rate 0.0006 \
     --grad_norm_clipping 40 \
     --epsilon 0.01 \
     --alpha 0.99 \
     --entropy_cost 0.01 \
     --baseline_cost 0.5 \
     --discounting 0.99 \
     --reward_clipping abs_one \
     --batch_size 32 \
     --unroll_length 20 \
     --validate_every 30 \
     --valid_num_episodes 5 \
     --xpid "impala_${GAME}_seed${SEED}" \
     --savedir "${SAVE_DIR}" \
     "$@"

#!/usr/bin/env bash
# R2AC on Procgen Chaser (hard, 500 training levels): eLSTM trained by RTRL.
# R2AC's schedules (torchbeast's): the learning rate decays linearly to 0, the entropy cost stays.
# Extra flags are passed on, e.g. --dry_run.
set -euo pipefail
SAVE_DIR=${SAVE_DIR:-saved_models}
GAME=${GAME:-chaser}
MODE=${MODE:-hard}
MODEL=rtrl_quasi_lstm
SEED=${SEED:-1}
LEN=${LEN:-50}
SIZE=${SIZE:-256}
python -m torchbeast_procgen.polybeast \
     --single_gpu \
     --use_wandb \
     --use_rtrl \
     --seed "${SEED}" \
     --env "procgen:procgen-${GAME}-v0" \
     --pipes_basename "unix:/tmp/pb_${MODEL}_${GAME}_${SIZE}_len${LEN}_seed${SEED}" \
     --validate_every 60 \
     --num_actors 48 \
     --num_servers 8 \
     --total_steps 200_000_000 \
     --save_extra_checkpoint 50_000_000 \
     --learning_rate 0.0006 \
     --grad_norm_clipping 40 \
     --epsilon 0.01 \
     --entropy_cost 0.01 \
     --lr_decay linear \
     --entropy_decay none \
     --batch_size 32 \
     --unroll_length "${LEN}" \
     --num_actions 15 \
     --hidden_size "${SIZE}" \
     --num_learner_threads 1 \
     --num_inference_threads 1 \
     --project_name "r2ac_${GAME}" \
     --xpid "${MODEL}_${GAME}_${MODE}_${SIZE}_len${LEN}_seed${SEED}" \
     --num_levels 500 \
     --start_level 0 \
     --distribution_mode "${MODE}" \
     --valid_distribution_mode "${MODE}" \
     --valid_num_levels 500 \
     --valid_start_level 500 \
     --valid_num_episodes 10 \
     --savedir "${SAVE_DIR}" \
     "$@"

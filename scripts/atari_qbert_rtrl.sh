#!/usr/bin/env bash
# R2AC on Atari Qbert: eLSTM trained by RTRL (replace --use_rtrl by --use_elstm
# for TBPTT, or drop it for a feedforward agent).  Extra flags are passed on, e.g. --dry_run.
# R2AC's settings (torchbeast's): the learning rate decays linearly to 0, the entropy cost stays, PyTorch's
# initialisation, and none of the Atari package's measured additions (dormant-unit recycling, the stem's value head).
set -euo pipefail
SAVE_DIR=${SAVE_DIR:-saved_models_atari}
GAME=${GAME:-QbertNoFrameskip-v4}
MODEL=rtrl_quasi_lstm
SEED=${SEED:-1}
LEN=${LEN:-50}
SIZE=${SIZE:-256}
python -m torchbeast_atari.polybeast \
     --env "${GAME}" \
     --use_rtrl \
     --use_wandb \
     --seed "${SEED}" \
     --pipes_basename "unix:/tmp/pb_${MODEL}_${GAME}_${SIZE}_len${LEN}_seed${SEED}" \
     --disable_validation \
     --validate_every 60 \
     --validate_step_every 10_000_000 \
     --num_actors 48 \
     --num_servers 12 \
     --total_steps 200_000_000 \
     --save_extra_checkpoint 50_000_000 \
     --learning_rate 0.0006 \
     --grad_norm_clipping 40 \
     --epsilon 0.01 \
     --entropy_cost 0.01 \
     --lr_decay linear \
     --entropy_decay none \
     --init default \
     --recycle_period 0 \
     --no-stem_value \
     --batch_size 32 \
     --unroll_length "${LEN}" \
     --hidden_size "${SIZE}" \
     --num_learner_threads 1 \
     --num_inference_threads 1 \
     --project_name "r2ac_${GAME}" \
     --xpid "${MODEL}_${GAME}_${SIZE}_len${LEN}_seed${SEED}" \
     --savedir "${SAVE_DIR}" \
     "$@"

#!/usr/bin/env bash
# R2AC on DMLab from scratch: eLSTM trained by RTRL (--use_elstm for TBPTT, nothing for
# feedforward).  Needs DeepMind Lab (see the README).  Extra flags are passed on, e.g. --dry_run.
set -euo pipefail
SAVE_DIR=${SAVE_DIR:-saved_models_dmlab}
GAME=${GAME:-rooms_keys_doors_puzzle}
MODEL=rtrl_elstm
SEED=${SEED:-1}
LEN=${LEN:-100}
SIZE=${SIZE:-512}
python -m torchbeast_dmlab.polybeast \
     --single_gpu \
     --use_wandb \
     --use_rtrl \
     --seed "${SEED}" \
     --env "${GAME}" \
     --pipes_basename "unix:/tmp/pb_rgbdmlab_${MODEL}_${GAME}_${SIZE}_len${LEN}_seed${SEED}" \
     --disable_validation \
     --validate_step_every 1_000_000 \
     --num_actors 48 \
     --num_servers 48 \
     --total_steps 100_000_000 \
     --learning_rate 0.0006 \
     --grad_norm_clipping 40 \
     --epsilon 0.01 \
     --entropy_cost 0.01 \
     --batch_size 32 \
     --unroll_length "${LEN}" \
     --hidden_size "${SIZE}" \
     --num_learner_threads 1 \
     --num_inference_threads 1 \
     --project_name "r2ac_${GAME}" \
     --xpid "rgb_${MODEL}_${GAME}_${SIZE}_len${LEN}_seed${SEED}" \
     --savedir "${SAVE_DIR}" \
     "$@"

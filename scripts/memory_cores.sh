#!/usr/bin/env bash
# R2AC's cores on a memory task (POPGym or MiniGrid) with torchbeast_memory's IMPALA defaults:
# CORE=lstm|elstm|rtrl|feedforward.  Extra flags are passed on, e.g. --unroll_length 4 or --dry_run.
set -euo pipefail
SAVE_DIR=${SAVE_DIR:-saved_models_memory}
ENV=${ENV:-popgym-RepeatPreviousEasy-v0}
CORE=${CORE:-rtrl}
SEED=${SEED:-1}
case "${CORE}" in
  lstm) CORE_FLAG=--use_lstm ;;
  elstm) CORE_FLAG=--use_elstm ;;
  rtrl) CORE_FLAG=--use_rtrl ;;
  feedforward) CORE_FLAG=--feedforward ;;
  *) echo "CORE=${CORE}: give lstm, elstm, rtrl or feedforward" >&2; exit 2 ;;
esac
python -m torchbeast_memory.polybeast \
     --env "${ENV}" \
     "${CORE_FLAG}" \
     --use_wandb \
     --seed "${SEED}" \
     --pipes_basename "unix:/tmp/pb_memory_${ENV}_${CORE}_seed${SEED}" \
     --project_name "r2ac_memory" \
     --xpid "${ENV}_${CORE}_seed${SEED}" \
     --savedir "${SAVE_DIR}" \
     "$@"

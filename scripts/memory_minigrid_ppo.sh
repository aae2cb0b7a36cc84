#!/usr/bin/env bash
# MiniGrid's Memory rooms learned by PPO with a recurrent core (an LSTM by default), in the three stages measured in
# docs/experiments/memory.md ("MiniGrid-MemoryS13 learned"), each resuming the last one's checkpoint:
#   1. 99 fixed layouts (--num_levels 99, recurrent-ppo-truncated-bptt's seeds) to 1M steps;
#   2. fresh layouts to 2.2M steps (where the measured run was stopped; shorter is not measured);
#   3. fresh layouts to 3.2M steps at entropy cost 0.05, high enough that the look back is tried and learned.
# PPO takes recurrent-ppo-truncated-bptt's MiniGrid values (its minigrid.yaml): 4 epochs of 8 minibatches over
# 4,096 steps, Adam 2e-4, clip 0.2, value cost 0.25, gradient norm 0.5, entropy cost 0.001 until stage 3.
# ENV=MiniGrid-MemoryS13-v0 (default) | MiniGrid-MemoryS9-v0 ...; VIEW_SIZE=7 (default; 3 is that anchor's
# MemoryS9 view).  CORE=lstm | elstm (truncated BPTT) | rtrl (the eLSTM by RTRL) | feedforward (the control).
# Extra flags go to every stage, e.g. --dry_run.
# A stage stopped early (Ctrl-C, SIGTERM) saves its checkpoint and ends the script; the same command resumes it,
# a stage already done finishing at once.
set -euo pipefail
SAVE_DIR=${SAVE_DIR:-saved_models_memory}
SEED=${SEED:-1}
CORE=${CORE:-lstm}
ENV=${ENV:-MiniGrid-MemoryS13-v0}
VIEW_SIZE=${VIEW_SIZE:-7}
case "${CORE}" in
  lstm) CORE_FLAG=--use_lstm ;;
  elstm) CORE_FLAG=--use_elstm ;;
  rtrl) CORE_FLAG=--use_rtrl ;;
  feedforward) CORE_FLAG=--feedforward ;;
  *) echo "CORE=${CORE}: give lstm, elstm, rtrl or feedforward" >&2; exit 2 ;;
esac
VIEW=""
[ "${VIEW_SIZE}" = 7 ] || VIEW="_view${VIEW_SIZE}"
XPID="${ENV}${VIEW}_ppo_${CORE}_seed${SEED}"
stage() {
  python -m torchbeast_memory.polybeast \
       --env "${ENV}" \
       --view_size "${VIEW_SIZE}" \
       --agent ppo \
       "${CORE_FLAG}" \
       --seed "${SEED}" \
       --pipes_basename "unix:/tmp/pb_${XPID}" \
       --num_actors 16 \
       --num_servers 2 \
       --unroll_length 32 \
       --batch_size 128 \
       --num_epochs 4 \
       --num_minibatches 8 \
       --optimizer adam \
       --learning_rate 0.0002 \
       --epsilon 1e-5 \
       --lr_decay none \
       --baseline_cost 0.25 \
       --advantage_normalization \
       --grad_norm_clipping 0.5 \
       --init orthogonal \
       --xpid "${XPID}" \
       --savedir "${SAVE_DIR}" \
       "$@"
  case " $* " in *" --dry_run "*) return 0 ;; esac
  # a run stopped early also exits 0: its meta.json says how it ended
  python -c 'import json, sys; sys.exit(json.load(open(sys.argv[1])).get("reason") != "finished")' \
       "${SAVE_DIR}/${XPID}/meta.json" \
    || { echo "${XPID}: this stage did not finish; the same command resumes it" >&2; exit 1; }
}
stage --num_levels 99 --total_steps 1_000_000 --entropy_cost 0.001 --disable_final_test "$@"
stage --num_levels 0 --total_steps 2_200_000 --entropy_cost 0.001 --disable_final_test "$@"
stage --num_levels 0 --total_steps 3_200_000 --entropy_cost 0.05 "$@"

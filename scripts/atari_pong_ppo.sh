#!/usr/bin/env bash
# PPO on Pong: feedforward AtariNet with the published Atari PPO settings (Schulman et al. 2017,
# Table 5; cleanrl's ppo_atari.py), which are torchbeast_atari's defaults for --agent ppo, fed as cleanrl
# feeds them: acting and learning in lockstep (each batch trains the policy that collected it; no validation
# during training, the final test at the end), advantages once per batch and minibatches of transitions from
# all envs (--batch_mode split), the value loss clipped (--value_clip 0.1).
# Extra flags are passed on, e.g. --dry_run or --use_lstm.
set -euo pipefail
SAVE_DIR=${SAVE_DIR:-saved_models_atari}
GAME=${GAME:-PongNoFrameskip-v4}
SEED=${SEED:-1}
python -m torchbeast_atari.polybeast \
     --env "${GAME}" \
     --seed "${SEED}" \
     --agent ppo \
     --model atari \
     --pipes_basename "unix:/tmp/pb_ppo_${GAME}_seed${SEED}" \
     --num_actors 8 \
     --num_servers 2 \
     --total_steps 10_000_000 \
     --unroll_length 128 \
     --batch_size 8 \
     --optimizer adam \
     --learning_rate 0.00025 \
     --epsilon 0.00001 \
     --num_epochs 4 \
     --num_minibatches 4 \
     --batch_mode split \
     --value_clip 0.1 \
     --deterministic \
     --ppo_clip 0.1 \
     --gae_lambda 0.95 \
     --entropy_cost 0.01 \
     --baseline_cost 0.5 \
     --grad_norm_clipping 0.5 \
     --reward_clipping abs_one \
     --advantage_normalization \
     --init orthogonal \
     --xpid "ppo_${GAME}_seed${SEED}" \
     --savedir "${SAVE_DIR}" \
     "$@"

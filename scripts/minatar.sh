#!/usr/bin/env bash
# One agent on one MinAtar game with torchbeast_minatar's defaults (5M agent steps, the paper's network):
# AGENT=impala|ppo|r2d2|sac|vpg|awr|vmpo|vtrace, GAME=Asterix|Breakout|Freeway|SpaceInvaders (6 actions, sticky 0.1).
# Extra flags are passed on, e.g. --dry_run; the same command resumes a stopped run.
set -euo pipefail
SAVE_DIR=${SAVE_DIR:-saved_models_minatar}
AGENT=${AGENT:-impala}
GAME=${GAME:-Breakout}
SEED=${SEED:-1}
python -m torchbeast_minatar.polybeast \
     --env "MinAtar/${GAME}-v0" \
     --agent "${AGENT}" \
     --use_wandb \
     --seed "${SEED}" \
     --pipes_basename "unix:/tmp/pb_minatar_${GAME}_${AGENT}_seed${SEED}" \
     --project_name "minatar" \
     --xpid "MinAtar-${GAME}-v0_${AGENT}_seed${SEED}" \
     --savedir "${SAVE_DIR}" \
     "$@"

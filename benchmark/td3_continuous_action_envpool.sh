#!/usr/bin/env bash
# CleanRL-style sweep of cleanrl/td3_continuous_action_envpool.py: every env x every seed at CleanRL's defaults (1M
# steps, 1 env, one update per step), then the plots. Everything goes into one folder of its own,
# runs/sweeps/td3_continuous_action_envpool-<date>-<time>: the runs, their logs (logs/) and the plots and summary.md
# (plots/). A run holds its 1M-transition buffer in memory (about 0.1 GB for Hopper, 0.2 GB for HalfCheetah).
#   ENVS="Hopper-v4" SEEDS="1" bash benchmark/td3_continuous_action_envpool.sh    # a subset
#   EXTRA="--track" WORKERS=2 bash benchmark/td3_continuous_action_envpool.sh   # wandb, two runs at once
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benchmark/common.sh
source benchmark/common.sh
sweep_arguments "$@"
PY=${PYTHON:-.venv/bin/python}
ENVS=${ENVS:-"HalfCheetah-v4 Hopper-v4 Walker2d-v4"}
SEEDS=${SEEDS:-"1 2 3"}
WORKERS=${WORKERS:-1}
EXTRA=${EXTRA:-}
SWEEP=${SWEEP:-runs/sweeps/td3_continuous_action_envpool-$(date +%Y%m%d-%H%M%S)}
LOG_DIR=$(printf %q "$SWEEP")  # --log-dir of every run, quoted for the --command string
echo "sweep folder: $SWEEP"
status=0
# shellcheck disable=SC2086
$PY -m cleanrl_utils.benchmark --command "$PY cleanrl/td3_continuous_action_envpool.py --log-dir $LOG_DIR $EXTRA" \
  --env-ids $ENVS --seeds $SEEDS --workers "$WORKERS" --log-dir "$SWEEP/logs" || status=1
$PY -m cleanrl_utils.plot --log-dir "$SWEEP" --output-dir "$SWEEP/plots" || status=1
exit $status

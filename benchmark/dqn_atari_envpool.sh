#!/usr/bin/env bash
# CleanRL-style sweep of cleanrl/dqn_atari_envpool.py: every env x every seed at CleanRL's dqn_atari
# defaults (Nature DQN: 10M steps, 1 env, 1M replay, Adam 1e-4), then the plots. Everything goes into
# one folder of its own, runs/sweeps/dqn_atari_envpool-<date>-<time>: the runs, their logs (logs/) and
# the plots and summary.md (plots/). Each run holds a 1M-transition buffer (about 7 GiB resident):
# WORKERS=2 needs 16 GB of memory.
#   ENVS="Pong-v5" SEEDS="1" bash benchmark/dqn_atari_envpool.sh      # a subset
#   EXTRA="--track" WORKERS=2 bash benchmark/dqn_atari_envpool.sh     # wandb, two runs at once
#   SWEEP=runs/sweeps/dqn_atari_envpool-20250101-120000 SEEDS="4 5" bash benchmark/dqn_atari_envpool.sh  # add seeds
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benchmark/common.sh
source benchmark/common.sh
sweep_arguments "$@"
PY=${PYTHON:-.venv/bin/python}
ENVS=${ENVS:-"Pong-v5 Breakout-v5 BeamRider-v5"}
SEEDS=${SEEDS:-"1 2 3"}
WORKERS=${WORKERS:-1}
EXTRA=${EXTRA:-}
SWEEP=${SWEEP:-runs/sweeps/dqn_atari_envpool-$(date +%Y%m%d-%H%M%S)}
LOG_DIR=$(printf %q "$SWEEP")  # --log-dir of every run, quoted for the --command string
echo "sweep folder: $SWEEP"
status=0
# shellcheck disable=SC2086
$PY -m cleanrl_utils.benchmark --command "$PY cleanrl/dqn_atari_envpool.py --log-dir $LOG_DIR $EXTRA" \
  --env-ids $ENVS --seeds $SEEDS --workers "$WORKERS" --log-dir "$SWEEP/logs" || status=1
$PY -m cleanrl_utils.plot --log-dir "$SWEEP" --output-dir "$SWEEP/plots" || status=1
exit $status

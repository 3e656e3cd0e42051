#!/usr/bin/env bash
# CleanRL-style sweep of cleanrl/ppo_atari_envpool_async.py: every env x every seed at its defaults (Table 3 of
# the EnvPool paper's appendix F, 16 envs in recv batches of 8), then the plots. Everything goes into one
# folder of its own, runs/sweeps/ppo_atari_envpool_async-<date>-<time>: the runs, their logs (logs/) and the
# plots and summary.md (plots/).
#   ENVS="Breakout-v5" SEEDS="1" bash benchmark/ppo_atari_envpool_async.sh       # a subset
#   EXTRA="--overlap" bash benchmark/ppo_atari_envpool_async.sh                    # the actor-learner overlap
#   SWEEP=runs/sweeps/ppo_atari_envpool_async-20250101-120000 SEEDS="4 5" bash benchmark/ppo_atari_envpool_async.sh
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
SWEEP=${SWEEP:-runs/sweeps/ppo_atari_envpool_async-$(date +%Y%m%d-%H%M%S)}
LOG_DIR=$(printf %q "$SWEEP")  # --log-dir of every run, quoted for the --command string
echo "sweep folder: $SWEEP"
status=0
# shellcheck disable=SC2086
$PY -m cleanrl_utils.benchmark --command "$PY cleanrl/ppo_atari_envpool_async.py --log-dir $LOG_DIR $EXTRA" \
  --env-ids $ENVS --seeds $SEEDS --workers "$WORKERS" --log-dir "$SWEEP/logs" || status=1
$PY -m cleanrl_utils.plot --log-dir "$SWEEP" --output-dir "$SWEEP/plots" || status=1
exit $status

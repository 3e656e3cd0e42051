#!/usr/bin/env bash
# Sweep of cleanrl/reinforce_continuous_action_envpool.py at Tianshou's MuJoCo benchmark settings: every env x every seed,
# TOTAL steps each (default 1M, the steps of Tianshou's table; TOTAL=3000000 for its REINFORCE row), with a checkpoint
# kept every CHECKPOINT_EVERY iterations (default 15: ~30,000 steps at 10 envs x 205 steps, Tianshou's epoch), then the plots
# and, per run, the best mean return of 10 deterministic evaluation episodes over the kept checkpoints (Tianshou's
# figure; eval.txt in each run folder), to read beside the final training returns in plots/summary.md. Everything
# goes into one folder of its own, runs/sweeps/reinforce_continuous_action_envpool-<date>-<time>: the runs, their logs (logs/)
# and the plots (plots/).
#   ENVS="Hopper-v4" SEEDS="1" bash benchmark/reinforce_continuous_action_envpool.sh    # a subset
#   EXTRA="--track" WORKERS=2 bash benchmark/reinforce_continuous_action_envpool.sh   # wandb, two runs at once
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
ENVS=${ENVS:-"HalfCheetah-v4 Hopper-v4 Walker2d-v4"}
SEEDS=${SEEDS:-"1 2 3"}
TOTAL=${TOTAL:-1000000}
CHECKPOINT_EVERY=${CHECKPOINT_EVERY:-15}
WORKERS=${WORKERS:-1}
EXTRA=${EXTRA:-}
SWEEP=${SWEEP:-runs/sweeps/reinforce_continuous_action_envpool-$(date +%Y%m%d-%H%M%S)}
LOG_DIR=$(printf %q "$SWEEP")  # --log-dir of every run, quoted for the --command string
echo "sweep folder: $SWEEP"
status=0
# shellcheck disable=SC2086
$PY -m cleanrl_utils.benchmark \
  --command "$PY cleanrl/reinforce_continuous_action_envpool.py --total-timesteps $TOTAL --checkpoint-every $CHECKPOINT_EVERY --keep-checkpoints --log-dir $LOG_DIR $EXTRA" \
  --env-ids $ENVS --seeds $SEEDS --workers "$WORKERS" --log-dir "$SWEEP/logs" || status=1
$PY -m cleanrl_utils.plot --log-dir "$SWEEP" --output-dir "$SWEEP/plots" || status=1
for run in "$SWEEP"/*__*__*/; do
  [ -f "$run/checkpoint.pt" ] || continue
  $PY -m cleanrl_utils.evaluate --model-path "$run" --greedy --episodes 10 --no-cuda > "$run/eval.txt" || status=1
  echo "$(basename "$run"): $(tail -n 1 "$run/eval.txt")"
done
exit $status

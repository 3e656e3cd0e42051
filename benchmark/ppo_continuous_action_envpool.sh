#!/usr/bin/env bash
# CleanRL-style sweep of cleanrl/ppo_continuous_action_envpool.py: every env x every seed at the
# Table 5 defaults (EnvPool paper, appendix F), 1M steps unless TOTAL says otherwise, then the
# plots and summary table. Everything goes into one folder of its own,
# runs/sweeps/ppo_continuous_action_envpool-<date>-<time>: the runs, their logs (logs/) and the plots
# and summary.md (plots/). Only that folder is plotted, so no other run (a `make run`, an older
# sweep) joins the curves.
#   bash benchmark/ppo_continuous_action_envpool.sh                        # 4 envs x 3 seeds, 1M
#   TOTAL=10000000 bash benchmark/ppo_continuous_action_envpool.sh         # the paper's 10M
#   ENVS="Hopper-v4" SEEDS="1" bash benchmark/ppo_continuous_action_envpool.sh   # a subset
#   EXTRA="--norm-value" bash benchmark/ppo_continuous_action_envpool.sh   # a lever, or --track
#   SAMPLE_EFFICIENT=1 bash benchmark/ppo_continuous_action_envpool.sh     # also the 1M configuration below
#   SWEEP=runs/sweeps/ppo_continuous_action_envpool-20250101-120000 SEEDS="4" bash benchmark/ppo_continuous_action_envpool.sh
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benchmark/common.sh
source benchmark/common.sh
sweep_arguments "$@"
PY=${PYTHON:-.venv/bin/python}
ENVS=${ENVS:-"HalfCheetah-v4 Hopper-v4 Walker2d-v4 Ant-v4"}
SEEDS=${SEEDS:-"1 2 3"}
TOTAL=${TOTAL:-1000000}
WORKERS=${WORKERS:-1}
EXTRA=${EXTRA:-}
SAMPLE_EFFICIENT=${SAMPLE_EFFICIENT:-0}
SWEEP=${SWEEP:-runs/sweeps/ppo_continuous_action_envpool-$(date +%Y%m%d-%H%M%S)}
LOG_DIR=$(printf %q "$SWEEP")  # --log-dir of every run, quoted for the --command string
echo "sweep folder: $SWEEP"
status=0
# shellcheck disable=SC2086
$PY -m cleanrl_utils.benchmark --command "$PY cleanrl/ppo_continuous_action_envpool.py --total-timesteps $TOTAL \
  --save-model --log-dir $LOG_DIR $EXTRA" --env-ids $ENVS --seeds $SEEDS --workers "$WORKERS" --log-dir "$SWEEP/logs" \
  || status=1
if [[ "$SAMPLE_EFFICIENT" == 1 ]]; then
  # Table 5 makes 8 gradient steps per 4,096 samples, tuned for 10M steps; at 1M, 10 epochs of
  # 8 minibatches learn far more, kept stable by rl_games' KL-adaptive learning rate (starting
  # from Table 5's 0.00295). EXTRA="--norm-value" adds rl_games' value normalisation.
  # shellcheck disable=SC2086
  $PY -m cleanrl_utils.benchmark --command "$PY cleanrl/ppo_continuous_action_envpool.py \
    --exp-name ppo_continuous_action_envpool_se --total-timesteps $TOTAL --update-epochs 10 --num-minibatches 8 \
    --kl-adaptive-lr 0.008 --save-model --log-dir $LOG_DIR $EXTRA" --env-ids $ENVS --seeds $SEEDS --workers "$WORKERS" \
    --log-dir "$SWEEP/logs" || status=1
fi
$PY -m cleanrl_utils.plot --log-dir "$SWEEP" --output-dir "$SWEEP/plots" || status=1
exit $status

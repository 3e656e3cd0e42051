#!/usr/bin/env bash
# CleanRL-style sweep of cleanrl/ppo_continuous_action.py (same-step autoreset, Gymnasium MuJoCo)
# at the Table 5 defaults (EnvPool paper, appendix F), the same envs, seeds and budget as
# benchmark/ppo_continuous_action_envpool.sh, so next-step (EnvPool) and same-step (Gymnasium)
# curves compare run for run. 1M steps unless TOTAL says otherwise. Then the plots and summary table.
# Everything goes into one folder of its own, runs/sweeps/ppo_continuous_action-<date>-<time>: the
# runs, their logs (logs/) and the plots and summary.md (plots/). Only that folder is plotted, so
# no other run (a `make run`, an older sweep) joins the curves.
#   bash benchmark/ppo_continuous_action.sh                                # 4 envs x 3 seeds, 1M
#   TOTAL=10000000 bash benchmark/ppo_continuous_action.sh                 # the paper's 10M
#   ENVS="Hopper-v4" SEEDS="1" bash benchmark/ppo_continuous_action.sh     # a subset
#   VECTOR_MODE=async bash benchmark/ppo_continuous_action.sh              # AsyncVectorEnv (64 processes)
#   SPS=1 bash benchmark/ppo_continuous_action.sh                          # only: SPS, sync vs async
#   SWEEP=runs/sweeps/ppo_continuous_action-20250101-120000 SEEDS="4" bash benchmark/ppo_continuous_action.sh  # add a seed
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benchmark/common.sh
source benchmark/common.sh
sweep_arguments "$@"
PY=${PYTHON:-.venv/bin/python}
ENVS=${ENVS:-"HalfCheetah-v4 Hopper-v4 Walker2d-v4 Ant-v4"}
SEEDS=${SEEDS:-"1 2 3"}
TOTAL=${TOTAL:-1000000}
VECTOR_MODE=${VECTOR_MODE:-sync}
WORKERS=${WORKERS:-1}
EXTRA=${EXTRA:-}
sps_of() {  # the last SPS figure the script printed
  grep -o 'SPS [0-9,]*' "$1" | tail -1 | tr -d 'SPS ,'
}
if [[ "${SPS:-0}" == 1 ]]; then
  # Throughput only: 131,072 steps (32 rollouts) of the first env in ENVS, sync then async.
  env=${ENVS%% *}
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "machine: $(nproc) cores, torch $($PY -c 'import torch; print(torch.__version__)')"
  for mode in sync async; do
    $PY cleanrl/ppo_continuous_action.py --env-id "$env" --total-timesteps 131072 --vector-mode "$mode" \
      --log-dir "$tmp" >"$tmp/$mode.log" 2>&1 || { echo "failed: $(tail -1 "$tmp/$mode.log")"; exit 1; }
    echo "$env, 64 envs x 64 steps, --vector-mode $mode: $(sps_of "$tmp/$mode.log") SPS"
  done
  exit 0
fi
SWEEP=${SWEEP:-runs/sweeps/ppo_continuous_action-$(date +%Y%m%d-%H%M%S)}
LOG_DIR=$(printf %q "$SWEEP")  # --log-dir of every run, quoted for the --command string
echo "sweep folder: $SWEEP"
status=0
# shellcheck disable=SC2086
$PY -m cleanrl_utils.benchmark --command "$PY cleanrl/ppo_continuous_action.py --total-timesteps $TOTAL \
  --vector-mode $VECTOR_MODE --save-model --log-dir $LOG_DIR $EXTRA" --env-ids $ENVS --seeds $SEEDS \
  --workers "$WORKERS" --log-dir "$SWEEP/logs" || status=1
$PY -m cleanrl_utils.plot --log-dir "$SWEEP" --output-dir "$SWEEP/plots" || status=1
exit $status

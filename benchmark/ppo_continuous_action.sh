#!/usr/bin/env bash
# CleanRL-style sweep of cleanrl/ppo_continuous_action.py (same-step autoreset, Gymnasium MuJoCo)
# at the Table 5 defaults (EnvPool paper, appendix F), the same envs, seeds and budget as
# benchmark/ppo_continuous_action_envpool.sh, so next-step (EnvPool) and same-step (Gymnasium)
# curves compare run for run. 1M steps unless TOTAL says otherwise.
#   bash benchmark/ppo_continuous_action.sh                                # 4 envs x 3 seeds, 1M
#   TOTAL=10000000 bash benchmark/ppo_continuous_action.sh                 # the paper's 10M
#   ENVS="Hopper-v4" SEEDS="1" bash benchmark/ppo_continuous_action.sh     # a subset
#   VECTOR_MODE=async bash benchmark/ppo_continuous_action.sh              # AsyncVectorEnv (64 processes)
#   SPS=1 bash benchmark/ppo_continuous_action.sh                          # only: SPS, sync vs async
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
ENVS=${ENVS:-"HalfCheetah-v4 Hopper-v4 Walker2d-v4 Ant-v4"}
SEEDS=${SEEDS:-"1 2 3"}
TOTAL=${TOTAL:-1000000}
VECTOR_MODE=${VECTOR_MODE:-sync}
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
mkdir -p runs/logs
failed=()
for env in $ENVS; do
  for seed in $SEEDS; do
    log="runs/logs/ppo_continuous_action__${env}__${seed}__${TOTAL}.log"
    echo "[$(date +%H:%M:%S)] $env seed $seed ($TOTAL steps, $VECTOR_MODE) -> $log"
    # shellcheck disable=SC2086
    $PY cleanrl/ppo_continuous_action.py --env-id "$env" --seed "$seed" --total-timesteps "$TOTAL" \
      --vector-mode "$VECTOR_MODE" --save-model $EXTRA >"$log" 2>&1 || failed+=("$log")
  done
done
# final mean return of each run (last 20 episodes, raw reward units)
for log in runs/logs/ppo_continuous_action__*__"${TOTAL}".log; do
  [[ -f "$log" ]] && echo "$(basename "$log" .log): $(grep -o 'return(last [0-9]*) [-0-9.]*' "$log" | tail -1)"
done
if ((${#failed[@]})); then
  printf 'failed run, see %s\n' "${failed[@]}"
  exit 1
fi
echo "all runs finished; tensorboard --logdir runs"

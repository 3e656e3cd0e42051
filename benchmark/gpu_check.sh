#!/usr/bin/env bash
# The GPU check, for a session lent a CUDA machine: every script trains briefly on the GPU with --save-model and its
# saved model is evaluated on the GPU (`cleanrl_utils.evaluate --cuda`), all at once; then the GPU rows of the speed
# table (benchmark/speed_by_machine.py), one row at a time, while time is left. Usage, from the repo root:
#   bash benchmark/gpu_check.sh OUT_DIR [SECONDS]
# OUT_DIR gets summary.txt (one line per script: exit codes, seconds, the last SPS it printed), runs.log (every run's
# output) and the speed table. SECONDS (default 500) bounds the whole check: a speed row is started only while at
# least 100 s are left. JAX's preallocation of 75% of the GPU is off (XLA_PYTHON_CLIENT_PREALLOCATE=false): the
# check runs many processes on one GPU at once, as does the speed table's loaded pair.
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmark/common.sh
usage_on_help "$@"
at_most_arguments 2 "OUT_DIR [SECONDS]" "$@"
if [ "$#" -eq 0 ]; then
  echo "error: gpu_check.sh needs OUT_DIR (usage: bash benchmark/gpu_check.sh --help)" >&2
  exit 2
fi
OUT=$1
BUDGET=${2:-500}
require_count SECONDS "$BUDGET"
require_writable_folder OUT_DIR "$OUT"
PY=${PYTHON:-python3}
START=$(date +%s)
WORK=$(mktemp -d)
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  lscpu | sed -n 's/^Model name: *//p'
  echo "cores: $(nproc)"
  $PY -c 'import torch, jax, envpool, gymnasium; print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
"| jax", jax.__version__, jax.devices(), "| envpool", envpool.__version__, "| gymnasium", gymnasium.__version__)'
} >"$OUT/summary.txt" 2>&1

ATARI="--env-id Pong-v5 --total-timesteps 2048"
HOPPER="--env-id Hopper-v4"
OFF="$HOPPER --total-timesteps 3000 --learning-starts 1000 --buffer-size 10000"
declare -A RUNS=(
  [ppo]="cleanrl/ppo.py --env-id CartPole-v1 --total-timesteps 2048"
  [ppo_continuous_action]="cleanrl/ppo_continuous_action.py --env-id Pendulum-v1 --num-envs 4 --total-timesteps 2048"
  [ppo_atari_envpool]="cleanrl/ppo_atari_envpool.py $ATARI"
  [ppo_atari_envpool_async]="cleanrl/ppo_atari_envpool_async.py $ATARI"
  [ppo_atari_envpool_xla_jax]="cleanrl/ppo_atari_envpool_xla_jax.py $ATARI"
  [ppo_atari_envpool_distributed]="-m torch.distributed.run --standalone --nproc-per-node 1 cleanrl/ppo_atari_envpool_distributed.py $ATARI"
  [ppo_continuous_action_envpool]="cleanrl/ppo_continuous_action_envpool.py $HOPPER --total-timesteps 8192"
  [ppo_continuous_action_envpool_xla_jax]="cleanrl/ppo_continuous_action_envpool_xla_jax.py $HOPPER --total-timesteps 8192"
  [a2c_continuous_action_envpool]="cleanrl/a2c_continuous_action_envpool.py $HOPPER --total-timesteps 4000"
  [npg_continuous_action_envpool]="cleanrl/npg_continuous_action_envpool.py $HOPPER --total-timesteps 4096"
  [trpo_continuous_action_envpool]="cleanrl/trpo_continuous_action_envpool.py $HOPPER --total-timesteps 4096"
  [reinforce_continuous_action_envpool]="cleanrl/reinforce_continuous_action_envpool.py $HOPPER --total-timesteps 4100"
  [dqn]="cleanrl/dqn.py --env-id CartPole-v1 --total-timesteps 3000 --learning-starts 1000"
  [dqn_atari_envpool]="cleanrl/dqn_atari_envpool.py --env-id Pong-v5 --total-timesteps 3000 --learning-starts 1000 --buffer-size 10000"
  [sac_continuous_action_envpool]="cleanrl/sac_continuous_action_envpool.py $OFF"
  [td3_continuous_action_envpool]="cleanrl/td3_continuous_action_envpool.py $OFF"
  [ddpg_continuous_action_envpool]="cleanrl/ddpg_continuous_action_envpool.py $OFF"
)

train_and_evaluate() {  # name, command: train with --save-model, then evaluate the saved model on the GPU
  local name=$1 command=$2 log="$WORK/$1.log" t0 t1 t2 train_rc eval_rc=- model
  t0=$(date +%s)
  # shellcheck disable=SC2086
  timeout 240 $PY $command --save-model --log-dir "$WORK/$name" >"$log" 2>&1
  train_rc=$?
  t1=$(date +%s)
  model=$(find "$WORK/$name" -name '*.cleanrl_model' 2>/dev/null | head -1)
  if [ -n "$model" ]; then
    echo "--- evaluate $model" >>"$log"
    timeout 150 $PY -m cleanrl_utils.evaluate --model-path "$model" --episodes 1 >>"$log" 2>&1
    eval_rc=$?
  fi
  t2=$(date +%s)
  local sps
  sps=$(grep -oE 'SPS[ =:]+[0-9,]+' "$log" | tail -1)
  echo "$name: train rc $train_rc ($((t1 - t0)) s), evaluate rc $eval_rc ($((t2 - t1)) s), last ${sps:-SPS not printed}" >"$WORK/$name.result"
}

for name in "${!RUNS[@]}"; do
  train_and_evaluate "$name" "${RUNS[$name]}" &
done
# two processes on a host with one GPU: the script must refuse with one line (NCCL cannot put two ranks on one GPU)
timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node 2 cleanrl/ppo_atari_envpool_distributed.py $ATARI \
  >"$WORK/two_ranks_one_gpu.log" 2>&1
echo "two_ranks_one_gpu: rc $? (must be non-zero, with one 'error:' line)" >"$WORK/two_ranks_one_gpu.result"
wait
{
  echo "== smoke, $(($(date +%s) - START)) s after the start"
  cat "$WORK"/*.result | sort
} >>"$OUT/summary.txt"
for log in "$WORK"/*.log; do
  echo "===== $(basename "$log")"
  tail -n 40 "$log"
done >"$OUT/runs.log"

for row in ppo_atari_envpool sac_continuous_action_envpool dqn_atari_envpool ppo_atari_envpool_xla_jax ppo_atari_envpool_async; do
  left=$((BUDGET - ($(date +%s) - START)))
  if [ "$left" -lt 100 ]; then
    echo "speed row $row not run: $left s left" >>"$OUT/summary.txt"
    continue
  fi
  timeout $((left - 10)) $PY benchmark/speed_by_machine.py --only "$row" >>"$OUT/speed.log" 2>&1
  echo "speed row $row: rc $? at $(($(date +%s) - START)) s" >>"$OUT/summary.txt"
  cp docs/benchmarks/speed_by_machine.md "$OUT/"
done
rm -rf "$WORK"
echo "done in $(($(date +%s) - START)) s" >>"$OUT/summary.txt"

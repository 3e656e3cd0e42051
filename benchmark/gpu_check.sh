#!/usr/bin/env bash
# The GPU check, for a session lent a CUDA machine: every script trains briefly on the GPU with --save-model and its
# saved model is evaluated on the GPU (`cleanrl_utils.evaluate --cuda`), all at once; then the GPU rows of the speed
# table (benchmark/speed_by_machine.py), one row at a time, while time is left. Usage, from the repo root:
#   bash benchmark/gpu_check.sh OUT_DIR [SECONDS]
# OUT_DIR gets summary.txt (one line per script: exit codes, seconds, the last SPS it printed), runs.log (every run's
# output) and the speed table. SECONDS (default 500) bounds the whole check: a speed row is started only while at
# least 100 s are left. JAX's preallocation of 75% of the GPU is off (XLA_PYTHON_CLIENT_PREALLOCATE=false): the
# check runs many processes on one GPU at once, as does the speed table's loaded pair. Exit 0 only when every check
# passed; else exit 1 with one line on stderr saying how many runs (training or evaluation), speed rows or the
# two-ranks refusal failed.
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
# the off-policy Atari rows: 250 updates (C51, Rainbow and SAC take over a minute for 500 on a 2-core CPU)
ATARI_OFF="--env-id Pong-v5 --total-timesteps 2000 --learning-starts 1000 --buffer-size 10000"
# every cleanrl/*.py has a row (a test fails on a script without one)
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
  [rpo_continuous_action_envpool]="cleanrl/rpo_continuous_action_envpool.py $HOPPER --total-timesteps 8192"
  [ppo_atari_lstm_envpool]="cleanrl/ppo_atari_lstm_envpool.py $ATARI"
  [pqn]="cleanrl/pqn.py --env-id CartPole-v1 --total-timesteps 2048"
  [pqn_atari_envpool]="cleanrl/pqn_atari_envpool.py $ATARI"
  [c51]="cleanrl/c51.py --env-id CartPole-v1 --total-timesteps 3000 --learning-starts 1000"
  [c51_atari_envpool]="cleanrl/c51_atari_envpool.py $ATARI_OFF"
  [rainbow_atari_envpool]="cleanrl/rainbow_atari_envpool.py $ATARI_OFF"
  [sac_atari_envpool]="cleanrl/sac_atari_envpool.py $ATARI_OFF"
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
  # a run passes when it trained and its saved model evaluated (no model: eval_rc stays "-")
  [ "$train_rc" = 0 ] && [ "$eval_rc" = 0 ] || touch "$WORK/$name.failed"
}

for name in "${!RUNS[@]}"; do
  train_and_evaluate "$name" "${RUNS[$name]}" &
done
# two processes on a host with one GPU: the script must refuse with one line (NCCL cannot put two ranks on one GPU)
timeout 120 $PY -m torch.distributed.run --standalone --nproc-per-node 2 cleanrl/ppo_atari_envpool_distributed.py $ATARI \
  >"$WORK/two_ranks_one_gpu.log" 2>&1
two_ranks_rc=$?
echo "two_ranks_one_gpu: rc $two_ranks_rc (must be non-zero, with one 'error:' line)" >"$WORK/two_ranks_one_gpu.result"
wait
failures=()  # what failed, said in one line at the end
failed_runs=$(find "$WORK" -name '*.failed' | wc -l)
[ "$failed_runs" -eq 0 ] || failures+=("$failed_runs of ${#RUNS[@]} runs failed")
[ "$two_ranks_rc" -ne 0 ] && grep -q 'error: 2 processes per host' "$WORK/two_ranks_one_gpu.log" ||
  failures+=("the two-ranks refusal check failed")
{
  echo "== smoke, $(($(date +%s) - START)) s after the start"
  cat "$WORK"/*.result | sort
} >>"$OUT/summary.txt"
for log in "$WORK"/*.log; do
  echo "===== $(basename "$log")"
  tail -n 40 "$log"
done >"$OUT/runs.log"

failed_rows=0
for row in ppo_atari_envpool sac_continuous_action_envpool dqn_atari_envpool ppo_atari_envpool_xla_jax ppo_atari_envpool_async; do
  left=$((BUDGET - ($(date +%s) - START)))
  if [ "$left" -lt 100 ]; then
    echo "speed row $row not run: $left s left" >>"$OUT/summary.txt"
    continue
  fi
  timeout $((left - 10)) $PY benchmark/speed_by_machine.py --only "$row" >>"$OUT/speed.log" 2>&1
  speed_rc=$?
  echo "speed row $row: rc $speed_rc at $(($(date +%s) - START)) s" >>"$OUT/summary.txt"
  [ "$speed_rc" -eq 0 ] || failed_rows=$((failed_rows + 1))
  cp docs/benchmarks/speed_by_machine.md "$OUT/"
done
[ "$failed_rows" -eq 0 ] || failures+=("$failed_rows speed row(s) failed")
rm -rf "$WORK"
echo "done in $(($(date +%s) - START)) s" >>"$OUT/summary.txt"
if [ "${#failures[@]}" -gt 0 ]; then
  printf -v said '%s, ' "${failures[@]}"
  echo "gpu_check: ${said%, } (see $OUT/summary.txt)" >&2
  exit 1
fi

#!/usr/bin/env bash
# Throughput of cleanrl/ppo_atari_envpool_distributed.py in one run, so the ratio is comparable on a noisy machine:
# 1 process x 8 envs (torch with one thread per core) against 2 processes x 4 envs under torchrun (the cores split
# between them: OMP_NUM_THREADS = cores / 2), the same global batch of 8 envs x 128 steps. The two alternate, each
# REPEATS times; the median SPS of each is printed with the per-iteration split (rollout, update, gradient
# all-reduce, stats sync) the script prints at its end. Usage:
#   bash benchmark/ppo_atari_envpool_distributed_sps.sh [ENV_ID] [STEPS] [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
source benchmark/common.sh
usage_on_help "$@"
at_most_arguments 3 "[ENV_ID] [STEPS] [REPEATS]" "$@"
ENV_ID=${1:-Pong-v5}
STEPS=${2:-32768}
REPEATS=${3:-2}
require_count STEPS "$STEPS"
require_count REPEATS "$REPEATS"
require_env_id "$ENV_ID" envpool.atari
CORES=$(nproc)
LOGDIR=$(mktemp -d)
trap remove_logs_showing_a_failure EXIT
SCRIPT=cleanrl/ppo_atari_envpool_distributed.py

echo "machine: $CORES cores, $(lscpu | sed -n 's/^Model name: *//p'), torch $($PY -c 'import torch; print(torch.__version__)')"

split_of() {  # the per-iteration split the run printed
  grep -o 'rollout .*' "$1" | tail -1
}
declare -a one two
for ((r = 1; r <= REPEATS; r++)); do
  env -u OMP_NUM_THREADS $PY $SCRIPT --env-id "$ENV_ID" --total-timesteps "$STEPS" --local-num-envs 8 \
    --log-dir "$LOGDIR" >"$LOGDIR/one.log" 2>&1
  one+=("$(sps_of "$LOGDIR/one.log")")
  OMP_NUM_THREADS=$((CORES / 2 > 0 ? CORES / 2 : 1)) $PY -m torch.distributed.run --standalone --nproc_per_node 2 \
    $SCRIPT --env-id "$ENV_ID" --total-timesteps "$STEPS" --local-num-envs 4 --log-dir "$LOGDIR" >"$LOGDIR/two.log" 2>&1
  two+=("$(sps_of "$LOGDIR/two.log")")
  echo "repeat $r: 1 process x 8 envs ${one[-1]} SPS ($(split_of "$LOGDIR/one.log"))"
  echo "repeat $r: 2 processes x 4 envs ${two[-1]} SPS ($(split_of "$LOGDIR/two.log"))"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
m_one=$(median "${one[@]}")
m_two=$(median "${two[@]}")
echo "ppo_atari_envpool_distributed $ENV_ID ($STEPS steps, median of $REPEATS): 1 process x 8 envs $m_one SPS," \
  "2 processes x 4 envs $m_two SPS, ratio $(awk -v a="$m_two" -v b="$m_one" 'BEGIN {printf "%.2f", a / b}')x"

#!/usr/bin/env bash
# Throughput of cleanrl/dqn_atari_envpool.py in one run, so the ratios are comparable on a noisy
# machine: the script with its defaults and with every speed lever off (--precision fp32
# --channels-last off --no-uint8-obs --no-fused-adam), in its training regime: learning from step 1,000 on, epsilon at
# its floor almost at once, so every step runs the Q-network on the observation and every 4th step
# takes a gradient step on a batch of 32. Configurations alternate (defaults, levers off, ...), each
# repeated REPEATS times; the median SPS of each is printed. Usage:
#   bash benchmark/dqn_atari_envpool_sps.sh [ENV_ID] [STEPS] [REPEATS] [NUM_ENVS]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
source benchmark/common.sh
usage_on_help "$@"
at_most_arguments 4 "[ENV_ID] [STEPS] [REPEATS] [NUM_ENVS]" "$@"
ENV_ID=${1:-Breakout-v5}
STEPS=${2:-20000}
REPEATS=${3:-2}
NUM_ENVS=${4:-1}
require_count STEPS "$STEPS"
require_count REPEATS "$REPEATS"
require_count NUM_ENVS "$NUM_ENVS"
require_env_id "$ENV_ID" envpool.atari
LOGDIR=$(mktemp -d)
trap remove_logs_showing_a_failure EXIT

echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), torch $($PY -c 'import torch; print(torch.__version__)')"
common=(--env-id "$ENV_ID" --total-timesteps "$STEPS" --num-envs "$NUM_ENVS" --learning-starts 1000
  --exploration-fraction 0.001 --buffer-size 100000 --log-dir "$LOGDIR")

declare -a on off
for ((r = 1; r <= REPEATS; r++)); do
  $PY cleanrl/dqn_atari_envpool.py "${common[@]}" >"$LOGDIR/on.log" 2>&1
  on+=("$(sps_of "$LOGDIR/on.log")")
  $PY cleanrl/dqn_atari_envpool.py "${common[@]}" --precision fp32 --channels-last off --no-uint8-obs --no-fused-adam >"$LOGDIR/off.log" 2>&1
  off+=("$(sps_of "$LOGDIR/off.log")")
  echo "repeat $r: defaults ${on[-1]} SPS, levers off ${off[-1]} SPS"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
m_on=$(median "${on[@]}")
m_off=$(median "${off[@]}")
echo "dqn_atari_envpool $ENV_ID ($STEPS steps, $NUM_ENVS envs, median of $REPEATS): defaults $m_on SPS, levers off $m_off SPS, ratio $(awk -v a="$m_on" -v b="$m_off" 'BEGIN {printf "%.2f", a / b}')x"

#!/usr/bin/env bash
# Throughput of cleanrl/pqn_atari_envpool.py beside CleanRL's pqn_atari_envpool.py layout
# (benchmark/pqn_atari_envpool_cleanrl_layout.py) in one run, so the ratios are comparable on a noisy machine: the
# script with its defaults, with every speed lever off, and the CleanRL layout, at the same settings (8 envs x 128
# steps, 4 epochs of 4 minibatches). Configurations alternate, each REPEATS times; the median SPS of each is printed.
# Usage:
#   bash benchmark/pqn_atari_envpool_sps.sh [ENV_ID] [STEPS] [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
source benchmark/common.sh
usage_on_help "$@"
at_most_arguments 3 "[ENV_ID] [STEPS] [REPEATS]" "$@"
ENV_ID=${1:-Pong-v5}
STEPS=${2:-16384}
REPEATS=${3:-2}
require_count STEPS "$STEPS"
require_count REPEATS "$REPEATS"
require_env_id "$ENV_ID" envpool.atari
LOGDIR=$(mktemp -d)
trap remove_logs_showing_a_failure EXIT

echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), torch $($PY -c 'import torch; print(torch.__version__)')"
declare -a on off cleanrl
for ((r = 1; r <= REPEATS; r++)); do
  $PY cleanrl/pqn_atari_envpool.py --env-id "$ENV_ID" --total-timesteps "$STEPS" --log-dir "$LOGDIR" >"$LOGDIR/on.log" 2>&1
  on+=("$(sps_of "$LOGDIR/on.log")")
  $PY cleanrl/pqn_atari_envpool.py --env-id "$ENV_ID" --total-timesteps "$STEPS" --log-dir "$LOGDIR" \
    --precision fp32 --channels-last off --no-uint8-obs >"$LOGDIR/off.log" 2>&1
  off+=("$(sps_of "$LOGDIR/off.log")")
  $PY benchmark/pqn_atari_envpool_cleanrl_layout.py --env-id "$ENV_ID" --total-timesteps "$STEPS" \
    --log-dir "$LOGDIR" >"$LOGDIR/cleanrl.log" 2>&1
  cleanrl+=("$(sps_of "$LOGDIR/cleanrl.log")")
  echo "repeat $r: defaults ${on[-1]} SPS, levers off ${off[-1]} SPS, CleanRL layout ${cleanrl[-1]} SPS"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
m_on=$(median "${on[@]}")
m_off=$(median "${off[@]}")
m_cleanrl=$(median "${cleanrl[@]}")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
echo "pqn_atari_envpool $ENV_ID ($STEPS steps, median of $REPEATS): defaults $m_on SPS, levers off $m_off SPS," \
  "CleanRL layout $m_cleanrl SPS; defaults / CleanRL $(ratio "$m_on" "$m_cleanrl")x"

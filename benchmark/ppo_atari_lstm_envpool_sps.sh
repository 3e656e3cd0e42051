#!/usr/bin/env bash
# Throughput of cleanrl/ppo_atari_lstm_envpool.py beside CleanRL's ppo_atari_lstm.py layout on EnvPool
# (benchmark/ppo_atari_lstm_envpool_cleanrl_layout.py) in one run, so the ratios are comparable on a noisy machine:
# the CleanRL layout, the script with its defaults, and the script with --precision fp32, at the same settings
# (8 envs x 128 steps, 4 epochs of 4 minibatches of 2 whole env sequences). Configurations alternate, each REPEATS
# times; the median SPS of each is printed, and the ratios to the CleanRL layout. Usage:
#   bash benchmark/ppo_atari_lstm_envpool_sps.sh [ENV_ID] [STEPS] [REPEATS]
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
isa=$(lscpu | sed -n 's/^Flags: *//p' | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16|amx_tile)$' | paste -sd ' ' || true)
echo "ISA flags (lscpu): ${isa:-none of avx2 avx512f avx512_bf16 amx_bf16 amx_tile}${ONEDNN_MAX_CPU_ISA:+ (oneDNN capped: ONEDNN_MAX_CPU_ISA=$ONEDNN_MAX_CPU_ISA)}"

declare -a cleanrl on fp32
for ((r = 1; r <= REPEATS; r++)); do
  $PY benchmark/ppo_atari_lstm_envpool_cleanrl_layout.py --env-id "$ENV_ID" --total-timesteps "$STEPS" \
    --log-dir "$LOGDIR" >"$LOGDIR/cleanrl.log" 2>&1
  cleanrl+=("$(sps_of "$LOGDIR/cleanrl.log")")
  $PY cleanrl/ppo_atari_lstm_envpool.py --env-id "$ENV_ID" --total-timesteps "$STEPS" --log-dir "$LOGDIR" \
    >"$LOGDIR/on.log" 2>&1
  on+=("$(sps_of "$LOGDIR/on.log")")
  $PY cleanrl/ppo_atari_lstm_envpool.py --env-id "$ENV_ID" --total-timesteps "$STEPS" --log-dir "$LOGDIR" \
    --precision fp32 >"$LOGDIR/fp32.log" 2>&1
  fp32+=("$(sps_of "$LOGDIR/fp32.log")")
  echo "repeat $r: CleanRL layout ${cleanrl[-1]} SPS, defaults ${on[-1]} SPS, --precision fp32 ${fp32[-1]} SPS"
done
grep -E '^(precision|channels-last|torch threads): ' "$LOGDIR/on.log" | sed 's/^/defaults resolved: /' || true
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
m_cleanrl=$(median "${cleanrl[@]}")
m_on=$(median "${on[@]}")
m_fp32=$(median "${fp32[@]}")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
echo "ppo_atari_lstm_envpool $ENV_ID ($STEPS steps, median of $REPEATS): CleanRL layout $m_cleanrl SPS, defaults $m_on SPS," \
  "--precision fp32 $m_fp32 SPS; defaults / CleanRL $(ratio "$m_on" "$m_cleanrl")x, fp32 / CleanRL $(ratio "$m_fp32" "$m_cleanrl")x"

#!/usr/bin/env bash
# Throughput of the on-policy MuJoCo scripts on EnvPool in one run, so the ratios are comparable on a noisy machine:
# REINFORCE, A2C, NPG and TRPO at their defaults (Tianshou's settings) beside ppo_continuous_action_envpool.py (Table 5),
# each for STEPS env steps, configurations alternating, each repeated REPEATS times; the median SPS of each (the
# script's own last progress figure, start-up excluded) is printed. Usage:
#   bash benchmark/on_policy_continuous_action_envpool_sps.sh [ENV_ID] [STEPS] [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
source benchmark/common.sh
usage_on_help "$@"
at_most_arguments 3 "[ENV_ID] [STEPS] [REPEATS]" "$@"
ENV_ID=${1:-HalfCheetah-v4}
STEPS=${2:-200000}
REPEATS=${3:-2}
require_count STEPS "$STEPS"
require_count REPEATS "$REPEATS"
require_env_id "$ENV_ID" envpool.mujoco.gym
LOGDIR=$(mktemp -d)
trap remove_logs_showing_a_failure EXIT
SCRIPTS=(ppo reinforce a2c npg trpo)

echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), torch $($PY -c 'import torch; print(torch.__version__)')"
declare -A figures
for ((r = 1; r <= REPEATS; r++)); do
  line="repeat $r:"
  for name in "${SCRIPTS[@]}"; do
    log="$LOGDIR/$name-$r.log"
    $PY "cleanrl/${name}_continuous_action_envpool.py" --env-id "$ENV_ID" --total-timesteps "$STEPS" --log-dir "$LOGDIR" >"$log" 2>&1 ||
      { echo "$name failed:"; tail -3 "$log"; exit 1; }
    figures[$name]="${figures[$name]:-} $(sps_of "$log")"
    line="$line $name $(sps_of "$log"),"
  done
  echo "${line%,}"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "$ENV_ID, $STEPS steps, median SPS of $REPEATS:"
for name in "${SCRIPTS[@]}"; do
  # shellcheck disable=SC2086
  printf '  %-10s %8.0f SPS\n' "$name" "$(median ${figures[$name]})"
done

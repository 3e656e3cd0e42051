#!/usr/bin/env bash
# Torch twin vs JAX twin (MuJoCo, 64-64 tanh MLPs), side by side in one run so the ratio is
# comparable on a noisy machine: cleanrl/ppo_continuous_action_envpool.py and
# cleanrl/ppo_continuous_action_envpool_xla_jax.py with their defaults, alternating, REPEATS times
# each, median. The JAX figure as the script prints it includes its one compilation; the figure
# without it is printed too.
# Usage: bash benchmark/ppo_continuous_action_envpool_xla_jax_sps.sh [ENV_ID] [STEPS] [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
source benchmark/common.sh
usage_on_help "$@"
at_most_arguments 3 "[ENV_ID] [STEPS] [REPEATS]" "$@"
ENV_ID=${1:-HalfCheetah-v4}
STEPS=${2:-262144}
REPEATS=${3:-2}
require_count STEPS "$STEPS"
require_count REPEATS "$REPEATS"
require_env_id "$ENV_ID" envpool.mujoco.gym
LOGDIR=$(mktemp -d)
trap remove_logs_showing_a_failure EXIT

echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "torch $($PY -c 'import torch; print(torch.__version__)'), jax $($PY -c 'import jax; print(jax.__version__)' 2>/dev/null)"
sps_without_compile() {  # steps / (steps / SPS - compile seconds), from the JAX twin's last lines
  local sps compile
  sps=$(sps_of "$1") || return 1
  compile=$(sed -n 's/.*in iteration 1 (\([0-9.]*\) s).*/\1/p' "$1")
  awk -v n="$STEPS" -v s="$sps" -v c="$compile" 'BEGIN {printf "%d", n / (n / s - c)}'
}
declare -a torch_sps jax_sps jax_steady
for ((r = 1; r <= REPEATS; r++)); do
  $PY cleanrl/ppo_continuous_action_envpool.py --env-id "$ENV_ID" --total-timesteps "$STEPS" --log-dir "$LOGDIR" >"$LOGDIR/torch.log" 2>&1
  torch_sps+=("$(sps_of "$LOGDIR/torch.log")")
  $PY cleanrl/ppo_continuous_action_envpool_xla_jax.py --env-id "$ENV_ID" --total-timesteps "$STEPS" --log-dir "$LOGDIR" >"$LOGDIR/jax.log" 2>&1
  jax_sps+=("$(sps_of "$LOGDIR/jax.log")")
  jax_steady+=("$(sps_without_compile "$LOGDIR/jax.log")")
  echo "repeat $r: torch twin ${torch_sps[-1]} SPS, JAX twin ${jax_sps[-1]} SPS (${jax_steady[-1]} without its compilation)"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
m_torch=$(median "${torch_sps[@]}")
m_jax=$(median "${jax_sps[@]}")
m_steady=$(median "${jax_steady[@]}")
echo "$ENV_ID ($STEPS steps, median of $REPEATS): torch twin $m_torch SPS, JAX twin $m_jax SPS ($m_steady without compilation), JAX/torch $(awk -v a="$m_jax" -v b="$m_torch" 'BEGIN {printf "%.2f", a / b}')x"

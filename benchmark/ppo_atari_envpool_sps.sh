#!/usr/bin/env bash
# Throughput of cleanrl/ppo_atari_envpool.py in one run, so the ratios are comparable on a noisy
# machine: raw EnvPool steps/s, the script with its defaults, and with every speed lever off.
# Configurations alternate (defaults, levers-off, defaults, ...) and each is repeated REPEATS
# times; the median SPS of each is printed. Usage:
#   bash benchmark/ppo_atari_envpool_sps.sh [ENV_ID] [STEPS] [REPEATS]
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
LOGDIR=$(mktemp -d)
trap remove_logs_showing_a_failure EXIT

echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), torch $($PY -c 'import torch; print(torch.__version__)')"

raw=$($PY - "$ENV_ID" <<'PYEOF'
import sys, time
import envpool, numpy as np
env = envpool.make(sys.argv[1], env_type="gymnasium", num_envs=8, seed=1, episodic_life=True, reward_clip=True)
env.reset()
rng = np.random.default_rng(0)
n = env.action_space.n
for _ in range(50):
    env.step(rng.integers(0, n, 8))
start, steps = time.perf_counter(), 0
while time.perf_counter() - start < 10:
    env.step(rng.integers(0, n, 8))
    steps += 8
print(int(steps / (time.perf_counter() - start)))
PYEOF
)
echo "raw EnvPool $ENV_ID, 8 envs, random actions: $raw steps/s"

declare -a on off
for ((r = 1; r <= REPEATS; r++)); do
  $PY cleanrl/ppo_atari_envpool.py --env-id "$ENV_ID" --total-timesteps "$STEPS" --log-dir "$LOGDIR" >"$LOGDIR/on.log" 2>&1
  on+=("$(sps_of "$LOGDIR/on.log")")
  $PY cleanrl/ppo_atari_envpool.py --env-id "$ENV_ID" --total-timesteps "$STEPS" --log-dir "$LOGDIR" \
    --precision fp32 --channels-last off --no-uint8-obs >"$LOGDIR/off.log" 2>&1
  off+=("$(sps_of "$LOGDIR/off.log")")
  echo "repeat $r: defaults ${on[-1]} SPS, levers off ${off[-1]} SPS"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
m_on=$(median "${on[@]}")
m_off=$(median "${off[@]}")
echo "ppo_atari_envpool $ENV_ID ($STEPS steps, median of $REPEATS): defaults $m_on SPS, levers off $m_off SPS, ratio $(awk -v a="$m_on" -v b="$m_off" 'BEGIN {printf "%.2f", a / b}')x"

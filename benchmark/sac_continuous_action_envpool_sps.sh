#!/usr/bin/env bash
# Throughput of SAC on Hopper-v4 in one run, so the ratios are comparable on a noisy machine: the CleanRL-layout
# eager baseline (benchmark/sac_continuous_action_cleanrl_layout.py), cleanrl/sac_continuous_action_envpool.py with
# its defaults and with each speed lever flipped, and the TD3 and DDPG scripts at their defaults. Every run learns
# from step 1,000 on (1 env, batch 256, CleanRL's hyperparameters otherwise); SPS is taken over the learning phase
# only (steps 2,000 to STEPS, from the event files' wall times). Configurations alternate, each repeated REPEATS
# times; the median of each is printed, then the per-step split (env, action, update) of the baseline and the script.
#   bash benchmark/sac_continuous_action_envpool_sps.sh [ENV_ID] [STEPS] [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
source benchmark/common.sh
usage_on_help "$@"
at_most_arguments 3 "[ENV_ID] [STEPS] [REPEATS]" "$@"
ENV_ID=${1:-Hopper-v4}
STEPS=${2:-4000}
REPEATS=${3:-2}
require_count STEPS "$STEPS"
require_count REPEATS "$REPEATS"
require_env_id "$ENV_ID" envpool.mujoco.gym
LOGDIR=$(mktemp -d)
trap remove_logs_showing_a_failure EXIT

echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), torch $($PY -c 'import torch; print(torch.__version__)')"
common=(--env-id "$ENV_ID" --total-timesteps "$STEPS" --learning-starts 1000 --buffer-size 100000)
configs=(
  "baseline|benchmark/sac_continuous_action_cleanrl_layout.py"
  "sac defaults|cleanrl/sac_continuous_action_envpool.py"
  "sac --precision bf16|cleanrl/sac_continuous_action_envpool.py --precision bf16"
  "sac --compile|cleanrl/sac_continuous_action_envpool.py --compile"
  "sac --precision bf16 --compile|cleanrl/sac_continuous_action_envpool.py --precision bf16 --compile"
  "sac --no-fused-adam|cleanrl/sac_continuous_action_envpool.py --no-fused-adam"
  "sac --torch-threads 0|cleanrl/sac_continuous_action_envpool.py --torch-threads 0"
  "td3 defaults|cleanrl/td3_continuous_action_envpool.py"
  "ddpg defaults|cleanrl/ddpg_continuous_action_envpool.py"
)

learning_sps() {  # steps per second between step 2,000 and the last logged step, from charts/SPS's wall times
  $PY - "$1" <<'EOF'
import glob, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
events = EventAccumulator(glob.glob(sys.argv[1] + "/*/events*")[0], size_guidance={"scalars": 0})
events.Reload()
points = [(e.step, e.wall_time) for e in events.Scalars("charts/SPS") if e.step >= 2000]
(s0, t0), (s1, t1) = points[0], points[-1]
print(f"{(s1 - s0) / (t1 - t0):.1f}")
EOF
}

declare -A figures
for ((r = 1; r <= REPEATS; r++)); do
  line="repeat $r:"
  for i in "${!configs[@]}"; do
    name=${configs[$i]%%|*}
    read -ra command <<<"${configs[$i]#*|}"
    run_dir="$LOGDIR/$r-$i"
    $PY "${command[@]}" "${common[@]}" --log-dir "$run_dir" >"$run_dir.log" 2>&1 || { echo "$name failed:"; tail -3 "$run_dir.log"; exit 1; }
    sps=$(learning_sps "$run_dir")
    figures[$i]="${figures[$i]:-} $sps"
    line="$line $name $sps,"
  done
  echo "${line%,}"
done

median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# shellcheck disable=SC2086
base=$(median ${figures[0]})
echo "$ENV_ID, learning-phase SPS (median of $REPEATS), ratio to the baseline:"
for i in "${!configs[@]}"; do
  # shellcheck disable=SC2086
  m=$(median ${figures[$i]})
  printf '  %-24s %7.1f SPS  %5.2fx\n' "${configs[$i]%%|*}" "$m" "$(awk -v a="$m" -v b="$base" 'BEGIN {print a / b}')"
done
echo "per-step split, the baseline's own timers (last repeat): $(grep -o 'per step:.*' "$LOGDIR/$REPEATS-0.log")"
$PY benchmark/sac_step_split.py --env-id "$ENV_ID" --profile

#!/usr/bin/env bash
# CleanRL-style sweep of cleanrl/ppo.py (same-step autoreset, Gymnasium vector envs): every
# classic-control env x every seed at CleanRL's classic-control defaults (500k steps, 4 envs x 128
# steps), LunarLander-v3 included when Box2D is installed. Prints each run's final mean return
# (last 20 episodes) and the steps at which that mean first reached THRESHOLD (CartPole: 475).
#   bash benchmark/ppo.sh                                    # all envs x 3 seeds
#   ENVS="CartPole-v1" SEEDS="1 2 3 4 5" TOTAL=300000 bash benchmark/ppo.sh
#   VECTOR_MODE=async bash benchmark/ppo.sh                  # AsyncVectorEnv
#   EXTRA="--track" bash benchmark/ppo.sh                    # log to wandb too
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
default_envs="CartPole-v1 Acrobot-v1 MountainCar-v0"
if $PY -c 'import Box2D' 2>/dev/null; then default_envs="$default_envs LunarLander-v3"; fi
ENVS=${ENVS:-$default_envs}
SEEDS=${SEEDS:-"1 2 3"}
TOTAL=${TOTAL:-500000}
VECTOR_MODE=${VECTOR_MODE:-sync}
THRESHOLD=${THRESHOLD:-475}
EXTRA=${EXTRA:-}
mkdir -p runs/logs
failed=()
for env in $ENVS; do
  for seed in $SEEDS; do
    log="runs/logs/ppo__${env}__${seed}__${TOTAL}__${VECTOR_MODE}.log"
    echo "[$(date +%H:%M:%S)] $env seed $seed ($TOTAL steps, $VECTOR_MODE) -> $log"
    start=$(date +%s)
    # shellcheck disable=SC2086
    $PY cleanrl/ppo.py --env-id "$env" --seed "$seed" --total-timesteps "$TOTAL" --vector-mode "$VECTOR_MODE" \
      --log-dir runs/benchmark_ppo $EXTRA >"$log" 2>&1 || failed+=("$log")
    echo "  $(grep -o 'SPS [0-9,]*  return(last [0-9]*) [-0-9.]*' "$log" | tail -1), $(($(date +%s) - start)) s wall"
  done
done
# steps to THRESHOLD: first step where the mean of the last 20 episodic returns reaches it
$PY - "$THRESHOLD" <<'PYEOF'
import glob, os, sys
import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

threshold = float(sys.argv[1])
for run in sorted(glob.glob("runs/benchmark_ppo/*")):
    acc = EventAccumulator(run, size_guidance={"scalars": 0})
    acc.Reload()
    if "charts/episodic_return" not in acc.Tags()["scalars"]:
        continue
    events = acc.Scalars("charts/episodic_return")
    returns = np.array([e.value for e in events])
    first = next((events[i].step for i in range(19, len(returns)) if returns[i - 19 : i + 1].mean() >= threshold), None)
    print(f"{os.path.basename(run)}: last-20 mean {returns[-20:].mean():.1f}, first >= {threshold:g} at step {first}")
PYEOF
if ((${#failed[@]})); then
  printf 'failed run, see %s\n' "${failed[@]}"
  exit 1
fi
echo "all runs finished; tensorboard --logdir runs/benchmark_ppo"

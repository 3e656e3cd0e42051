#!/usr/bin/env bash
# CleanRL-style sweep of cleanrl/ppo.py (same-step autoreset, Gymnasium vector envs): every
# classic-control env x every seed at CleanRL's classic-control defaults (500k steps, 4 envs x 128
# steps), LunarLander-v3 included when Box2D is installed. Then the plots and summary table, and
# for each run the step at which the mean of its last 20 returns first reached THRESHOLD
# (CartPole: 475). Everything goes into one folder of its own, runs/sweeps/ppo-<date>-<time>: the
# runs, their logs (logs/) and the plots and summary.md (plots/). Only that folder is plotted, so
# no other run (a `make run`, an older sweep) joins the curves.
#   bash benchmark/ppo.sh                                    # all envs x 3 seeds
#   ENVS="CartPole-v1" SEEDS="1 2 3 4 5" TOTAL=300000 bash benchmark/ppo.sh
#   VECTOR_MODE=async bash benchmark/ppo.sh                  # AsyncVectorEnv
#   EXTRA="--track" WORKERS=2 bash benchmark/ppo.sh          # wandb too, two runs at once
#   SWEEP=runs/sweeps/ppo-20250101-120000 SEEDS="4 5" bash benchmark/ppo.sh   # add seeds to a sweep
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benchmark/common.sh
source benchmark/common.sh
sweep_arguments "$@"
PY=${PYTHON:-.venv/bin/python}
default_envs="CartPole-v1 Acrobot-v1 MountainCar-v0"
if $PY -c 'import Box2D' 2>/dev/null; then default_envs="$default_envs LunarLander-v3"; fi
ENVS=${ENVS:-$default_envs}
SEEDS=${SEEDS:-"1 2 3"}
TOTAL=${TOTAL:-500000}
VECTOR_MODE=${VECTOR_MODE:-sync}
THRESHOLD=${THRESHOLD:-475}
WORKERS=${WORKERS:-1}
EXTRA=${EXTRA:-}
SWEEP=${SWEEP:-runs/sweeps/ppo-$(date +%Y%m%d-%H%M%S)}
LOG_DIR=$(printf %q "$SWEEP")  # --log-dir of every run, quoted for the --command string
echo "sweep folder: $SWEEP"
status=0
# shellcheck disable=SC2086
$PY -m cleanrl_utils.benchmark --command "$PY cleanrl/ppo.py --total-timesteps $TOTAL --vector-mode $VECTOR_MODE \
  --log-dir $LOG_DIR $EXTRA" --env-ids $ENVS --seeds $SEEDS --workers "$WORKERS" --log-dir "$SWEEP/logs" || status=1
# steps to THRESHOLD: first step where the mean of the last 20 episodic returns reaches it
$PY - "$THRESHOLD" "$SWEEP" <<'PYEOF' || status=1
import glob, os, sys
import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

threshold = float(sys.argv[1])
for run in sorted(glob.glob(os.path.join(sys.argv[2], "*"))):
    acc = EventAccumulator(run, size_guidance={"scalars": 0})
    acc.Reload()
    if "charts/episodic_return" not in acc.Tags()["scalars"]:
        continue
    events = acc.Scalars("charts/episodic_return")
    returns = np.array([e.value for e in events])
    first = next((events[i].step for i in range(19, len(returns)) if returns[i - 19 : i + 1].mean() >= threshold), None)
    print(f"{os.path.basename(run)}: last-20 mean {returns[-20:].mean():.1f}, first >= {threshold:g} at step {first}")
PYEOF
$PY -m cleanrl_utils.plot --log-dir "$SWEEP" --output-dir "$SWEEP/plots" || status=1
exit $status

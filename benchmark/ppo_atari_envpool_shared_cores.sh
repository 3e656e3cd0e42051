#!/usr/bin/env bash
# Do concurrent runs share the cores well? ppo_atari_envpool.py at its default flags: one run alone,
# then 2 workers x 2 seeds through cleanrl_utils.benchmark (which gives each run OMP_NUM_THREADS =
# cores / concurrent runs), then the same two runs with one torch thread per core each (what every
# run did before: OMP_NUM_THREADS=<cores>; on fewer steps, as it collapses). Prints each run's SPS and the
# sum over the concurrent runs.
#   bash benchmark/ppo_atari_envpool_shared_cores.sh [ENV_ID] [STEPS] [OVERSUBSCRIBED_STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
source benchmark/common.sh
usage_on_help "$@"
at_most_arguments 3 "[ENV_ID] [STEPS] [OVERSUBSCRIBED_STEPS]" "$@"
ENV_ID=${1:-Pong-v5}
STEPS=${2:-40960}
OVERSUBSCRIBED_STEPS=${3:-4096}
require_count STEPS "$STEPS"
require_count OVERSUBSCRIBED_STEPS "$OVERSUBSCRIBED_STEPS"
require_env_id "$ENV_ID" envpool.atari
CORES=$($PY -c "import os; print(len(os.sched_getaffinity(0)))")
OUT=$(mktemp -d /tmp/shared-cores.XXXXXX)
LOGDIR=$OUT
trap remove_logs_showing_a_failure EXIT
echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p'), $CORES cores; $ENV_ID, $STEPS steps per run, default flags"

env -u OMP_NUM_THREADS $PY cleanrl/ppo_atari_envpool.py --env-id "$ENV_ID" --total-timesteps "$STEPS" \
  --log-dir "$OUT/alone" >"$OUT/alone.log" 2>&1
alone=$(sps_of "$OUT/alone.log")
echo "one run alone (torch threads: $CORES):            SPS $alone"

sweep() {  # $1: label, $2: steps, rest: env for the runs
  local label=$1 steps=$2
  shift 2
  env "$@" $PY -m cleanrl_utils.benchmark --command "$PY cleanrl/ppo_atari_envpool.py --total-timesteps $steps --log-dir $OUT/$label" \
    --env-ids "$ENV_ID" --seeds 1 2 --workers 2 --log-dir "$OUT/$label/logs" >"$OUT/$label.log" 2>&1
  local total=0 each=()
  for log in "$OUT/$label"/logs/*.log; do
    sps=$(sps_of "$log") || exit 1  # a command substitution: no errexit of its own
    total=$((total + sps))
    each+=("$sps")
  done
  echo " $(IFS=+; echo "${each[*]}" | sed 's/+/ + /g') = $total"
}
split=$(sweep split "$STEPS" -u OMP_NUM_THREADS)
echo "2 workers x 2 seeds, benchmark's thread split:    SPS${split}"
oversubscribed=$(sweep oversubscribed "$OVERSUBSCRIBED_STEPS" OMP_NUM_THREADS="$CORES")
echo "2 workers x 2 seeds, $CORES torch threads each ($OVERSUBSCRIBED_STEPS steps): SPS${oversubscribed}"

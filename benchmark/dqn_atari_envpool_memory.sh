#!/usr/bin/env bash
# Memory and checkpoint cost of cleanrl/dqn_atari_envpool.py with its default 1M-transition replay buffer
# full: fill it (random actions, 8 envs for speed), train a few thousand steps on it, write the
# checkpoint with the buffer; then resume from that checkpoint and train on. Prints the peak resident
# memory of each process, the checkpoint's size and write time (the script's own line) and the resume's
# time to a restored buffer. Needs ~8 GB of memory and ~8 GB of disk in the temporary folder. Usage:
#   bash benchmark/dqn_atari_envpool_memory.sh [ENV_ID] [BUFFER_SIZE]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
source benchmark/common.sh
usage_on_help "$@"
at_most_arguments 2 "[ENV_ID] [BUFFER_SIZE]" "$@"
ENV_ID=${1:-Breakout-v5}
BUFFER=${2:-1000000}
require_count BUFFER "$BUFFER"
require_env_id "$ENV_ID" envpool.atari
LOGDIR=$(mktemp -d)
trap remove_logs_showing_a_failure EXIT
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $(free -g | awk '/Mem:/ {print $2}') GB memory"

FILL=$((BUFFER + 16000))  # the buffer full, then 16,000 more steps: the ring wraps while it trains
/usr/bin/time -f "peak resident memory: %M KB" $PY cleanrl/dqn_atari_envpool.py --env-id "$ENV_ID" --num-envs 8 \
  --buffer-size "$BUFFER" --total-timesteps "$FILL" --learning-starts "$((BUFFER - 8000))" --start-e 1 --end-e 1 \
  --log-dir "$LOGDIR" >"$LOGDIR/fill.log" 2>&1
run_dir=$(ls -d "$LOGDIR"/*/)
echo "fill $BUFFER + train to $FILL steps: $(grep -h 'peak resident' "$LOGDIR/fill.log" | awk '{printf "peak resident memory %.2f GiB", $4 / 2^20}')"
grep -h '^checkpoint:' "$LOGDIR/fill.log" || echo "no checkpoint line (written in under a second)"

start=$(date +%s.%N)
/usr/bin/time -f "peak resident memory: %M KB" $PY cleanrl/dqn_atari_envpool.py --resume "$run_dir/checkpoint.pt" \
  --total-timesteps "$((FILL + 8000))" --no-checkpoint-buffer 2>&1 | while IFS= read -r line; do
  case $line in
    "replay buffer:"*) echo "resume: '$line' after $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}') s (imports included)" ;;
    "peak resident"*) echo "resume and train $((8000)) steps: $(echo "$line" | awk '{printf "peak resident memory %.2f GiB", $4 / 2^20}')" ;;
  esac
done

# Sourced by the benchmark/*.sh scripts that take positional arguments (sweep scripts share helpers; the training
# scripts never do): -h/--help prints the script's header comment, numbers and env ids are checked before anything
# runs, and a failed run's own last lines are shown (its log lives in a temporary folder the script removes at exit).

usage_on_help() {  # "$@" of the script
  local arg
  for arg in "$@"; do
    case "$arg" in
      -h | --help)
        sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0"
        exit 0
        ;;
    esac
  done
}

sweep_arguments() {  # "$@" of a sweep script: --help prints its header; it takes no other argument (env vars set it)
  usage_on_help "$@"
  if [ "$#" -gt 0 ]; then
    echo "error: $(basename "$0") takes no arguments, got '$*'; it reads its settings from variables such as ENVS, SEEDS and TOTAL (usage: bash $0 --help)" >&2
    exit 2
  fi
}

at_most_arguments() {  # N "USAGE" "$@" of a positional script: more than N arguments is an error, before anything runs
  local most=$1 usage=$2
  shift 2
  if [ "$#" -gt "$most" ]; then
    echo "error: $(basename "$0") takes at most $most arguments $usage, got '${*:most+1}' (usage: bash $0 --help)" >&2
    exit 2
  fi
}

require_count() {  # NAME VALUE: a positive integer
  if ! [[ "$2" =~ ^[1-9][0-9]*$ ]]; then
    echo "error: $1 must be a positive integer, got '$2' (usage: bash $0 --help)" >&2
    exit 2
  fi
}

require_writable_folder() {  # NAME PATH: create PATH if missing; it must then be a folder this user can write into
  mkdir -p -- "$2" 2>/dev/null
  if ! [ -d "$2" ] || ! [ -w "$2" ] || ! [ -x "$2" ]; then
    echo "error: $1 '$2' is not a writable folder" >&2
    exit 2
  fi
}

require_env_id() {  # ENV_ID FAMILY: an EnvPool id of that family (cleanrl_utils.checks names close matches)
  "$PY" -W ignore -c 'import sys; from cleanrl_utils.checks import check_envpool_id; check_envpool_id(*sys.argv[1:])' "$1" "$2"
}

sps_of() {  # LOG: the last SPS figure the run printed; a run that exited 0 without one is an error, said in one line
  local sps
  sps=$(grep -o 'SPS [0-9,]*' "$1" | tail -1 | tr -d 'SPS ,' || true)
  if [ -z "$sps" ]; then
    echo "error: a run exited 0 without printing its SPS figure (no 'SPS n' line in its log, $(basename "$1"))" >&2
    [ -z "${LOGDIR:-}" ] || touch "$LOGDIR/.reported"  # said already: the EXIT trap shows no log
    return 1
  fi
  echo "$sps"
}

remove_logs_showing_a_failure() {  # the EXIT trap: on failure, the end of the newest log first
  local status=$? log
  if [ "$status" -ne 0 ] && [ -n "${LOGDIR:-}" ] && [ ! -e "$LOGDIR/.reported" ]; then
    log=$(ls -t "$LOGDIR"/*.log "$LOGDIR"/*/*.log 2>/dev/null | head -1 || true)
    if [ -n "$log" ] && grep -q '[^[:space:]]' "$log"; then
      echo "error: a run failed (exit $status); the end of its log, $(basename "$log"):" >&2
      grep -v '^[[:space:]]*$' "$log" | tail -n 5 >&2
    elif [ -n "$log" ]; then
      echo "error: a run failed (exit $status) and its log, $(basename "$log"), is empty" >&2
    fi
  fi
  rm -rf "${LOGDIR:-}"
}

tianshou_mujoco_sweep() {  # SCRIPT DEFAULT_CHECKPOINT_EVERY: the Tianshou-protocol sweep of cleanrl/SCRIPT.py, with
  # every checkpoint kept and evaluated (the header of benchmark/a2c_continuous_action_envpool.sh and its siblings)
  PY=${PYTHON:-.venv/bin/python}
  ENVS=${ENVS:-"HalfCheetah-v4 Hopper-v4 Walker2d-v4"}
  SEEDS=${SEEDS:-"1 2 3"}
  TOTAL=${TOTAL:-1000000}
  CHECKPOINT_EVERY=${CHECKPOINT_EVERY:-$2}
  WORKERS=${WORKERS:-1}
  EXTRA=${EXTRA:-}
  SWEEP=${SWEEP:-runs/sweeps/$1-$(date +%Y%m%d-%H%M%S)}
  LOG_DIR=$(printf %q "$SWEEP")  # --log-dir of every run, quoted for the --command string
  echo "sweep folder: $SWEEP"
  local status=0 run
  # shellcheck disable=SC2086
  $PY -m cleanrl_utils.benchmark \
    --command "$PY cleanrl/$1.py --total-timesteps $TOTAL --checkpoint-every $CHECKPOINT_EVERY --keep-checkpoints --log-dir $LOG_DIR $EXTRA" \
    --env-ids $ENVS --seeds $SEEDS --workers "$WORKERS" --log-dir "$SWEEP/logs" || status=1
  $PY -m cleanrl_utils.plot --log-dir "$SWEEP" --output-dir "$SWEEP/plots" || status=1
  for run in "$SWEEP"/*__*__*/; do
    [ -f "$run/checkpoint.pt" ] || continue
    $PY -m cleanrl_utils.evaluate --model-path "$run" --greedy --episodes 10 --no-cuda > "$run/eval.txt" || status=1
    echo "$(basename "$run"): $(tail -n 1 "$run/eval.txt")"
  done
  return $status
}

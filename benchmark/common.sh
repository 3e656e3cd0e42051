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

require_count() {  # NAME VALUE: a positive integer
  if ! [[ "$2" =~ ^[1-9][0-9]*$ ]]; then
    echo "error: $1 must be a positive integer, got '$2' (usage: bash $0 --help)" >&2
    exit 2
  fi
}

require_env_id() {  # ENV_ID FAMILY: an EnvPool id of that family (cleanrl_utils.checks names close matches)
  "$PY" -W ignore -c 'import sys; from cleanrl_utils.checks import check_envpool_id; check_envpool_id(*sys.argv[1:])' "$1" "$2"
}

remove_logs_showing_a_failure() {  # the EXIT trap: on failure, the end of the newest log first
  local status=$? log
  if [ "$status" -ne 0 ] && [ -n "${LOGDIR:-}" ]; then
    log=$(ls -t "$LOGDIR"/*.log "$LOGDIR"/*/*.log 2>/dev/null | head -1 || true)
    if [ -n "$log" ]; then
      echo "error: a run failed (exit $status); the end of its log, $(basename "$log"):" >&2
      grep -v '^[[:space:]]*$' "$log" | tail -n 5 >&2
    fi
  fi
  rm -rf "${LOGDIR:-}"
}

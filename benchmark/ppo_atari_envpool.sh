#!/usr/bin/env bash
# CleanRL-style sweep of cleanrl/ppo_atari_envpool.py: every env x every seed at the Table 3
# defaults (EnvPool paper, appendix F), then the tuned Pong run of Table 4, then the plots.
# Everything goes into one folder of its own, runs/sweeps/ppo_atari_envpool-<date>-<time>: the runs,
# their logs (logs/) and the plots and summary.md (plots/). Only that folder is plotted, so no other
# run (a `make run`, an older sweep) joins the curves.
#   ENVS="Pong-v5" SEEDS="1" bash benchmark/ppo_atari_envpool.sh      # a subset
#   EXTRA="--track" WORKERS=2 bash benchmark/ppo_atari_envpool.sh     # wandb, two runs at once
#   SWEEP=runs/sweeps/ppo_atari_envpool-20250101-120000 SEEDS="4 5" bash benchmark/ppo_atari_envpool.sh  # add seeds
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benchmark/common.sh
source benchmark/common.sh
sweep_arguments "$@"
PY=${PYTHON:-.venv/bin/python}
ENVS=${ENVS:-"Pong-v5 Breakout-v5 BeamRider-v5"}
SEEDS=${SEEDS:-"1 2 3"}
WORKERS=${WORKERS:-1}
EXTRA=${EXTRA:-}
SWEEP=${SWEEP:-runs/sweeps/ppo_atari_envpool-$(date +%Y%m%d-%H%M%S)}
LOG_DIR=$(printf %q "$SWEEP")  # --log-dir of every run, quoted for the --command string
echo "sweep folder: $SWEEP"
status=0
# shellcheck disable=SC2086
$PY -m cleanrl_utils.benchmark --command "$PY cleanrl/ppo_atari_envpool.py --log-dir $LOG_DIR $EXTRA" \
  --env-ids $ENVS --seeds $SEEDS --workers "$WORKERS" --log-dir "$SWEEP/logs" || status=1
if [[ " $ENVS " == *" Pong-v5 "* ]]; then
  # Table 4, tuned for Pong only: 7M steps, 64 envs, lr 0.002, vf 2.24, no entropy bonus,
  # grad norm 1.13, no value clipping (other settings as Table 3)
  # shellcheck disable=SC2086
  $PY -m cleanrl_utils.benchmark --command "$PY cleanrl/ppo_atari_envpool.py --exp-name ppo_atari_envpool_tuned \
    --total-timesteps 7000000 --learning-rate 0.002 --num-envs 64 --num-steps 128 --num-minibatches 4 \
    --update-epochs 4 --clip-coef 0.1 --vf-coef 2.24 --ent-coef 0.0 --max-grad-norm 1.13 --no-clip-vloss \
    --log-dir $LOG_DIR $EXTRA" --env-ids Pong-v5 --seeds $SEEDS --workers "$WORKERS" --log-dir "$SWEEP/logs" || status=1
fi
$PY -m cleanrl_utils.plot --log-dir "$SWEEP" --output-dir "$SWEEP/plots" || status=1
exit $status

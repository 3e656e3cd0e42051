#!/usr/bin/env bash
# CleanRL-style sweep of cleanrl/ppo_atari_envpool.py: every env x every seed at the Table 3
# defaults (EnvPool paper, appendix F), then the tuned Pong run of Table 4.
#   ENVS="Pong-v5" SEEDS="1" bash benchmark/ppo_atari_envpool.sh      # a subset
#   EXTRA="--track" bash benchmark/ppo_atari_envpool.sh                 # log to wandb too
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
ENVS=${ENVS:-"Pong-v5 Breakout-v5 BeamRider-v5"}
SEEDS=${SEEDS:-"1 2 3"}
EXTRA=${EXTRA:-}
mkdir -p runs/logs
failed=()
for env in $ENVS; do
  for seed in $SEEDS; do
    log="runs/logs/ppo_atari_envpool__${env}__${seed}.log"
    echo "[$(date +%H:%M:%S)] $env seed $seed -> $log"
    # shellcheck disable=SC2086
    $PY cleanrl/ppo_atari_envpool.py --env-id "$env" --seed "$seed" $EXTRA >"$log" 2>&1 || failed+=("$log")
  done
done
if [[ " $ENVS " == *" Pong-v5 "* ]]; then
  # Table 4: tuned for Pong only (64 envs, lr 0.002, vf 2.24, no entropy, grad norm 1.13, no value clipping)
  for seed in $SEEDS; do
    log="runs/logs/ppo_atari_envpool_tuned__Pong-v5__${seed}.log"
    echo "[$(date +%H:%M:%S)] tuned Pong seed $seed -> $log"
    # shellcheck disable=SC2086
    $PY cleanrl/ppo_atari_envpool.py --exp-name ppo_atari_envpool_tuned --env-id Pong-v5 --seed "$seed" \
      --total-timesteps 7000000 --learning-rate 0.002 --num-envs 64 --num-steps 128 --num-minibatches 4 \
      --update-epochs 4 --clip-coef 0.1 --vf-coef 2.24 --ent-coef 0.0 --max-grad-norm 1.13 --no-clip-vloss \
      $EXTRA >"$log" 2>&1 || failed+=("$log")
  done
fi
if ((${#failed[@]})); then
  printf 'failed run, see %s\n' "${failed[@]}"
  exit 1
fi
echo "all runs finished; tensorboard --logdir runs"

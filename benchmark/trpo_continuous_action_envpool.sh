#!/usr/bin/env bash
# Sweep of cleanrl/trpo_continuous_action_envpool.py at Tianshou's MuJoCo benchmark settings: every env x every seed,
# TOTAL steps each (default 1M, the steps of Tianshou's table; TOTAL=3000000 for its REINFORCE row), with a checkpoint
# kept every CHECKPOINT_EVERY iterations (default 30: ~30,000 steps at 16 envs x 64 steps, Tianshou's epoch), then the plots
# and, per run, the best mean return of 10 deterministic evaluation episodes over the kept checkpoints (Tianshou's
# figure; eval.txt in each run folder), to read beside the final training returns in plots/summary.md. Everything
# goes into one folder of its own, runs/sweeps/trpo_continuous_action_envpool-<date>-<time>: the runs, their logs (logs/)
# and the plots (plots/).
#   ENVS="Hopper-v4" SEEDS="1" bash benchmark/trpo_continuous_action_envpool.sh    # a subset
#   EXTRA="--track" WORKERS=2 bash benchmark/trpo_continuous_action_envpool.sh   # wandb, two runs at once
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benchmark/common.sh
source benchmark/common.sh
sweep_arguments "$@"
tianshou_mujoco_sweep trpo_continuous_action_envpool 30

#!/usr/bin/env bash
# Throughput of cleanrl/ppo_continuous_action_envpool.py against the same PPO on Gymnasium's vector
# env (cleanrl/ppo_continuous_action.py: sync vector env, same-step autoreset), at equal
# hyperparameters: both get the Table 5 settings below (EnvPool paper, appendix F: 64 envs x 64
# steps, 2 epochs x 4 minibatches, 1 torch thread), so their ratio measures the env and the code,
# not the amount of gradient work. For context, and only as separately labelled lines: raw EnvPool
# steps/s (64 envs, random actions) and CleanRL's ppo_continuous_action defaults (1 env, 2,048-step
# rollouts, 10 epochs x 32 minibatches: about 80x the gradient work per sample, so its ratio to the
# others measures hyperparameters, not code). Every measurement runs STEPS steps (the CleanRL loop:
# STEPS rounded down to whole 2,048-step rollouts, at least one); the four alternate, in reversed
# order every other repeat, REPEATS times; every figure printed at the end is a median.
# Usage:
#   bash benchmark/ppo_continuous_action_envpool_sps.sh [ENV_ID] [STEPS] [REPEATS]
#   bash benchmark/ppo_continuous_action_envpool_sps.sh HalfCheetah-v4 8192 1   # a quick end-to-end check
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
source benchmark/common.sh
usage_on_help "$@"
at_most_arguments 3 "[ENV_ID] [STEPS] [REPEATS]" "$@"
ENV_ID=${1:-HalfCheetah-v4}
STEPS=${2:-131072}
REPEATS=${3:-3}
require_count STEPS "$STEPS"
require_count REPEATS "$REPEATS"
require_env_id "$ENV_ID" envpool.mujoco.gym
LOGDIR=$(mktemp -d)
trap remove_logs_showing_a_failure EXIT
# Table 5, given explicitly to both scripts so a changed default in either cannot skew the comparison
TABLE5=(--env-id "$ENV_ID" --total-timesteps "$STEPS" --num-envs 64 --num-steps 64 --learning-rate 0.00295
  --gamma 0.99 --gae-lambda 0.95 --num-minibatches 4 --update-epochs 2 --clip-coef 0.2 --no-clip-vloss
  --ent-coef 0.0 --vf-coef 1.3 --max-grad-norm 3.5 --torch-threads 1 --log-dir "$LOGDIR")

echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), torch $($PY -c 'import torch; print(torch.__version__)'), load average $(cut -d' ' -f1-3 /proc/loadavg)"

cat >"$LOGDIR/raw.py" <<'PYEOF'
# Raw EnvPool: 64 envs stepped with uniform random actions, STEPS steps after 50 warm-up steps.
import sys, time
import envpool, numpy as np
env_id, steps = sys.argv[1], int(sys.argv[2])
env = envpool.make(env_id, env_type="gymnasium", num_envs=64, seed=1)
env.reset()
rng = np.random.default_rng(0)
space = env.single_action_space
def act():
    return rng.uniform(space.low, space.high, (64,) + space.shape).astype(np.float32)
for _ in range(50):
    env.step(act())
start = time.perf_counter()
for _ in range(max(1, steps // 64)):
    env.step(act())
print(int(max(1, steps // 64) * 64 / (time.perf_counter() - start)))
PYEOF

cat >"$LOGDIR/cleanrl_defaults.py" <<'PYEOF'
# One gymnasium env, CleanRL's ppo_continuous_action layout and hyperparameters (2,048-step rollouts,
# 10 epochs x 32 minibatches of 64), the same network sizes as the scripts, timed over STEPS steps
# (whole rollouts, at least one) from the first step, as the scripts' SPS is.
import sys, time
import gymnasium as gym, numpy as np, torch, torch.nn as nn
from torch.distributions.normal import Normal
torch.set_num_threads(1)
num_steps, epochs, minibatch, gamma, lam = 2048, 10, 64, 0.99, 0.95
iterations = max(1, int(sys.argv[2]) // num_steps)
def make():
    env = gym.make(sys.argv[1])
    env = gym.wrappers.FlattenObservation(env)
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env = gym.wrappers.ClipAction(env)
    env = gym.wrappers.NormalizeObservation(env)
    env = gym.wrappers.TransformObservation(env, lambda o: np.clip(o, -10, 10), env.observation_space)
    env = gym.wrappers.NormalizeReward(env, gamma=gamma)
    return gym.wrappers.TransformReward(env, lambda r: float(np.clip(r, -10, 10)))
envs = gym.vector.SyncVectorEnv([make])
n_obs, n_act = envs.single_observation_space.shape[0], envs.single_action_space.shape[0]
def mlp(out):
    return nn.Sequential(nn.Linear(n_obs, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, out))
critic, actor = mlp(1), mlp(n_act)
logstd = nn.Parameter(torch.zeros(1, n_act))
params = list(critic.parameters()) + list(actor.parameters()) + [logstd]
opt = torch.optim.Adam(params, lr=3e-4, eps=1e-5)
def dist(o):
    mean = actor(o)
    return Normal(mean, logstd.expand_as(mean).exp())
obs_np, _ = envs.reset(seed=1)
def iteration():
    global obs_np
    obs = torch.zeros(num_steps, n_obs); acts = torch.zeros(num_steps, n_act)
    logps, rews, dones, vals = (torch.zeros(num_steps) for _ in range(4))
    for t in range(num_steps):
        o = torch.tensor(obs_np, dtype=torch.float32)
        with torch.no_grad():
            d = dist(o); a = d.sample(); logps[t] = d.log_prob(a).sum(); vals[t] = critic(o).squeeze()
        obs[t], acts[t] = o[0], a[0]
        obs_np, r, term, trunc, _ = envs.step(a.numpy())
        rews[t], dones[t] = float(r[0]), float(term[0] or trunc[0])
    with torch.no_grad():
        next_v = critic(torch.tensor(obs_np, dtype=torch.float32)).squeeze()
    adv = torch.zeros(num_steps); last = 0.0
    for t in reversed(range(num_steps)):
        nv = next_v if t == num_steps - 1 else vals[t + 1]
        delta = rews[t] + gamma * nv * (1 - dones[t]) - vals[t]
        last = delta + gamma * lam * (1 - dones[t]) * last
        adv[t] = last
    ret = adv + vals
    for _ in range(epochs):
        perm = torch.randperm(num_steps)
        for s in range(0, num_steps, minibatch):
            i = perm[s:s + minibatch]
            d = dist(obs[i]); ratio = (d.log_prob(acts[i]).sum(-1) - logps[i]).exp()
            a_n = (adv[i] - adv[i].mean()) / (adv[i].std() + 1e-8)
            pg = torch.max(-a_n * ratio, -a_n * ratio.clamp(0.8, 1.2)).mean()
            v = 0.5 * ((critic(obs[i]).squeeze(-1) - ret[i]) ** 2).mean()
            opt.zero_grad(); (pg + 0.5 * v).backward(); nn.utils.clip_grad_norm_(params, 0.5); opt.step()
start = time.perf_counter()
for _ in range(iterations):
    iteration()
print(int(iterations * num_steps / (time.perf_counter() - start)))
PYEOF

fail() {  # a run that failed: say which, show the end of its log, stop
  echo "error: $1 failed; the end of its log:" >&2
  tail -5 "$2" >&2
  exit 1
}
measure() {  # one measurement; prints its figure
  local log="$LOGDIR/$1.log"
  case $1 in
    raw) $PY "$LOGDIR/raw.py" "$ENV_ID" "$STEPS" >"$log" 2>&1 || fail "raw EnvPool" "$log"; tail -1 "$log" ;;
    envpool) $PY cleanrl/ppo_continuous_action_envpool.py "${TABLE5[@]}" >"$log" 2>&1 || fail "$1" "$log"; sps_of "$log" ;;
    gymnasium) $PY cleanrl/ppo_continuous_action.py "${TABLE5[@]}" --vector-mode sync >"$log" 2>&1 || fail "$1" "$log"; sps_of "$log" ;;
    defaults) $PY "$LOGDIR/cleanrl_defaults.py" "$ENV_ID" "$STEPS" >"$log" 2>&1 || fail "CleanRL-defaults loop" "$log"; tail -1 "$log" ;;
  esac
}

declare -A figures
ORDER=(raw envpool gymnasium defaults)
for ((r = 1; r <= REPEATS; r++)); do
  order=("${ORDER[@]}")
  if ((r % 2 == 0)); then order=(defaults gymnasium envpool raw); fi
  line="repeat $r:"
  for name in "${order[@]}"; do
    figure=$(measure "$name")
    figures[$name]="${figures[$name]:-} $figure"
    line+=" $name $figure,"
  done
  echo "${line%,}"
done
median() { printf '%s\n' $1 | sort -n | awk '{a[NR]=$1} END {printf "%.0f", (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
raw=$(median "${figures[raw]}")
envpool=$(median "${figures[envpool]}")
gymnasium=$(median "${figures[gymnasium]}")
defaults=$(median "${figures[defaults]}")
echo "$ENV_ID, $STEPS steps per run, medians of $REPEATS alternated repeats:"
echo "  raw EnvPool, 64 envs, random actions: $raw steps/s"
echo "  Table 5 PPO on EnvPool (ppo_continuous_action_envpool.py): $envpool SPS ($(ratio "$envpool" "$raw") of raw EnvPool)"
echo "  Table 5 PPO on Gymnasium's sync vector env (ppo_continuous_action.py): $gymnasium SPS"
echo "  at equal hyperparameters, EnvPool / Gymnasium: $(ratio "$envpool" "$gymnasium")x"
echo "  separately, not comparable (other hyperparameters, ~80x the gradient work per sample):" \
  "CleanRL's defaults, 1 env, 10 epochs x 32 minibatches: $defaults SPS"

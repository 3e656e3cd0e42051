#!/usr/bin/env bash
# Throughput of cleanrl/ppo_continuous_action_envpool.py in one run, so the ratios are comparable on
# a noisy machine: raw EnvPool steps/s (64 envs, random actions), the script's SPS with its defaults
# (64 envs x 64 steps, Table 5) and with --torch-threads 0 (on STEPS / 4), and a 1-env gymnasium PPO loop in
# CleanRL's ppo_continuous_action layout (1 env, 2,048-step rollouts, wrappers for clipping and
# normalisation, 10 epochs x 32 minibatches). Script runs alternate and each is repeated REPEATS
# times; medians are printed. Usage:
#   bash benchmark/ppo_continuous_action_envpool_sps.sh [ENV_ID] [STEPS] [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
ENV_ID=${1:-HalfCheetah-v4}
STEPS=${2:-131072}
REPEATS=${3:-2}
LOGDIR=$(mktemp -d)
trap 'rm -rf "$LOGDIR"' EXIT

echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), torch $($PY -c 'import torch; print(torch.__version__)'), load average $(cut -d' ' -f1-3 /proc/loadavg)"

raw=$($PY - "$ENV_ID" 2>/dev/null <<'PYEOF'
import sys, time
import envpool, numpy as np
env = envpool.make(sys.argv[1], env_type="gymnasium", num_envs=64, seed=1)
env.reset()
rng = np.random.default_rng(0)
space = env.single_action_space
def act():
    return rng.uniform(space.low, space.high, (64,) + space.shape).astype(np.float32)
for _ in range(50):
    env.step(act())
start, steps = time.perf_counter(), 0
while time.perf_counter() - start < 10:
    env.step(act())
    steps += 64
print(int(steps / (time.perf_counter() - start)))
PYEOF
)
echo "raw EnvPool $ENV_ID, 64 envs, random actions: $raw steps/s"

baseline=$($PY - "$ENV_ID" 2>/dev/null <<'PYEOF'
# One gymnasium env, CleanRL's ppo_continuous_action layout and hyperparameters, timed over 2
# iterations (4,096 steps) after 1 warm-up iteration. Same network sizes as the EnvPool script.
import sys, time
import gymnasium as gym, numpy as np, torch, torch.nn as nn
from torch.distributions.normal import Normal
torch.set_num_threads(1)
num_steps, epochs, minibatch, gamma, lam = 2048, 10, 64, 0.99, 0.95
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
iteration()
start = time.perf_counter()
iteration(); iteration()
print(int(2 * num_steps / (time.perf_counter() - start)))
PYEOF
)
echo "1-env gymnasium PPO loop (CleanRL layout) $ENV_ID: $baseline SPS"

sps_of() {  # the last SPS figure the script printed
  grep -o 'SPS [0-9,]*' "$1" | tail -1 | tr -d 'SPS ,'
}
declare -a one all
for ((r = 1; r <= REPEATS; r++)); do
  $PY cleanrl/ppo_continuous_action_envpool.py --env-id "$ENV_ID" --total-timesteps "$STEPS" --log-dir "$LOGDIR" >"$LOGDIR/one.log" 2>&1
  one+=("$(sps_of "$LOGDIR/one.log")")
  # a quarter of the steps: on a busy machine this variant can be 20x slower
  $PY cleanrl/ppo_continuous_action_envpool.py --env-id "$ENV_ID" --total-timesteps $((STEPS / 4)) --log-dir "$LOGDIR" \
    --torch-threads 0 >"$LOGDIR/all.log" 2>&1
  all+=("$(sps_of "$LOGDIR/all.log")")
  echo "repeat $r: defaults (--torch-threads 1) ${one[-1]} SPS, --torch-threads 0 ${all[-1]} SPS"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
m_one=$(median "${one[@]}")
m_all=$(median "${all[@]}")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
echo "ppo_continuous_action_envpool $ENV_ID ($STEPS steps, median of $REPEATS): defaults $m_one SPS" \
  "($(ratio "$m_one" "$raw") of raw EnvPool, $(ratio "$m_one" "$baseline")x the 1-env loop)," \
  "--torch-threads 0 $m_all SPS ($(ratio "$m_all" "$m_one")x defaults)"

#!/usr/bin/env bash
# Torch twin vs JAX twin, side by side in one run so the ratios are comparable on a noisy machine:
#  1. Nature-CNN fwd+bwd+Adam samples/s at batch 256 for each framework and variant (interleaved
#     rounds in one process, median): torch fp32 / bf16 autocast, flax lax.conv fp32 / bf16, flax
#     space-to-depth + matmul fp32 (the JAX twin's default) / bf16;
#  2. script SPS: cleanrl/ppo_atari_envpool.py (defaults, and --precision fp32: the JAX twin's precision)
#     and cleanrl/ppo_atari_envpool_xla_jax.py, alternating, REPEATS times each, median. The JAX
#     figure as the script prints it includes its one compilation; the figure without it is printed too.
# Usage: bash benchmark/ppo_atari_envpool_xla_jax_sps.sh [ENV_ID] [STEPS] [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
source benchmark/common.sh
usage_on_help "$@"
at_most_arguments 3 "[ENV_ID] [STEPS] [REPEATS]" "$@"
ENV_ID=${1:-Pong-v5}
STEPS=${2:-32768}
REPEATS=${3:-2}
require_count STEPS "$STEPS"
require_count REPEATS "$REPEATS"
require_env_id "$ENV_ID" envpool.atari
LOGDIR=$(mktemp -d)
trap remove_logs_showing_a_failure EXIT

echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "torch $($PY -c 'import torch; print(torch.__version__)'), jax $($PY -c 'import jax; print(jax.__version__)' 2>/dev/null)"
echo "Nature CNN fwd+bwd+Adam, batch 256 (median of interleaved rounds):"
$PY - 2>&1 <<'PYEOF' | grep -v -i warn
import time
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch

from cleanrl import ppo_atari_envpool as torch_twin
from cleanrl import ppo_atari_envpool_xla_jax as jax_twin

BATCH, SECONDS, ROUNDS = 256, 3.0, 3
obs_np = np.random.default_rng(0).integers(0, 256, (BATCH, 4, 84, 84), dtype=np.uint8)


def torch_step(bf16):
    torch.manual_seed(0)
    agent = torch_twin.Agent(6, bf16=bf16, channels_last=True)
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-4, eps=1e-5)
    obs = torch.from_numpy(obs_np)

    def step():
        hidden = agent.hidden(obs)
        loss = agent.actor(hidden).logsumexp(-1).mean() + (agent.critic(hidden) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def jax_step(bf16, xla_conv):
    agent = jax_twin.Agent(6, bf16=bf16, xla_conv=xla_conv)
    obs = jnp.asarray(obs_np)
    tx = optax.adam(1e-4, eps=1e-5)
    params = agent.init(jax.random.PRNGKey(0), obs)
    state = [params, tx.init(params)]

    def loss_fn(params, obs):
        logits, value = agent.apply(params, obs)
        return jax.nn.logsumexp(logits, -1).mean() + (value**2).mean()

    @jax.jit
    def update(params, opt_state, obs):
        updates, opt_state = tx.update(jax.grad(loss_fn)(params, obs), opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    def step():
        state[:] = update(*state, obs)
        jax.block_until_ready(state[0])

    return step


configs = {
    "torch fp32 (channels-last)": torch_step(False),
    "torch bf16 autocast (torch twin default)": torch_step(True),
    "flax lax.conv fp32 (--xla-conv)": jax_step(False, True),
    "flax lax.conv bf16 (--xla-conv --bf16)": jax_step(True, True),
    "flax s2d+matmul fp32 (JAX twin default)": jax_step(False, False),
    "flax s2d+matmul bf16 (--bf16)": jax_step(True, False),
}
results = {name: [] for name in configs}
for step in configs.values():
    step(), step()  # compile, warm up
for _ in range(ROUNDS):
    for name, step in configs.items():
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < SECONDS:
            step()
            n += 1
        results[name].append(n * BATCH / (time.perf_counter() - start))
for name, values in results.items():
    print(f"  {name:42s} {np.median(values):6.0f} samples/s  (rounds {', '.join(f'{v:.0f}' for v in values)})")
PYEOF

sps_without_compile() {  # steps / (steps / SPS - compile seconds), from the JAX twin's last lines
  local sps compile
  sps=$(sps_of "$1") || return 1
  compile=$(sed -n 's/.*in iteration 1 (\([0-9.]*\) s).*/\1/p' "$1")
  awk -v n="$STEPS" -v s="$sps" -v c="$compile" 'BEGIN {printf "%d", n / (n / s - c)}'
}
declare -a torch_sps torch_fp32_sps jax_sps jax_steady
for ((r = 1; r <= REPEATS; r++)); do
  $PY cleanrl/ppo_atari_envpool.py --env-id "$ENV_ID" --total-timesteps "$STEPS" --log-dir "$LOGDIR" >"$LOGDIR/torch.log" 2>&1
  torch_sps+=("$(sps_of "$LOGDIR/torch.log")")
  # the torch twin at the JAX twin's precision (fp32; its default, auto, is bf16 autocast where the CPU has native bf16)
  $PY cleanrl/ppo_atari_envpool.py --env-id "$ENV_ID" --total-timesteps "$STEPS" --precision fp32 --log-dir "$LOGDIR" \
    >"$LOGDIR/torch_fp32.log" 2>&1
  torch_fp32_sps+=("$(sps_of "$LOGDIR/torch_fp32.log")")
  $PY cleanrl/ppo_atari_envpool_xla_jax.py --env-id "$ENV_ID" --total-timesteps "$STEPS" --log-dir "$LOGDIR" >"$LOGDIR/jax.log" 2>&1
  jax_sps+=("$(sps_of "$LOGDIR/jax.log")")
  jax_steady+=("$(sps_without_compile "$LOGDIR/jax.log")")
  echo "repeat $r: torch twin ${torch_sps[-1]} SPS (--precision fp32: ${torch_fp32_sps[-1]}), JAX twin ${jax_sps[-1]} SPS" \
    "(${jax_steady[-1]} without its compilation)"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
m_torch=$(median "${torch_sps[@]}")
m_torch_fp32=$(median "${torch_fp32_sps[@]}")
m_jax=$(median "${jax_sps[@]}")
m_steady=$(median "${jax_steady[@]}")
echo "$ENV_ID ($STEPS steps, median of $REPEATS): torch twin $m_torch SPS (--precision fp32: $m_torch_fp32), JAX twin $m_jax SPS" \
  "($m_steady without compilation); JAX/torch $(ratio "$m_jax" "$m_torch")x, JAX/torch-fp32 $(ratio "$m_jax" "$m_torch_fp32")x"

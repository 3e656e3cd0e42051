#!/usr/bin/env bash
# Throughput of cleanrl/ppo_atari_envpool_async.py beside the sync script, in one run so the ratios are
# comparable on a noisy machine:
#   1. raw EnvPool steps/s, random actions: sync (8 envs, step) vs async (16 envs, recv/send batches of 8);
#   2. the per-iteration split of the async script at its defaults (rollout, update), timed in-process, and the
#      update on one torch thread (what a learner process of its own would get: the bound of a process overlap);
#   3. SPS of ppo_atari_envpool.py, of this script, and of this script with --overlap; configurations
#      alternate and each is repeated REPEATS times, the median is printed.
# Where the time goes (issue 14): an iteration is rollout + update; --overlap runs the next rollout in a thread
# during the update, so at best max(rollout, update). With 2 cores the update alone keeps one core busy and
# EnvPool's threads plus the actor's inference share the other; on hosts with more cores EnvPool's async mode
# gave 1.3-2.1x the raw sync throughput in its paper, which shrinks the rollout part only.
# Usage (RAW_SECONDS: seconds per raw EnvPool measurement):
#   bash benchmark/ppo_atari_envpool_async_sps.sh [ENV_ID] [STEPS] [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
source benchmark/common.sh
usage_on_help "$@"
at_most_arguments 3 "[ENV_ID] [STEPS] [REPEATS]" "$@"
ENV_ID=${1:-Pong-v5}
STEPS=${2:-32768}
REPEATS=${3:-2}
RAW_SECONDS=${RAW_SECONDS:-10}
require_count STEPS "$STEPS"
require_count REPEATS "$REPEATS"
require_count RAW_SECONDS "$RAW_SECONDS"
require_env_id "$ENV_ID" envpool.atari
LOGDIR=$(mktemp -d)
trap remove_logs_showing_a_failure EXIT

echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), torch $($PY -c 'import torch; print(torch.__version__)')"

$PY - "$ENV_ID" "$RAW_SECONDS" 2>/dev/null <<'PYEOF'
import sys, time
import numpy as np
from cleanrl.ppo_atari_envpool_async import make_env

env_id, seconds = sys.argv[1], float(sys.argv[2])
rng = np.random.default_rng(0)

def sync_steps_per_second():
    envs = make_env(env_id, 8, 1)
    envs.reset()
    n = envs.single_action_space.n
    start, steps = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        envs.step(rng.integers(0, n, 8))
        steps += 8
    return steps / (time.perf_counter() - start)

def async_steps_per_second():
    envs = make_env(env_id, 16, 1, batch_size=8)
    envs.async_reset()
    n = envs.single_action_space.n
    start, steps = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        env_id_ = envs.recv()[-1]["env_id"]
        envs.send(rng.integers(0, n, len(env_id_)), env_id_)
        steps += len(env_id_)
    return steps / (time.perf_counter() - start)

sync, async_ = sync_steps_per_second(), async_steps_per_second()
print(f"raw EnvPool {env_id}, random actions: sync 8 envs {sync:,.0f} steps/s, async 16 envs / batch 8 {async_:,.0f} steps/s ({async_ / sync:.2f}x)")
PYEOF

$PY - "$ENV_ID" 2>/dev/null <<'PYEOF'
import sys, time
import numpy as np
import torch
from cleanrl.ppo_atari_envpool_async import Agent, Args, collect_rollout, compute_gae_async, make_env, new_storage, ppo_update

args = Args(env_id=sys.argv[1])
args.batch_size = args.num_envs * args.num_steps
args.minibatch_size = args.batch_size // args.num_minibatches
envs = make_env(args.env_id, args.num_envs, 1, batch_size=args.async_batch_size)
from cleanrl_utils.hardware import resolve_channels_last, resolve_precision, this_machine
machine = this_machine(torch.device("cpu"))
precision = resolve_precision(args.precision, machine).value  # the script's defaults, as it would resolve them here
layout = resolve_channels_last(args.channels_last, precision, machine).value
agent = Agent(envs.single_action_space.n, bf16=precision == "bf16", channels_last=layout == "on")
optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
storage = new_storage(args.batch_size // args.async_batch_size, args.async_batch_size, (4, 84, 84), torch.uint8, "cpu")
generator = torch.Generator().manual_seed(1)
envs.async_reset()
rollout_times, update_times = [], []
for _ in range(4):
    start = time.perf_counter()
    collect_rollout(envs, agent, storage, np.zeros(args.num_envs))
    rollout_times.append(time.perf_counter() - start)
    start = time.perf_counter()
    with torch.no_grad():
        keys = ("env_ids", "values", "rewards", "terminations", "truncations")
        advantages, valid = compute_gae_async(*(storage[k] for k in keys), args.num_envs, args.gamma, args.gae_lambda)
    rollout = (storage["obs"], storage["actions"], storage["logprobs"], advantages, advantages + storage["values"], storage["values"], valid)
    ppo_update(agent, optimizer, [x.reshape((args.batch_size,) + x.shape[2:]) for x in rollout], args, generator)
    update_times.append(time.perf_counter() - start)
rollout_s, update_s = np.median(rollout_times[1:]), np.median(update_times[1:])  # the first is warm-up
print(f"async per iteration ({args.batch_size} steps, median of 3): rollout {rollout_s:.2f} s, GAE + update {update_s:.2f} s; "
      f"serial bound {args.batch_size / (rollout_s + update_s):.0f} SPS, overlap bound {args.batch_size / max(rollout_s, update_s):.0f} SPS")
# A learner in a process of its own gets one core of two (the actor and EnvPool's threads have the other): its update
# runs on one torch thread, so a process-based overlap is bounded by max(rollout, update on one thread).
torch.set_num_threads(1)
one_thread_times = []
for _ in range(3):
    start = time.perf_counter()
    ppo_update(agent, optimizer, [x.reshape((args.batch_size,) + x.shape[2:]) for x in rollout], args, generator)
    one_thread_times.append(time.perf_counter() - start)
update_1 = np.median(one_thread_times)
print(f"update on one torch thread {update_1:.2f} s: process-overlap bound {args.batch_size / max(rollout_s, update_1):.0f} SPS")
PYEOF

declare -a sync serial overlap
for ((r = 1; r <= REPEATS; r++)); do
  $PY cleanrl/ppo_atari_envpool.py --env-id "$ENV_ID" --total-timesteps "$STEPS" --log-dir "$LOGDIR" >"$LOGDIR/sync.log" 2>&1
  sync+=("$(sps_of "$LOGDIR/sync.log")")
  $PY cleanrl/ppo_atari_envpool_async.py --env-id "$ENV_ID" --total-timesteps "$STEPS" --log-dir "$LOGDIR" >"$LOGDIR/serial.log" 2>&1
  serial+=("$(sps_of "$LOGDIR/serial.log")")
  $PY cleanrl/ppo_atari_envpool_async.py --env-id "$ENV_ID" --total-timesteps "$STEPS" --log-dir "$LOGDIR" --overlap >"$LOGDIR/overlap.log" 2>&1
  overlap+=("$(sps_of "$LOGDIR/overlap.log")")
  echo "repeat $r: sync ${sync[-1]} SPS, async ${serial[-1]} SPS, async --overlap ${overlap[-1]} SPS"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
m_sync=$(median "${sync[@]}")
m_serial=$(median "${serial[@]}")
m_overlap=$(median "${overlap[@]}")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
echo "$ENV_ID ($STEPS steps, median of $REPEATS): ppo_atari_envpool $m_sync SPS; async $m_serial SPS ($(ratio "$m_serial" "$m_sync")x); async --overlap $m_overlap SPS ($(ratio "$m_overlap" "$m_sync")x)"

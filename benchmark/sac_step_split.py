"""Per-step time split of cleanrl/sac_continuous_action_envpool.py: the env step, choosing the action, and one update
(a critic step; every 2nd step 2 actor and entropy steps; the Polyak average), each timed alone over many repeats with
the script's own networks, losses and optimisers, on real transitions in its replay buffer. Called by
benchmark/sac_continuous_action_envpool_sps.sh; alone:
    python benchmark/sac_step_split.py --env-id Hopper-v4 [--bf16] [--compile] [--torch-threads 1] [--profile] [--bound]
--bound also prints the update's compute bound: its matrix-product FLOPs per step (counted by torch's FlopCounterMode
on real updates) at the fp32 rate this machine measures for the update's own matrix shapes."""

import argparse
import sys
import time

import numpy as np
import torch

from cleanrl.sac_continuous_action_envpool import (
    Actor,
    EntropyCoefficient,
    QNetworks,
    ReplayBuffer,
    actor_loss,
    critic_loss,
    make_env,
)
from cleanrl_utils.checks import check_continuous_envpool_id
from cleanrl_utils.run import torch_threads


def per_call_ms(call, repeats: int) -> float:
    for _ in range(min(50, repeats)):  # warm-up (and compilation)
        call()
    start = time.perf_counter()
    for _ in range(repeats):
        call()
    return (time.perf_counter() - start) / repeats * 1e3


def split(env_id: str, bf16: bool, compile: bool, repeats: int, profile: bool = False, bound: bool = False) -> str:
    torch.manual_seed(1)
    envs = make_env(env_id, 1, seed=1)
    obs_dim, action_dim = envs.single_observation_space.shape[0], envs.single_action_space.shape[0]
    low, high = envs.single_action_space.low, envs.single_action_space.high
    actor, entropy = Actor(obs_dim, low, high, bf16=bf16), EntropyCoefficient(0.2, autotune=True)
    critic, target_critic = QNetworks(obs_dim, action_dim, bf16=bf16), QNetworks(obs_dim, action_dim, bf16=bf16)
    target_critic.load_state_dict(critic.state_dict())
    q_optimizer = torch.optim.Adam(critic.parameters(), lr=1e-3, fused=True)
    groups = [dict(params=actor.parameters(), lr=3e-4), dict(params=entropy.parameters(), lr=1e-3)]
    policy_optimizer = torch.optim.Adam(groups, fused=True)
    rb = ReplayBuffer(10_000, obs_dim, action_dim, torch.device("cpu"))
    obs, _ = envs.reset()
    prev_over = np.zeros(1, dtype=bool)

    def env_step():
        nonlocal obs, prev_over
        actions = np.random.uniform(low, high, (1, action_dim)).astype(np.float32)
        next_obs, rewards, terminations, truncations, _ = envs.step(actions)
        rb.add(obs, actions, rewards, next_obs, terminations, prev_over, 1)
        obs, prev_over = next_obs, terminations | truncations

    def act():
        with torch.no_grad():
            return actor.get_action(torch.as_tensor(obs, dtype=torch.float32))[0].numpy()

    losses = (torch.compile(critic_loss), torch.compile(actor_loss)) if compile else (critic_loss, actor_loss)
    count = 0

    def update():  # the script's training block, one env step's worth
        nonlocal count
        batch = rb.sample(256)
        loss, _ = losses[0](actor, critic, target_critic, batch, entropy().detach(), 0.99)
        q_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        q_optimizer.step()
        count += 1
        if count % 2 == 0:
            for _ in range(2):
                policy_loss, alpha_loss = losses[1](actor, critic, entropy, batch[0], -float(action_dim))
                policy_optimizer.zero_grad(set_to_none=True)
                (policy_loss + alpha_loss).backward()
                policy_optimizer.step()
        with torch.no_grad():
            torch._foreach_lerp_(list(target_critic.parameters()), list(critic.parameters()), 0.005)

    env_ms = per_call_ms(env_step, max(repeats, 1000))  # also fills the buffer with real transitions
    action_ms, update_ms = per_call_ms(act, repeats), per_call_ms(update, repeats)
    envs.close()
    total = env_ms + action_ms + update_ms
    flags = " ".join(flag for flag, on in (("--bf16", bf16), ("--compile", compile)) if on) or "defaults"
    line = (
        f"sac ({flags}): per step: env {env_ms:.2f} ms, action {action_ms:.2f} ms, update {update_ms:.2f} ms "
        f"(sum {total:.2f} ms = {1e3 / total:.0f} SPS)"
    )
    line += "\n" + update_profile(update) if profile else ""
    return line + ("\n" + compute_bound(update, update_ms) if bound else "")


def compute_bound(update, update_ms: float, steps: int = 10) -> str:
    """The update's matrix-product FLOPs per step against this machine's fp32 matmul rate on batch-256 x 256 x 256
    products (the hidden layers' shape): the time the products alone would take at that rate."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        for _ in range(steps):  # an even number: every 2nd step runs the actor updates
            update()
    flops = counter.get_total_flops() / steps
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    matmul_ms = per_call_ms(lambda: a @ b, 2000)
    rate = 2 * 256**3 / (matmul_ms / 1e3)
    bound_ms = flops / rate * 1e3
    return (
        f"  compute bound: {flops / 1e6:.0f} MFLOP of matrix products per step at {rate / 1e9:.0f} GFLOP/s (fp32, "
        f"{torch.get_num_threads()} threads, 256x256x256) = {bound_ms:.2f} ms; the update takes {update_ms:.2f} ms "
        f"({bound_ms / update_ms:.0%} of it is the products at that rate)"
    )


MATMULS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm")


def update_profile(update, steps: int = 100) -> str:
    """Where an update's time goes, by torch.profiler's self CPU time per op (the profiler adds its own overhead,
    so the shares are the figure): the matrix products against everything else."""
    with torch.profiler.profile() as prof:
        for _ in range(steps):
            update()
    ops = [(event.key, event.self_cpu_time_total / steps / 1e3) for event in prof.key_averages()]
    total = sum(ms for _, ms in ops)
    matmul = sum(ms for name, ms in ops if name in MATMULS)
    adam = sum(ms for name, ms in ops if "Adam" in name or "adam" in name)
    top = ", ".join(f"{name} {ms:.2f}" for name, ms in sorted(ops, key=lambda op: -op[1])[:6])
    return (
        f"  under the profiler, per step: {total:.2f} ms; matrix products {matmul:.2f} ms ({matmul / total:.0%}), "
        f"Adam {adam:.2f} ms, the other ops {total - matmul - adam:.2f} ms; top ops (ms): {top}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="Hopper-v4")
    parser.add_argument("--repeats", type=int, default=500)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--profile", action="store_true", help="also print the update's time per op kind (torch.profiler)")
    parser.add_argument("--bound", action="store_true", help="also print the update's compute bound (FLOPs at the fp32 rate)")
    args = parser.parse_args()
    # one line for a bad value, before any env is made (trial 19, W6: tracebacks, and negative times with exit 0)
    if args.repeats < 1:
        sys.exit(f"error: --repeats must be a positive number of timed calls, got {args.repeats}")
    if args.torch_threads < 0:
        sys.exit(f"error: --torch-threads must be >= 0 (0: one per free core), got {args.torch_threads}")
    check_continuous_envpool_id(args.env_id)
    torch.set_num_threads(torch_threads(args.torch_threads))
    configs = [(args.bf16, args.compile)] if args.bf16 or args.compile else [(False, False), (True, False), (True, True)]
    for bf16, compile in configs:
        print(split(args.env_id, bf16, compile, args.repeats, args.profile, args.bound), flush=True)

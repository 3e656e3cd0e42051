# PQN on EnvPool Atari: a speed baseline, the plain eager PyTorch loop in the layout of CleanRL's
# pqn_atari_envpool.py, moved to EnvPool 1.2's gymnasium API and nothing else. Its per-step and per-update work is
# CleanRL's: float32 observation storage (NCHW), `torch.Tensor(obs)` every step, x / 255 inside the network, torch's
# default threads (one per core), numpy minibatch shuffling, RAdam, no stale-step mask.
# Not a reference implementation (it trains on next-step autoreset's stale rows and leaks lambda-returns across
# episodes, as CleanRL does): see cleanrl/pqn_atari_envpool.py. It prints the same progress line (`SPS n`).
# Run:
#   python benchmark/pqn_atari_envpool_cleanrl_layout.py --env-id Pong-v5 --total-timesteps 20480
import os
import random
import sys
import time
from dataclasses import dataclass

import envpool
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import tyro
from torch.utils.tensorboard import SummaryWriter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # cleanrl_utils, run from anywhere
from cleanrl_utils.checks import check_baseline_args, check_envpool_id  # noqa: E402


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
    cuda: bool = True
    """if toggled, cuda will be enabled by default"""
    env_id: str = "Pong-v5"
    """the id of the environment"""
    total_timesteps: int = 10_000_000
    """total timesteps of the experiments"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: int = 8
    """the number of parallel game environments"""
    num_steps: int = 128
    """the number of steps to run in each environment per rollout"""
    gamma: float = 0.99
    """the discount factor gamma"""
    num_minibatches: int = 4
    """the number of mini-batches"""
    update_epochs: int = 4
    """the K epochs over each rollout"""
    max_grad_norm: float = 10.0
    """the maximum norm for the gradient clipping"""
    start_e: float = 1.0
    """the starting epsilon for exploration"""
    end_e: float = 0.01
    """the ending epsilon for exploration"""
    exploration_fraction: float = 0.10
    """the fraction of `total_timesteps` it takes from start_e to end_e"""
    q_lambda: float = 0.65
    """the lambda of the Q(lambda) targets"""
    log_dir: str = "runs"
    """the folder the run's tensorboard events go under"""


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class QNetwork(nn.Module):
    def __init__(self, num_actions: int):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)),
            nn.LayerNorm([32, 20, 20]),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.LayerNorm([64, 9, 9]),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.LayerNorm([64, 7, 7]),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(3136, 512)),
            nn.LayerNorm(512),
            nn.ReLU(),
            layer_init(nn.Linear(512, num_actions)),
        )

    def forward(self, x):
        return self.network(x / 255.0)


if __name__ == "__main__":
    args = tyro.cli(Args)
    # one line before anything runs, where a bad value would give a traceback or train on and exit 0
    check_baseline_args(
        args,
        positive=(
            "total_timesteps",
            "learning_rate",
            "num_envs",
            "num_steps",
            "num_minibatches",
            "update_epochs",
            "max_grad_norm",
            "exploration_fraction",
        ),
    )
    check_envpool_id(args.env_id, "envpool.atari")
    batch_size = args.num_envs * args.num_steps
    if batch_size % args.num_minibatches != 0:
        sys.exit(f"error: --num-minibatches {args.num_minibatches} does not divide the batch size {batch_size}")
    if args.total_timesteps < batch_size:  # 0 iterations: it would print nothing and exit 0
        sys.exit(f"error: --total-timesteps {args.total_timesteps} is smaller than one rollout ({batch_size} steps)")
    minibatch_size = batch_size // args.num_minibatches
    num_iterations = args.total_timesteps // batch_size
    writer = SummaryWriter(os.path.join(args.log_dir, f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"))

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    envs = envpool.make(
        args.env_id, env_type="gymnasium", num_envs=args.num_envs, seed=args.seed, episodic_life=True, reward_clip=True
    )
    num_actions = envs.action_space.n
    q_network = QNetwork(num_actions).to(device)
    optimizer = optim.RAdam(q_network.parameters(), lr=args.learning_rate)

    obs = torch.zeros((args.num_steps, args.num_envs) + envs.observation_space.shape).to(device)
    actions = torch.zeros((args.num_steps, args.num_envs)).to(device)
    rewards = torch.zeros((args.num_steps, args.num_envs)).to(device)
    dones = torch.zeros((args.num_steps, args.num_envs)).to(device)
    values = torch.zeros((args.num_steps, args.num_envs)).to(device)
    episode_returns = np.zeros(args.num_envs)
    recent_returns = []

    global_step = 0
    start_time = time.time()
    next_obs = torch.Tensor(envs.reset()[0]).to(device)
    next_done = torch.zeros(args.num_envs).to(device)

    for iteration in range(1, num_iterations + 1):
        optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / num_iterations) * args.learning_rate
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done
            slope = (args.end_e - args.start_e) / (args.exploration_fraction * args.total_timesteps)
            epsilon = max(slope * global_step + args.start_e, args.end_e)
            random_actions = torch.randint(0, num_actions, (args.num_envs,)).to(device)
            with torch.no_grad():
                q_values = q_network(next_obs)
                max_actions = torch.argmax(q_values, dim=1)
                values[step] = q_values[torch.arange(args.num_envs), max_actions].flatten()
            explore = torch.rand((args.num_envs,)).to(device) < epsilon
            action = torch.where(explore, random_actions, max_actions)
            actions[step] = action

            next_obs, reward, term, trunc, info = envs.step(action.cpu().numpy())
            done = np.logical_or(term, trunc)
            rewards[step] = torch.tensor(reward).to(device).view(-1)
            next_obs, next_done = torch.Tensor(next_obs).to(device), torch.Tensor(done).to(device)
            episode_returns += info["reward"]
            for idx in np.flatnonzero(info["terminated"] | trunc):
                writer.add_scalar("charts/episodic_return", episode_returns[idx], global_step)
                recent_returns.append(episode_returns[idx])
                episode_returns[idx] = 0.0

        with torch.no_grad():
            returns = torch.zeros_like(rewards).to(device)
            for t in reversed(range(args.num_steps)):
                if t == args.num_steps - 1:
                    next_value, _ = torch.max(q_network(next_obs), dim=-1)
                    returns[t] = rewards[t] + args.gamma * next_value * (1.0 - next_done)
                else:
                    blend = args.q_lambda * returns[t + 1] + (1 - args.q_lambda) * values[t + 1] * (1.0 - dones[t + 1])
                    returns[t] = rewards[t] + args.gamma * blend

        b_obs = obs.reshape((-1,) + envs.observation_space.shape)
        b_actions, b_returns = actions.reshape(-1), returns.reshape(-1)
        b_inds = np.arange(batch_size)
        for epoch in range(args.update_epochs):
            np.random.shuffle(b_inds)
            for start in range(0, batch_size, minibatch_size):
                mb_inds = b_inds[start : start + minibatch_size]
                old_val = q_network(b_obs[mb_inds]).gather(1, b_actions[mb_inds].unsqueeze(-1).long()).squeeze()
                loss = F.mse_loss(b_returns[mb_inds], old_val)
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(q_network.parameters(), args.max_grad_norm)
                optimizer.step()

        sps = int(global_step / (time.time() - start_time))
        writer.add_scalar("losses/td_loss", loss.item(), global_step)
        writer.add_scalar("losses/q_values", old_val.mean().item(), global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        mean_return = f"{np.mean(recent_returns[-20:]):.2f}" if recent_returns else "n/a"
        print(f"step {global_step:,}/{num_iterations * batch_size:,}  SPS {sps:,}  return(last 20) {mean_return}", flush=True)

    envs.close()
    writer.close()

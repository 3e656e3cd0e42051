# C51 on EnvPool Atari: a speed baseline, the plain eager PyTorch loop in the layout of CleanRL's c51_atari.py,
# moved to EnvPool 1.2's gymnasium API and nothing else. Its per-step and per-update work is CleanRL's: a replay of
# whole 4-frame stacks whose next observation is the following row (Stable-Baselines3's ReplayBuffer with
# optimize_memory_usage=True), sampled with numpy and copied into new tensors, `torch.Tensor(obs)` every step,
# x / 255 inside the network, torch's default threads (one per core), fp32, the target distribution projected
# with one index_add_ per sample in a Python loop, Adam (eps 0.01 / batch), a hard target copy.
# Not a reference implementation (it stores next-step autoreset's stale transitions and bootstraps across them):
# see cleanrl/c51_atari_envpool.py. It prints the same progress line (`SPS n`).
# Run:
#   python benchmark/c51_atari_envpool_cleanrl_layout.py --env-id Pong-v5 --total-timesteps 5000 --learning-starts 1000 --buffer-size 100000
import os
import random
import sys
import time
from dataclasses import dataclass

import envpool
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import tyro
from torch.utils.tensorboard import SummaryWriter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # cleanrl_utils, run from anywhere
from cleanrl_utils.checks import check_baseline_args, check_envpool_id, check_memory  # noqa: E402


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
    cuda: bool = True
    """if toggled, cuda will be enabled by default"""
    env_id: str = "Breakout-v5"
    """the id of the environment"""
    total_timesteps: int = 10_000_000
    """total timesteps of the experiments"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    n_atoms: int = 51
    """the number of atoms"""
    v_min: float = -10.0
    """the return lower bound"""
    v_max: float = 10.0
    """the return upper bound"""
    buffer_size: int = 1_000_000
    """the replay memory buffer size"""
    gamma: float = 0.99
    """the discount factor gamma"""
    target_network_frequency: int = 10_000
    """the timesteps it takes to update the target network"""
    batch_size: int = 32
    """the batch size of sample from the reply memory"""
    start_e: float = 1.0
    """the starting epsilon for exploration"""
    end_e: float = 0.01
    """the ending epsilon for exploration"""
    exploration_fraction: float = 0.10
    """the fraction of `total_timesteps` it takes from start_e to end_e"""
    learning_starts: int = 80_000
    """timestep to start learning"""
    train_frequency: int = 4
    """the frequency of training"""
    log_dir: str = "runs"
    """the folder the run's tensorboard events go under"""


class QNetwork(nn.Module):
    def __init__(self, num_actions: int, n_atoms: int, v_min: float, v_max: float):
        super().__init__()
        self.n_atoms, self.num_actions = n_atoms, num_actions
        self.register_buffer("atoms", torch.linspace(v_min, v_max, steps=n_atoms))
        self.network = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(3136, 512),
            nn.ReLU(),
            nn.Linear(512, num_actions * n_atoms),
        )

    def get_action(self, x, action=None):
        logits = self.network(x / 255.0)
        pmfs = torch.softmax(logits.view(len(x), self.num_actions, self.n_atoms), dim=2)
        q_values = (pmfs * self.atoms).sum(2)
        if action is None:
            action = torch.argmax(q_values, 1)
        return action, pmfs[torch.arange(len(x)), action]


class ReplayBuffer:
    """Stable-Baselines3's ReplayBuffer with optimize_memory_usage=True, for one env: whole stacks, and the next
    observation of row i is row i + 1."""

    def __init__(self, size: int, obs_shape: tuple, device: torch.device):
        self.size, self.pos, self.full, self.device = size, 0, False, device
        self.observations = np.zeros((size, *obs_shape), dtype=np.uint8)
        self.actions = np.zeros(size, dtype=np.int64)
        self.rewards = np.zeros(size, dtype=np.float32)
        self.dones = np.zeros(size, dtype=np.float32)

    def add(self, obs, next_obs, action, reward, done):
        self.observations[self.pos] = obs
        self.observations[(self.pos + 1) % self.size] = next_obs
        self.actions[self.pos], self.rewards[self.pos], self.dones[self.pos] = action, reward, done
        self.pos = (self.pos + 1) % self.size
        self.full = self.full or self.pos == 0

    def sample(self, batch_size: int):
        if self.full:  # never the row whose next observation is being overwritten
            inds = (np.random.randint(1, self.size, size=batch_size) + self.pos) % self.size
        else:
            inds = np.random.randint(0, self.pos, size=batch_size)
        to_torch = lambda array: torch.tensor(array, device=self.device)  # noqa: E731 (SB3's to_torch copies)
        return (
            to_torch(self.observations[inds]),
            to_torch(self.actions[inds]),
            to_torch(self.observations[(inds + 1) % self.size]),
            to_torch(self.dones[inds]),
            to_torch(self.rewards[inds]),
        )


if __name__ == "__main__":
    args = tyro.cli(Args)
    check_baseline_args(
        args,
        positive=(
            "total_timesteps",
            "learning_rate",
            "n_atoms",
            "buffer_size",
            "target_network_frequency",
            "batch_size",
            "train_frequency",
            "exploration_fraction",
        ),
        non_negative=("start_e", "end_e"),
    )
    check_envpool_id(args.env_id, "envpool.atari")
    if not 0 <= args.learning_starts < args.total_timesteps:  # it would never train, print nothing and exit 0
        sys.exit(
            f"error: --total-timesteps {args.total_timesteps} leaves no learning-phase step (--learning-starts "
            f"{args.learning_starts} must be in [0, --total-timesteps))"
        )
    # one line, before anything is written, where the stacks (EnvPool's 4 x 84 x 84 bytes each) do not fit: CleanRL's
    # 1M default takes 26.3 GiB, a traceback from numpy here
    check_memory(args.buffer_size * 4 * 84 * 84, "CleanRL's replay of whole frame stacks", "--buffer-size")
    writer = SummaryWriter(os.path.join(args.log_dir, f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"))

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    envs = envpool.make(args.env_id, env_type="gymnasium", num_envs=1, seed=args.seed, episodic_life=True, reward_clip=True)
    num_actions = envs.action_space.n
    q_network = QNetwork(num_actions, args.n_atoms, args.v_min, args.v_max).to(device)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, eps=0.01 / args.batch_size)
    target_network = QNetwork(num_actions, args.n_atoms, args.v_min, args.v_max).to(device)
    target_network.load_state_dict(q_network.state_dict())
    rb = ReplayBuffer(args.buffer_size, envs.observation_space.shape, device)

    start_time = time.time()
    obs, _ = envs.reset()
    episode_return, recent_returns = 0.0, []
    for global_step in range(args.total_timesteps):
        slope = (args.end_e - args.start_e) / (args.exploration_fraction * args.total_timesteps)
        epsilon = max(slope * global_step + args.start_e, args.end_e)
        if random.random() < epsilon:
            actions = np.array([envs.action_space.sample()])
        else:
            actions, pmf = q_network.get_action(torch.Tensor(obs).to(device))
            actions = actions.cpu().numpy()

        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        episode_return += infos["reward"][0]
        if infos["terminated"][0] or truncations[0]:
            writer.add_scalar("charts/episodic_return", episode_return, global_step)
            recent_returns.append(episode_return)
            episode_return = 0.0
        rb.add(obs[0], next_obs[0], actions[0], rewards[0], terminations[0])
        obs = next_obs

        if global_step > args.learning_starts and global_step % args.train_frequency == 0:
            observations, data_actions, next_observations, dones, data_rewards = rb.sample(args.batch_size)
            with torch.no_grad():
                _, next_pmfs = target_network.get_action(next_observations)
                next_atoms = data_rewards.unsqueeze(-1) + args.gamma * target_network.atoms * (1 - dones.unsqueeze(-1))
                # projection
                delta_z = target_network.atoms[1] - target_network.atoms[0]
                tz = next_atoms.clamp(args.v_min, args.v_max)
                b = (tz - args.v_min) / delta_z
                lower = b.floor().clamp(0, args.n_atoms - 1)
                upper = b.ceil().clamp(0, args.n_atoms - 1)
                # (upper - b) is 0 when b is an integer: add 1 there so the mass goes to that atom
                d_m_l = (upper + (lower == upper).float() - b) * next_pmfs
                d_m_u = (b - lower) * next_pmfs
                target_pmfs = torch.zeros_like(next_pmfs)
                for i in range(target_pmfs.size(0)):
                    target_pmfs[i].index_add_(0, lower[i].long(), d_m_l[i])
                    target_pmfs[i].index_add_(0, upper[i].long(), d_m_u[i])

            _, old_pmfs = q_network.get_action(observations, data_actions)
            loss = (-(target_pmfs * old_pmfs.clamp(min=1e-5, max=1 - 1e-5).log()).sum(-1)).mean()

            if global_step % 100 == 0:
                sps = int(global_step / (time.time() - start_time))
                writer.add_scalar("losses/loss", loss.item(), global_step)
                writer.add_scalar("losses/q_values", (old_pmfs * q_network.atoms).sum(1).mean().item(), global_step)
                writer.add_scalar("charts/SPS", sps, global_step)
                mean_return = f"{np.mean(recent_returns[-20:]):.2f}" if recent_returns else "n/a"
                print(f"step {global_step:,}/{args.total_timesteps:,}  SPS {sps:,}  return(last 20) {mean_return}", flush=True)

            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        if global_step % args.target_network_frequency == 0:
            target_network.load_state_dict(q_network.state_dict())

    # the last line, at the run's end (the loop prints every 100 steps of the training phase only)
    sps = int(args.total_timesteps / (time.time() - start_time))
    mean_return = f"{np.mean(recent_returns[-20:]):.2f}" if recent_returns else "n/a"
    print(f"step {args.total_timesteps:,}/{args.total_timesteps:,}  SPS {sps:,}  return(last 20) {mean_return}", flush=True)
    envs.close()
    writer.close()

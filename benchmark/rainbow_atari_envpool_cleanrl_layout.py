# Rainbow on EnvPool Atari: a speed baseline, the plain eager PyTorch loop in the layout of CleanRL's
# rainbow_atari.py, moved to EnvPool 1.2's gymnasium API and nothing else. Its per-step and per-update work is
# CleanRL's: a prioritised replay holding each observation and next observation whole, sum and min segment trees
# walked in Python (one update per stored transition, one walk per sampled index), n-step returns folded from a
# deque, `torch.Tensor(obs)` every step, x / 255 inside a noisy dueling C51 network, torch's default threads (one per
# core), fp32, the target distribution projected with one index_add_ per sample in a Python loop, a double-Q target
# that runs the online network on the next observations, Adam (eps 1.5e-4), the target copied parameter by parameter.
# Not a reference implementation (it stores next-step autoreset's stale transitions and folds n-step returns across
# them): see cleanrl/rainbow_atari_envpool.py. It prints the same progress line (`SPS n`).
# Run:
#   python benchmark/rainbow_atari_envpool_cleanrl_layout.py --env-id Pong-v5 --total-timesteps 5000 --learning-starts 1000 --buffer-size 100000
import math
import os
import random
import sys
import time
from collections import deque
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
    learning_rate: float = 6.25e-5
    """the learning rate of the optimizer"""
    buffer_size: int = 1_000_000
    """the replay memory buffer size"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 1.0
    """the target network update rate"""
    target_network_frequency: int = 8000
    """the timesteps it takes to update the target network"""
    batch_size: int = 32
    """the batch size of sample from the reply memory"""
    learning_starts: int = 80_000
    """timestep to start learning"""
    train_frequency: int = 4
    """the frequency of training"""
    n_step: int = 3
    """the number of steps to look ahead for n-step Q learning"""
    prioritized_replay_alpha: float = 0.5
    """alpha parameter for prioritized replay buffer"""
    prioritized_replay_beta: float = 0.4
    """beta parameter for prioritized replay buffer"""
    prioritized_replay_eps: float = 1e-6
    """epsilon parameter for prioritized replay buffer"""
    n_atoms: int = 51
    """the number of atoms"""
    v_min: float = -10.0
    """the return lower bound"""
    v_max: float = 10.0
    """the return upper bound"""
    log_dir: str = "runs"
    """the folder the run's tensorboard events go under"""


class NoisyLinear(nn.Module):
    """A noisy linear layer with independent Gaussian noise on every weight and bias, as CleanRL's."""

    def __init__(self, in_features: int, out_features: int, std_init: float = 0.5):
        super().__init__()
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-1, 1) / math.sqrt(in_features))
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), std_init / math.sqrt(in_features)))
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-1, 1) / math.sqrt(in_features))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), std_init / math.sqrt(out_features)))
        self.register_buffer("weight_epsilon", torch.zeros(out_features, in_features))
        self.register_buffer("bias_epsilon", torch.zeros(out_features))
        self.reset_noise()

    def reset_noise(self):
        self.weight_epsilon.normal_()
        self.bias_epsilon.normal_()

    def forward(self, x):
        if not self.training:
            return F.linear(x, self.weight_mu, self.bias_mu)
        return F.linear(
            x, self.weight_mu + self.weight_sigma * self.weight_epsilon, self.bias_mu + self.bias_sigma * self.bias_epsilon
        )


class NoisyDuelingDistributionalNetwork(nn.Module):
    def __init__(self, num_actions: int, n_atoms: int, v_min: float, v_max: float):
        super().__init__()
        self.n_atoms, self.num_actions, self.v_min, self.v_max = n_atoms, num_actions, v_min, v_max
        self.delta_z = (v_max - v_min) / (n_atoms - 1)
        self.register_buffer("support", torch.linspace(v_min, v_max, n_atoms))
        self.network = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        self.value_head = nn.Sequential(NoisyLinear(3136, 512), nn.ReLU(), NoisyLinear(512, n_atoms))
        self.advantage_head = nn.Sequential(NoisyLinear(3136, 512), nn.ReLU(), NoisyLinear(512, n_atoms * num_actions))

    def forward(self, x):
        h = self.network(x / 255.0)
        value = self.value_head(h).view(-1, 1, self.n_atoms)
        advantage = self.advantage_head(h).view(-1, self.num_actions, self.n_atoms)
        return F.softmax(value + advantage - advantage.mean(dim=1, keepdim=True), dim=2)

    def reset_noise(self):
        for layer in [*self.value_head, *self.advantage_head]:
            if isinstance(layer, NoisyLinear):
                layer.reset_noise()


class SegmentTree:
    """A binary tree over `capacity` leaves in one array, each parent `combine` of its two children, updated leaf
    to root in a Python loop (OpenAI Baselines' segment tree, as CleanRL's)."""

    def __init__(self, capacity: int, combine, neutral: float):
        self.capacity, self.combine = capacity, combine
        self.tree = np.full(2 * capacity - 1, neutral, dtype=np.float32)

    def update(self, index: int, value: float):
        node = index + self.capacity - 1
        self.tree[node] = value
        while node > 0:
            node = (node - 1) // 2
            self.tree[node] = self.combine(self.tree[2 * node + 1], self.tree[2 * node + 2])

    def retrieve(self, value: float) -> int:
        """The leaf where the prefix sum passes `value` (sum trees only)."""
        node = 0
        while 2 * node + 1 < len(self.tree):
            left = 2 * node + 1
            if value <= self.tree[left]:
                node = left
            else:
                value -= self.tree[left]
                node = left + 1
        return node - (self.capacity - 1)


class PrioritizedReplayBuffer:
    def __init__(
        self, capacity: int, obs_shape: tuple, device, n_step: int, gamma: float, alpha: float, beta: float, eps: float
    ):
        self.capacity, self.device, self.n_step, self.gamma = capacity, device, n_step, gamma
        self.alpha, self.beta, self.eps = alpha, beta, eps
        self.obs = np.zeros((capacity, *obs_shape), dtype=np.uint8)
        self.next_obs = np.zeros((capacity, *obs_shape), dtype=np.uint8)
        self.actions = np.zeros(capacity, dtype=np.int64)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.dones = np.zeros(capacity, dtype=np.bool_)
        self.pos, self.size, self.max_priority = 0, 0, 1.0
        self.sum_tree = SegmentTree(capacity, lambda a, b: a + b, 0.0)
        self.min_tree = SegmentTree(capacity, min, float("inf"))
        self.window = deque(maxlen=n_step)

    def add(self, obs, action, reward, next_obs, done):
        self.window.append((obs, action, reward, next_obs, done))
        if len(self.window) < self.n_step:
            return
        n_step_return, last_obs, last_done = 0.0, self.window[-1][3], self.window[-1][4]
        for k, (_, _, r, o, d) in enumerate(self.window):  # the return up to the first done in the window
            n_step_return += self.gamma**k * r
            if d:
                last_obs, last_done = o, True
                break
        i = self.pos
        self.obs[i], self.actions[i] = self.window[0][0], self.window[0][1]
        self.rewards[i], self.next_obs[i], self.dones[i] = n_step_return, last_obs, last_done
        priority = self.max_priority**self.alpha
        self.sum_tree.update(i, priority)
        self.min_tree.update(i, priority)
        self.pos, self.size = (self.pos + 1) % self.capacity, min(self.size + 1, self.capacity)
        if last_done:
            self.window.clear()

    def sample(self, batch_size: int):
        total = self.sum_tree.tree[0]
        segment = total / batch_size
        indices = [self.sum_tree.retrieve(np.random.uniform(segment * k, segment * (k + 1))) for k in range(batch_size)]
        probs = np.array([self.sum_tree.tree[i + self.capacity - 1] for i in indices])
        weights = (self.size * probs / total) ** -self.beta
        to_torch = lambda array: torch.from_numpy(array).to(self.device)  # noqa: E731
        return dict(
            observations=to_torch(self.obs[indices]),
            actions=to_torch(self.actions[indices]).unsqueeze(1),
            rewards=to_torch(self.rewards[indices]).unsqueeze(1),
            next_observations=to_torch(self.next_obs[indices]),
            dones=to_torch(self.dones[indices]).unsqueeze(1),
            weights=to_torch(weights / weights.max()).unsqueeze(1),
            indices=indices,
        )

    def update_priorities(self, indices, priorities):
        priorities = np.abs(priorities) + self.eps
        self.max_priority = max(self.max_priority, priorities.max())
        for i, priority in zip(indices, priorities):
            self.sum_tree.update(i, priority**self.alpha)
            self.min_tree.update(i, priority**self.alpha)


if __name__ == "__main__":
    args = tyro.cli(Args)
    check_baseline_args(
        args,
        positive=(
            "total_timesteps",
            "learning_rate",
            "buffer_size",
            "tau",
            "target_network_frequency",
            "batch_size",
            "train_frequency",
            "n_step",
            "n_atoms",
            "prioritized_replay_eps",
        ),
        non_negative=("prioritized_replay_alpha", "prioritized_replay_beta"),
    )
    check_envpool_id(args.env_id, "envpool.atari")
    if not 0 <= args.learning_starts < args.total_timesteps:  # it would never train, print nothing and exit 0
        sys.exit(
            f"error: --total-timesteps {args.total_timesteps} leaves no learning-phase step (--learning-starts "
            f"{args.learning_starts} must be in [0, --total-timesteps))"
        )
    # one line, before anything is written, where the stacks (EnvPool's 4 x 84 x 84 bytes each) do not fit: CleanRL's
    # 1M default takes 52.6 GiB, a traceback from numpy here
    check_memory(
        2 * args.buffer_size * 4 * 84 * 84,
        "CleanRL's replay of whole frame stacks (observations and next observations)",
        "--buffer-size",
    )
    writer = SummaryWriter(os.path.join(args.log_dir, f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"))

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    envs = envpool.make(args.env_id, env_type="gymnasium", num_envs=1, seed=args.seed, episodic_life=True, reward_clip=True)
    num_actions = envs.action_space.n
    q_network = NoisyDuelingDistributionalNetwork(num_actions, args.n_atoms, args.v_min, args.v_max).to(device)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, eps=1.5e-4)
    target_network = NoisyDuelingDistributionalNetwork(num_actions, args.n_atoms, args.v_min, args.v_max).to(device)
    target_network.load_state_dict(q_network.state_dict())
    rb = PrioritizedReplayBuffer(
        args.buffer_size,
        envs.observation_space.shape,
        device,
        args.n_step,
        args.gamma,
        args.prioritized_replay_alpha,
        args.prioritized_replay_beta,
        args.prioritized_replay_eps,
    )

    start_time = time.time()
    obs, _ = envs.reset()
    episode_return, recent_returns = 0.0, []
    for global_step in range(args.total_timesteps):
        rb.beta = min(
            1.0, args.prioritized_replay_beta + global_step * (1.0 - args.prioritized_replay_beta) / args.total_timesteps
        )
        with torch.no_grad():
            q_dist = q_network(torch.Tensor(obs).to(device))
            actions = torch.argmax(torch.sum(q_dist * q_network.support, dim=2), dim=1).cpu().numpy()

        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        episode_return += infos["reward"][0]
        if infos["terminated"][0] or truncations[0]:
            writer.add_scalar("charts/episodic_return", episode_return, global_step)
            recent_returns.append(episode_return)
            episode_return = 0.0
        rb.add(obs[0], actions[0], rewards[0], next_obs[0], terminations[0])
        obs = next_obs

        if global_step > args.learning_starts:
            if global_step % args.train_frequency == 0:
                q_network.reset_noise()
                target_network.reset_noise()
                data = rb.sample(args.batch_size)
                with torch.no_grad():
                    support = target_network.support
                    next_dist = target_network(data["next_observations"])
                    best_actions = torch.argmax(torch.sum(q_network(data["next_observations"]) * support, dim=2), dim=1)
                    next_pmfs = next_dist[torch.arange(args.batch_size), best_actions]
                    next_atoms = data["rewards"] + args.gamma**args.n_step * support * (1 - data["dones"].float())
                    b = (next_atoms.clamp(args.v_min, args.v_max) - args.v_min) / q_network.delta_z
                    lower, upper = b.floor().clamp(0, args.n_atoms - 1), b.ceil().clamp(0, args.n_atoms - 1)
                    d_m_l = (upper + (lower == b).float() - b) * next_pmfs
                    d_m_u = (b - lower) * next_pmfs
                    target_pmfs = torch.zeros_like(next_pmfs)
                    for i in range(target_pmfs.size(0)):
                        target_pmfs[i].index_add_(0, lower[i].long(), d_m_l[i])
                        target_pmfs[i].index_add_(0, upper[i].long(), d_m_u[i])

                dist = q_network(data["observations"])
                pred_dist = dist.gather(1, data["actions"].unsqueeze(-1).expand(-1, -1, args.n_atoms)).squeeze(1)
                loss_per_sample = -(target_pmfs * torch.log(pred_dist.clamp(min=1e-5, max=1 - 1e-5))).sum(dim=1)
                loss = (loss_per_sample * data["weights"].squeeze()).mean()
                rb.update_priorities(data["indices"], loss_per_sample.detach().cpu().numpy())

                if global_step % 100 == 0:
                    sps = int(global_step / (time.time() - start_time))
                    writer.add_scalar("losses/td_loss", loss.item(), global_step)
                    writer.add_scalar("losses/q_values", (pred_dist * q_network.support).sum(dim=1).mean().item(), global_step)
                    writer.add_scalar("charts/SPS", sps, global_step)
                    mean_return = f"{np.mean(recent_returns[-20:]):.2f}" if recent_returns else "n/a"
                    print(
                        f"step {global_step:,}/{args.total_timesteps:,}  SPS {sps:,}  return(last 20) {mean_return}",
                        flush=True,
                    )

                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

            if global_step % args.target_network_frequency == 0:
                for target_param, param in zip(target_network.parameters(), q_network.parameters()):
                    target_param.data.copy_(args.tau * param.data + (1.0 - args.tau) * target_param.data)

    # the last line, at the run's end (the loop prints every 100 steps of the training phase only)
    sps = int(args.total_timesteps / (time.time() - start_time))
    mean_return = f"{np.mean(recent_returns[-20:]):.2f}" if recent_returns else "n/a"
    print(f"step {args.total_timesteps:,}/{args.total_timesteps:,}  SPS {sps:,}  return(last 20) {mean_return}", flush=True)
    envs.close()
    writer.close()

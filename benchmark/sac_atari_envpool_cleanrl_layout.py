# Discrete SAC on EnvPool Atari: a speed baseline, the plain eager PyTorch loop in the layout of CleanRL's
# sac_atari.py, moved to EnvPool 1.2's gymnasium API and nothing else. Its per-step and per-update work is CleanRL's:
# a replay of whole 4-frame stacks whose next observation is the following row (Stable-Baselines3's ReplayBuffer
# with optimize_memory_usage=True), sampled with numpy and copied into new tensors, `torch.Tensor(obs)` every step,
# an actor and two Q-networks each with its own Nature CNN, x / 255 inside, torch's default threads (one per core),
# fp32, separate Adam optimisers (eps 1e-4), the target networks copied parameter by parameter.
# Not a reference implementation (it stores next-step autoreset's stale transitions and bootstraps across them):
# see cleanrl/sac_atari_envpool.py. It prints the same progress line (`SPS n`).
# Run:
#   python benchmark/sac_atari_envpool_cleanrl_layout.py --env-id Pong-v5 --total-timesteps 5000 --learning-starts 1000 --buffer-size 100000
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
from torch.distributions.categorical import Categorical
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
    env_id: str = "BeamRider-v5"
    """the id of the environment"""
    total_timesteps: int = 5_000_000
    """total timesteps of the experiments"""
    buffer_size: int = 1_000_000
    """the replay memory buffer size"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 1.0
    """target smoothing coefficient (default: 1)"""
    batch_size: int = 64
    """the batch size of sample from the reply memory"""
    learning_starts: int = 20_000
    """timestep to start learning"""
    policy_lr: float = 3e-4
    """the learning rate of the policy network optimizer"""
    q_lr: float = 3e-4
    """the learning rate of the Q network network optimizer"""
    update_frequency: int = 4
    """the frequency of training updates"""
    target_network_frequency: int = 8000
    """the frequency of updates for the target networks"""
    target_entropy_scale: float = 0.89
    """coefficient for scaling the autotune entropy target"""
    log_dir: str = "runs"
    """the folder the run's tensorboard events go under"""


def layer_init(layer, bias_const=0.0):
    nn.init.kaiming_normal_(layer.weight)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


def nature_cnn() -> nn.Sequential:
    return nn.Sequential(
        layer_init(nn.Conv2d(4, 32, kernel_size=8, stride=4)),
        nn.ReLU(),
        layer_init(nn.Conv2d(32, 64, kernel_size=4, stride=2)),
        nn.ReLU(),
        layer_init(nn.Conv2d(64, 64, kernel_size=3, stride=1)),
        nn.Flatten(),
    )


class SoftQNetwork(nn.Module):
    def __init__(self, num_actions: int):
        super().__init__()
        self.conv = nature_cnn()
        self.fc1 = layer_init(nn.Linear(3136, 512))
        self.fc_q = layer_init(nn.Linear(512, num_actions))

    def forward(self, x):
        x = F.relu(self.conv(x / 255.0))
        return self.fc_q(F.relu(self.fc1(x)))


class Actor(nn.Module):
    def __init__(self, num_actions: int):
        super().__init__()
        self.conv = nature_cnn()
        self.fc1 = layer_init(nn.Linear(3136, 512))
        self.fc_logits = layer_init(nn.Linear(512, num_actions))

    def forward(self, x):
        x = F.relu(self.conv(x))
        return self.fc_logits(F.relu(self.fc1(x)))

    def get_action(self, x):
        logits = self(x / 255.0)
        policy_dist = Categorical(logits=logits)
        return policy_dist.sample(), F.log_softmax(logits, dim=1), policy_dist.probs


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
            "buffer_size",
            "tau",
            "batch_size",
            "policy_lr",
            "q_lr",
            "update_frequency",
            "target_network_frequency",
        ),
        non_negative=("target_entropy_scale",),
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
    actor = Actor(num_actions).to(device)
    qf1, qf2 = SoftQNetwork(num_actions).to(device), SoftQNetwork(num_actions).to(device)
    qf1_target, qf2_target = SoftQNetwork(num_actions).to(device), SoftQNetwork(num_actions).to(device)
    qf1_target.load_state_dict(qf1.state_dict())
    qf2_target.load_state_dict(qf2.state_dict())
    q_optimizer = optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=args.q_lr, eps=1e-4)
    actor_optimizer = optim.Adam(list(actor.parameters()), lr=args.policy_lr, eps=1e-4)
    target_entropy = -args.target_entropy_scale * torch.log(1 / torch.tensor(num_actions))
    log_alpha = torch.zeros(1, requires_grad=True, device=device)
    alpha = log_alpha.exp().item()
    a_optimizer = optim.Adam([log_alpha], lr=args.q_lr, eps=1e-4)
    rb = ReplayBuffer(args.buffer_size, envs.observation_space.shape, device)

    start_time = time.time()
    obs, _ = envs.reset()
    episode_return, recent_returns = 0.0, []
    for global_step in range(args.total_timesteps):
        if global_step < args.learning_starts:
            actions = np.array([envs.action_space.sample()])
        else:
            actions, _, _ = actor.get_action(torch.Tensor(obs).to(device))
            actions = actions.detach().cpu().numpy()

        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        episode_return += infos["reward"][0]
        if infos["terminated"][0] or truncations[0]:
            writer.add_scalar("charts/episodic_return", episode_return, global_step)
            recent_returns.append(episode_return)
            episode_return = 0.0
        rb.add(obs[0], next_obs[0], actions[0], rewards[0], terminations[0])
        obs = next_obs

        if global_step > args.learning_starts:
            if global_step % args.update_frequency == 0:
                observations, data_actions, next_observations, dones, data_rewards = rb.sample(args.batch_size)
                with torch.no_grad():
                    _, next_state_log_pi, next_state_action_probs = actor.get_action(next_observations)
                    qf1_next_target = qf1_target(next_observations)
                    qf2_next_target = qf2_target(next_observations)
                    min_qf_next_target = next_state_action_probs * (
                        torch.min(qf1_next_target, qf2_next_target) - alpha * next_state_log_pi
                    )
                    min_qf_next_target = min_qf_next_target.sum(dim=1)
                    next_q_value = data_rewards + (1 - dones) * args.gamma * min_qf_next_target

                qf1_a_values = qf1(observations).gather(1, data_actions.long().view(-1, 1)).view(-1)
                qf2_a_values = qf2(observations).gather(1, data_actions.long().view(-1, 1)).view(-1)
                qf_loss = F.mse_loss(qf1_a_values, next_q_value) + F.mse_loss(qf2_a_values, next_q_value)
                q_optimizer.zero_grad()
                qf_loss.backward()
                q_optimizer.step()

                _, log_pi, action_probs = actor.get_action(observations)
                with torch.no_grad():
                    min_qf_values = torch.min(qf1(observations), qf2(observations))
                actor_loss = (action_probs * ((alpha * log_pi) - min_qf_values)).mean()
                actor_optimizer.zero_grad()
                actor_loss.backward()
                actor_optimizer.step()

                alpha_loss = (action_probs.detach() * (-log_alpha.exp() * (log_pi + target_entropy).detach())).mean()
                a_optimizer.zero_grad()
                alpha_loss.backward()
                a_optimizer.step()
                alpha = log_alpha.exp().item()

            if global_step % args.target_network_frequency == 0:
                for param, target_param in zip(qf1.parameters(), qf1_target.parameters()):
                    target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
                for param, target_param in zip(qf2.parameters(), qf2_target.parameters()):
                    target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)

            if global_step % 100 == 0:
                sps = int(global_step / (time.time() - start_time))
                writer.add_scalar("losses/qf_loss", qf_loss.item() / 2.0, global_step)
                writer.add_scalar("losses/actor_loss", actor_loss.item(), global_step)
                writer.add_scalar("losses/alpha", alpha, global_step)
                writer.add_scalar("charts/SPS", sps, global_step)
                mean_return = f"{np.mean(recent_returns[-20:]):.2f}" if recent_returns else "n/a"
                print(f"step {global_step:,}/{args.total_timesteps:,}  SPS {sps:,}  return(last 20) {mean_return}", flush=True)

    # the last line, at the run's end (the loop prints every 100 steps of the training phase only)
    sps = int(args.total_timesteps / (time.time() - start_time))
    mean_return = f"{np.mean(recent_returns[-20:]):.2f}" if recent_returns else "n/a"
    print(f"step {args.total_timesteps:,}/{args.total_timesteps:,}  SPS {sps:,}  return(last 20) {mean_return}", flush=True)
    envs.close()
    writer.close()

# SAC for continuous actions on one EnvPool env: a speed baseline, the plain eager PyTorch loop in CleanRL's
# sac_continuous_action.py layout (numpy replay buffer, torch.tensor per sampled field, three Adam optimisers,
# param-by-param soft update, .item() logging). Not a reference implementation, see cleanrl/sac_continuous_action_envpool.py.
# It times the learning phase (steps after learning_starts) and prints one line: SPS and the per-step split env/action/update.
# Run:
#   python benchmark/sac_continuous_action_cleanrl_layout.py --total-timesteps 6000 --learning-starts 5000
#   python benchmark/sac_continuous_action_cleanrl_layout.py --env-id Pendulum-v1 --no-autotune
import os
import random
import sys
import time
from collections import namedtuple
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
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """if toggled, cuda will be enabled by default"""
    env_id: str = "Hopper-v4"
    """the id of the EnvPool environment"""
    total_timesteps: int = 1_000_000
    """total timesteps of the experiment"""
    buffer_size: int = 1_000_000
    """the replay memory buffer size"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 0.005
    """target smoothing coefficient"""
    batch_size: int = 256
    """the batch size of samples from the replay memory"""
    learning_starts: int = 5000
    """timestep to start learning"""
    policy_lr: float = 3e-4
    """the learning rate of the policy network optimizer"""
    q_lr: float = 1e-3
    """the learning rate of the Q network optimizer"""
    policy_frequency: int = 2
    """the frequency of training policy (delayed)"""
    target_network_frequency: int = 1
    """the frequency of updates for the target networks"""
    alpha: float = 0.2
    """entropy regularization coefficient"""
    autotune: bool = True
    """automatic tuning of the entropy coefficient"""
    log_dir: str = "runs"
    """the directory for the tensorboard runs"""


ReplayBufferSamples = namedtuple("ReplayBufferSamples", ["observations", "actions", "next_observations", "dones", "rewards"])


class ReplayBuffer:
    """SB3-style replay buffer: preallocated numpy arrays, uniform sampling, torch tensors built per field."""

    def __init__(self, buffer_size, obs_shape, action_shape, device):
        self.buffer_size, self.device = buffer_size, device
        self.pos, self.full = 0, False
        self.observations = np.zeros((buffer_size, *obs_shape), dtype=np.float32)
        self.next_observations = np.zeros((buffer_size, *obs_shape), dtype=np.float32)
        self.actions = np.zeros((buffer_size, *action_shape), dtype=np.float32)
        self.rewards = np.zeros((buffer_size,), dtype=np.float32)
        self.dones = np.zeros((buffer_size,), dtype=np.float32)

    def add(self, obs, next_obs, action, reward, done):
        self.observations[self.pos] = np.array(obs)
        self.next_observations[self.pos] = np.array(next_obs)
        self.actions[self.pos] = np.array(action)
        self.rewards[self.pos] = np.array(reward)
        self.dones[self.pos] = np.array(done)
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full, self.pos = True, 0

    def to_torch(self, array):
        return torch.tensor(array, device=self.device)

    def sample(self, batch_size):
        upper = self.buffer_size if self.full else self.pos
        inds = np.random.randint(0, upper, size=batch_size)
        obs, next_obs, rewards, dones = self.observations, self.next_observations, self.rewards, self.dones
        data = (obs[inds], self.actions[inds], next_obs[inds], dones[inds].reshape(-1, 1), rewards[inds].reshape(-1, 1))
        return ReplayBufferSamples(*tuple(map(self.to_torch, data)))


class SoftQNetwork(nn.Module):
    def __init__(self, obs_dim, act_dim):
        super().__init__()
        self.fc1 = nn.Linear(obs_dim + act_dim, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc3 = nn.Linear(256, 1)

    def forward(self, x, a):
        x = torch.cat([x, a], 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


LOG_STD_MAX = 2
LOG_STD_MIN = -5


class Actor(nn.Module):
    def __init__(self, obs_dim, act_dim, low, high):
        super().__init__()
        self.fc1 = nn.Linear(obs_dim, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc_mean = nn.Linear(256, act_dim)
        self.fc_logstd = nn.Linear(256, act_dim)
        self.register_buffer("action_scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        mean = self.fc_mean(x)
        log_std = torch.tanh(self.fc_logstd(x))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)  # from [-1, 1] to [min, max]
        return mean, log_std

    def get_action(self, x):
        mean, log_std = self(x)
        normal = torch.distributions.Normal(mean, log_std.exp())
        x_t = normal.rsample()  # reparameterisation trick
        y_t = torch.tanh(x_t)
        action = y_t * self.action_scale + self.action_bias
        log_prob = normal.log_prob(x_t)
        log_prob -= torch.log(self.action_scale * (1 - y_t.pow(2)) + 1e-6)  # tanh squashing correction
        log_prob = log_prob.sum(1, keepdim=True)
        mean = torch.tanh(mean) * self.action_scale + self.action_bias
        return action, log_prob, mean


if __name__ == "__main__":
    args = tyro.cli(Args)
    # one line before anything runs, where a bad value would give a traceback or train on and exit 0
    check_baseline_args(
        args,
        positive=(
            "total_timesteps",
            "buffer_size",
            "batch_size",
            "policy_frequency",
            "target_network_frequency",
            "policy_lr",
            "q_lr",
        ),
        non_negative=("alpha",),
    )
    check_envpool_id(args.env_id, "envpool.mujoco.gym")
    if args.learning_starts < 0:
        sys.exit(f"error: --learning-starts must be >= 0, got {args.learning_starts}")
    if args.total_timesteps < args.learning_starts + 2:  # it times steps after learning_starts: none, nothing to print
        sys.exit(
            f"error: --total-timesteps {args.total_timesteps} leaves no learning-phase step to time "
            f"(it must be at least --learning-starts {args.learning_starts} + 2)"
        )
    run_name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    writer = SummaryWriter(f"{args.log_dir}/{run_name}")
    writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in vars(args).items()))

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    # env setup: EnvPool autoresets in next-step mode (the step after a boundary ignores the action and resets)
    envs = envpool.make(args.env_id, env_type="gymnasium", num_envs=1, seed=args.seed)
    obs_shape, action_shape = envs.observation_space.shape, envs.action_space.shape
    obs_dim, act_dim = int(np.prod(obs_shape)), int(np.prod(action_shape))
    low, high = envs.action_space.low.astype(np.float64), envs.action_space.high.astype(np.float64)

    actor = Actor(obs_dim, act_dim, low, high).to(device)
    qf1, qf2 = SoftQNetwork(obs_dim, act_dim).to(device), SoftQNetwork(obs_dim, act_dim).to(device)
    qf1_target, qf2_target = SoftQNetwork(obs_dim, act_dim).to(device), SoftQNetwork(obs_dim, act_dim).to(device)
    qf1_target.load_state_dict(qf1.state_dict())
    qf2_target.load_state_dict(qf2.state_dict())
    q_optimizer = optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=args.q_lr)
    actor_optimizer = optim.Adam(list(actor.parameters()), lr=args.policy_lr)

    # automatic entropy tuning
    if args.autotune:
        target_entropy = -torch.prod(torch.Tensor(action_shape).to(device)).item()
        log_alpha = torch.zeros(1, requires_grad=True, device=device)
        alpha = log_alpha.exp().item()
        a_optimizer = optim.Adam([log_alpha], lr=args.q_lr)
    else:
        alpha = args.alpha

    rb = ReplayBuffer(args.buffer_size, obs_shape, action_shape, device)
    start_time = time.time()
    t_env = t_action = t_update = 0.0  # learning-phase time per phase, and its first/last step and wall-clock bounds
    first_timed = last_timed = learn_start_time = learn_end_time = None

    obs, _ = envs.reset()
    prev_done, episodic_return = np.zeros(1, dtype=bool), 0.0
    for global_step in range(args.total_timesteps):
        timed = global_step > args.learning_starts
        if timed and first_timed is None:
            first_timed, learn_start_time = global_step, time.perf_counter()
        t0 = time.perf_counter()
        # ALGO LOGIC: put action logic here
        if global_step < args.learning_starts:
            actions = np.random.uniform(low, high, size=(1, *action_shape))
        else:
            actions, _, _ = actor.get_action(torch.Tensor(obs).to(device))
            actions = actions.detach().cpu().numpy()
        t1 = time.perf_counter()

        # TRY NOT TO MODIFY: execute the game and log data.
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        t2 = time.perf_counter()
        env_time = t2 - t1
        if not prev_done[0]:  # a step right after a boundary is EnvPool's reset step: no transition
            episodic_return += float(rewards[0])
            t2 = time.perf_counter()
            rb.add(obs[0].astype(np.float32), next_obs[0].astype(np.float32), actions[0], rewards[0], terminations[0])
            env_time += time.perf_counter() - t2
            if terminations[0] or truncations[0]:
                writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                writer.add_scalar("charts/episodic_length", int(infos["elapsed_step"][0]), global_step)
        else:
            episodic_return = 0.0
        prev_done = terminations | truncations
        obs = next_obs  # on a truncation step next_obs is the real last observation, so the stored transition is right
        t3 = time.perf_counter()

        # ALGO LOGIC: training.
        if global_step > args.learning_starts:
            data = rb.sample(args.batch_size)
            with torch.no_grad():
                next_state_actions, next_state_log_pi, _ = actor.get_action(data.next_observations)
                qf1_next_target = qf1_target(data.next_observations, next_state_actions)
                qf2_next_target = qf2_target(data.next_observations, next_state_actions)
                min_qf_next_target = torch.min(qf1_next_target, qf2_next_target) - alpha * next_state_log_pi
                next_q_value = data.rewards.flatten() + (1 - data.dones.flatten()) * args.gamma * (min_qf_next_target).view(-1)

            qf1_a_values = qf1(data.observations, data.actions).view(-1)
            qf2_a_values = qf2(data.observations, data.actions).view(-1)
            qf1_loss = F.mse_loss(qf1_a_values, next_q_value)
            qf2_loss = F.mse_loss(qf2_a_values, next_q_value)
            qf_loss = qf1_loss + qf2_loss

            q_optimizer.zero_grad()
            qf_loss.backward()
            q_optimizer.step()

            if global_step % args.policy_frequency == 0:  # TD3 delayed update, compensated by updating several times
                for _ in range(args.policy_frequency):
                    pi, log_pi, _ = actor.get_action(data.observations)
                    qf1_pi = qf1(data.observations, pi)
                    qf2_pi = qf2(data.observations, pi)
                    min_qf_pi = torch.min(qf1_pi, qf2_pi)
                    actor_loss = ((alpha * log_pi) - min_qf_pi).mean()

                    actor_optimizer.zero_grad()
                    actor_loss.backward()
                    actor_optimizer.step()

                    if args.autotune:
                        with torch.no_grad():
                            _, log_pi, _ = actor.get_action(data.observations)
                        alpha_loss = (-log_alpha.exp() * (log_pi + target_entropy)).mean()

                        a_optimizer.zero_grad()
                        alpha_loss.backward()
                        a_optimizer.step()
                        alpha = log_alpha.exp().item()

            # update the target networks
            if global_step % args.target_network_frequency == 0:
                for param, target_param in zip(qf1.parameters(), qf1_target.parameters()):
                    target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
                for param, target_param in zip(qf2.parameters(), qf2_target.parameters()):
                    target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)

            if global_step % 100 == 0:
                writer.add_scalar("losses/qf1_values", qf1_a_values.mean().item(), global_step)
                writer.add_scalar("losses/qf2_values", qf2_a_values.mean().item(), global_step)
                writer.add_scalar("losses/qf1_loss", qf1_loss.item(), global_step)
                writer.add_scalar("losses/qf2_loss", qf2_loss.item(), global_step)
                writer.add_scalar("losses/qf_loss", qf_loss.item() / 2.0, global_step)
                writer.add_scalar("losses/actor_loss", actor_loss.item(), global_step)
                writer.add_scalar("losses/alpha", alpha, global_step)
                writer.add_scalar("charts/SPS", int(global_step / (time.time() - start_time)), global_step)
                if args.autotune:
                    writer.add_scalar("losses/alpha_loss", alpha_loss.item(), global_step)

        if timed:
            t4 = time.perf_counter()
            t_action += t1 - t0
            t_env += env_time
            t_update += t4 - t3
            last_timed, learn_end_time = global_step, t4

    envs.close()
    writer.close()
    assert first_timed is not None, "no learning-phase steps: total_timesteps must exceed learning_starts + 1"
    n = last_timed - first_timed + 1
    print(
        f"baseline: SPS {n / (learn_end_time - learn_start_time):.1f} over steps {first_timed}-{last_timed} (learning phase)"
        f" | per step: env {1e3 * t_env / n:.2f} ms, action {1e3 * t_action / n:.2f} ms, update {1e3 * t_update / n:.2f} ms"
    )

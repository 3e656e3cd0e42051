# PPO with an LSTM on EnvPool Atari: a speed baseline, the plain eager PyTorch loop in the layout of CleanRL's
# ppo_atari_lstm.py, moved to EnvPool 1.2's gymnasium API with cleanrl/ppo_atari_lstm_envpool.py's env settings (one
# frame per observation, stack_num=1; life loss as termination; clipped rewards) and nothing else. Its per-step and
# per-update work is CleanRL's: float32 observation storage (NCHW), `torch.Tensor(obs)` every step, x / 255 inside
# the network, get_states' step-by-step LSTM loop with the state masked by `(1.0 - done)` before each row, minibatches
# of whole env sequences (numpy-shuffled env indices, a fancy-index gather of their rows), torch's default threads
# (one per core), a `.item()` per minibatch, no stale-step mask.
# Not a reference implementation (it trains on next-step autoreset's stale rows and restarts the state one step
# early, as CleanRL does): see cleanrl/ppo_atari_lstm_envpool.py. It prints the same progress line (`SPS n`) as the
# project's scripts.
# Run:
#   python benchmark/ppo_atari_lstm_envpool_cleanrl_layout.py --env-id Pong-v5 --total-timesteps 20480
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
from torch.distributions.categorical import Categorical
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
    env_id: str = "Breakout-v5"
    """the id of the environment"""
    total_timesteps: int = 10_000_000
    """total timesteps of the experiments"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: int = 8
    """the number of parallel game environments"""
    num_steps: int = 128
    """the number of steps to run in each environment per policy rollout"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 4
    """the number of mini-batches (each holds num_envs / num_minibatches whole env sequences)"""
    update_epochs: int = 4
    """the K epochs to update the policy"""
    clip_coef: float = 0.1
    """the surrogate clipping coefficient"""
    ent_coef: float = 0.01
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    log_dir: str = "runs"
    """the folder the run's tensorboard events go under"""


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, num_actions: int):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(1, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.lstm = nn.LSTM(512, 128)
        for name, param in self.lstm.named_parameters():
            if "bias" in name:
                nn.init.constant_(param, 0)
            elif "weight" in name:
                nn.init.orthogonal_(param, 1.0)
        self.actor = layer_init(nn.Linear(128, num_actions), std=0.01)
        self.critic = layer_init(nn.Linear(128, 1), std=1)

    def get_states(self, x, lstm_state, done):
        hidden = self.network(x / 255.0)
        # one LSTM call per row of the sequence, the state zeroed where the row's done flag is set
        batch_size = lstm_state[0].shape[1]
        hidden = hidden.reshape((-1, batch_size, self.lstm.input_size))
        done = done.reshape((-1, batch_size))
        new_hidden = []
        for h, d in zip(hidden, done):
            mask = (1.0 - d).view(1, -1, 1)
            h, lstm_state = self.lstm(h.unsqueeze(0), (mask * lstm_state[0], mask * lstm_state[1]))
            new_hidden += [h]
        return torch.flatten(torch.cat(new_hidden), 0, 1), lstm_state

    def get_value(self, x, lstm_state, done):
        hidden, _ = self.get_states(x, lstm_state, done)
        return self.critic(hidden)

    def get_action_and_value(self, x, lstm_state, done, action=None):
        hidden, lstm_state = self.get_states(x, lstm_state, done)
        probs = Categorical(logits=self.actor(hidden))
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(hidden), lstm_state


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
            "clip_coef",
            "max_grad_norm",
        ),
        non_negative=("ent_coef", "vf_coef"),
    )
    check_envpool_id(args.env_id, "envpool.atari")
    if args.num_envs % args.num_minibatches != 0:
        sys.exit(
            f"error: --num-minibatches {args.num_minibatches} does not divide --num-envs {args.num_envs} "
            "(a minibatch holds whole env sequences)"
        )
    batch_size = args.num_envs * args.num_steps
    if args.total_timesteps < batch_size:  # 0 iterations: it would print nothing and exit 0
        sys.exit(f"error: --total-timesteps {args.total_timesteps} is smaller than one rollout ({batch_size} steps)")
    num_iterations = args.total_timesteps // batch_size
    writer = SummaryWriter(os.path.join(args.log_dir, f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"))

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    envs = envpool.make(
        args.env_id,
        env_type="gymnasium",
        num_envs=args.num_envs,
        seed=args.seed,
        stack_num=1,
        episodic_life=True,
        reward_clip=True,
    )
    agent = Agent(envs.action_space.n).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    obs = torch.zeros((args.num_steps, args.num_envs) + envs.observation_space.shape).to(device)
    actions = torch.zeros((args.num_steps, args.num_envs)).to(device)
    logprobs = torch.zeros((args.num_steps, args.num_envs)).to(device)
    rewards = torch.zeros((args.num_steps, args.num_envs)).to(device)
    dones = torch.zeros((args.num_steps, args.num_envs)).to(device)
    values = torch.zeros((args.num_steps, args.num_envs)).to(device)
    episode_returns = np.zeros(args.num_envs)
    recent_returns = []

    global_step = 0
    start_time = time.time()
    next_obs = torch.Tensor(envs.reset()[0]).to(device)
    next_done = torch.zeros(args.num_envs).to(device)
    next_lstm_state = (
        torch.zeros(agent.lstm.num_layers, args.num_envs, agent.lstm.hidden_size).to(device),
        torch.zeros(agent.lstm.num_layers, args.num_envs, agent.lstm.hidden_size).to(device),
    )

    for iteration in range(1, num_iterations + 1):
        initial_lstm_state = (next_lstm_state[0].clone(), next_lstm_state[1].clone())
        optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / num_iterations) * args.learning_rate
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done
            with torch.no_grad():
                action, logprob, _, value, next_lstm_state = agent.get_action_and_value(next_obs, next_lstm_state, next_done)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob

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
            next_value = agent.get_value(next_obs, next_lstm_state, next_done).reshape(1, -1)
            advantages = torch.zeros_like(rewards).to(device)
            lastgaelam = 0
            for t in reversed(range(args.num_steps)):
                if t == args.num_steps - 1:
                    nextnonterminal, nextvalues = 1.0 - next_done, next_value
                else:
                    nextnonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
                delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
            returns = advantages + values

        b_obs = obs.reshape((-1,) + envs.observation_space.shape)
        b_logprobs, b_actions, b_dones = logprobs.reshape(-1), actions.reshape(-1), dones.reshape(-1)
        b_advantages, b_returns, b_values = advantages.reshape(-1), returns.reshape(-1), values.reshape(-1)

        envsperbatch = args.num_envs // args.num_minibatches
        envinds = np.arange(args.num_envs)
        flatinds = np.arange(batch_size).reshape(args.num_steps, args.num_envs)
        clipfracs = []
        for epoch in range(args.update_epochs):
            np.random.shuffle(envinds)
            for start in range(0, args.num_envs, envsperbatch):
                mbenvinds = envinds[start : start + envsperbatch]
                mb_inds = flatinds[:, mbenvinds].ravel()  # time-major rows of these envs' whole sequences
                _, newlogprob, entropy, newvalue, _ = agent.get_action_and_value(
                    b_obs[mb_inds],
                    (initial_lstm_state[0][:, mbenvinds], initial_lstm_state[1][:, mbenvinds]),
                    b_dones[mb_inds],
                    b_actions.long()[mb_inds],
                )
                logratio = newlogprob - b_logprobs[mb_inds]
                ratio = logratio.exp()
                with torch.no_grad():
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs += [((ratio - 1.0).abs() > args.clip_coef).float().mean().item()]
                mb_advantages = b_advantages[mb_inds]
                mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
                pg_loss = torch.max(
                    -mb_advantages * ratio, -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                ).mean()
                newvalue = newvalue.view(-1)
                v_clipped = b_values[mb_inds] + torch.clamp(newvalue - b_values[mb_inds], -args.clip_coef, args.clip_coef)
                v_loss = 0.5 * torch.max((newvalue - b_returns[mb_inds]) ** 2, (v_clipped - b_returns[mb_inds]) ** 2).mean()
                entropy_loss = entropy.mean()
                loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

        y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y
        sps = int(global_step / (time.time() - start_time))
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        writer.add_scalar("losses/value_loss", v_loss.item(), global_step)
        writer.add_scalar("losses/policy_loss", pg_loss.item(), global_step)
        writer.add_scalar("losses/entropy", entropy_loss.item(), global_step)
        writer.add_scalar("losses/approx_kl", approx_kl.item(), global_step)
        writer.add_scalar("losses/clipfrac", np.mean(clipfracs), global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        mean_return = f"{np.mean(recent_returns[-20:]):.2f}" if recent_returns else "n/a"
        print(f"step {global_step:,}/{num_iterations * batch_size:,}  SPS {sps:,}  return(last 20) {mean_return}", flush=True)

    envs.close()
    writer.close()

# Soft Actor-Critic for MuJoCo through EnvPool, with a replay buffer that is right under next-step autoreset.
# Hyperparameters: CleanRL's sac_continuous_action defaults (Haarnoja et al. 2018, automatic entropy tuning).
# Autoreset semantics: "The Value of Autoresetting" (Gymnasium), next-step mode.
from cleanrl_utils.stop import StopAfterIteration, exit_at_once_on_signals, stopped_line

if __name__ == "__main__":
    exit_at_once_on_signals(envpool_mujoco=True)  # Ctrl-C while the libraries below load: one line, no traceback

import functools
import math
import os
import random
import sys
from dataclasses import dataclass
from typing import Literal

import envpool
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import tyro

from cleanrl_utils.checkpoint import (
    MAY_CHANGE_ON_RESUME,
    load_torch,
    restore_torch,
    resume_args,
    resumed_env_seed,
    save_torch,
    torch_rng_states,
)
from cleanrl_utils.checks import check_continuous_envpool_id, check_memory, check_positive, check_replay_args, check_run_args
from cleanrl_utils.envpool_time_limit import make_envpool
from cleanrl_utils.evaluate import Player, written_by
from cleanrl_utils.hardware import choose_speed_levers, this_machine
from cleanrl_utils.run import (
    ProgressLine,
    checkpoint_due,
    exit_if_diverged,
    make_writer,
    record_end_step,
    run_folder,
    torch_all_finite,
)
from cleanrl_utils.steps import say_steps_run, updates_due
from cleanrl_utils.video import VideoJobs

# Every saved model and checkpoint records which script wrote it, and where: evaluate plays that file's player.
WRITTEN_BY = written_by(__file__)
SCRIPT = WRITTEN_BY["script"]  # a copy under a new name is a new script


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment (torch, numpy, python and the EnvPool simulators)"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """if toggled, cuda will be used when available"""
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases (works with WANDB_MODE=offline)"""
    wandb_project_name: str = "cleanRL"
    """the wandb's project name"""
    wandb_entity: str | None = None
    """the entity (team) of wandb's project"""
    save_model: bool = False
    """whether to save the actor's weights and args to `runs/{run_name}/{exp_name}.cleanrl_model`"""
    log_dir: str = "runs"
    """the folder the run's tensorboard events (and saved model) go under"""
    checkpoint_every: int = 0
    """save a resumable checkpoint to `runs/{run_name}/checkpoint.pt` every N iterations (one iteration = one step
    of every env; 0: only at Ctrl-C and at the end)"""
    keep_checkpoints: bool = False
    """keep every checkpoint as `checkpoint-{global_step}.pt` too, to evaluate the run's best point afterwards:
    `python -m cleanrl_utils.evaluate --model-path runs/{run_name} --greedy` (with the replay buffer in each, a kept checkpoint is as large as the buffer: see --checkpoint-buffer)"""
    checkpoint_buffer: bool = True
    """put the replay buffer in the checkpoint; with --no-checkpoint-buffer a resumed run refills an empty buffer for
    --learning-starts steps before it trains again"""
    resume: str | None = None
    """continue from a checkpoint: same run folder, args, step counter, networks, optimisers, entropy coefficient, RNG
    states and replay buffer"""
    capture_video: bool = False
    """film an evaluation episode to `runs/{run_name}/videos/` every --video-every iterations and at the end, in a
    separate process (the training envs never render)"""
    video_every: int = 100_000
    """iterations between evaluation videos with --capture-video"""

    # Algorithm specific arguments (CleanRL's sac_continuous_action)
    env_id: str = "Hopper-v4"
    """the id of the environment (any EnvPool MuJoCo id, e.g. Hopper-v4, HalfCheetah-v4, Walker2d-v4, Ant-v4; or
    Pendulum-v1 for quick checks)"""
    total_timesteps: int = 1_000_000
    """total timesteps of the experiments (agent steps, counting every env)"""
    num_envs: int = 1
    """the number of parallel environments (steps, updates and learning starts count every env)"""
    buffer_size: int = 1_000_000
    """the replay memory buffer size (transitions)"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 0.005
    """target smoothing coefficient"""
    batch_size: int = 256
    """the batch size of sample from the reply memory"""
    learning_starts: int = 5_000
    """timestep to start learning (random uniform actions before it)"""
    policy_lr: float = 3e-4
    """the learning rate of the policy network optimizer"""
    q_lr: float = 1e-3
    """the learning rate of the Q network optimizer (and of the entropy coefficient with --autotune)"""
    updates_per_step: int = 1
    """gradient steps of the critics per env step (the update-to-data ratio)"""
    policy_frequency: int = 2
    """the frequency of training policy (delayed): every N critic updates, N actor updates"""
    target_network_frequency: int = 1
    """the frequency of updates for the target networks (in critic updates)"""
    alpha: float = 0.2
    """entropy regularization coefficient (without --autotune)"""
    autotune: bool = True
    """automatic tuning of the entropy coefficient towards the target entropy -dim(action)"""
    max_episode_steps: int | None = None
    """time limit per episode in agent steps (default: the env's own, 1000 for the locomotion tasks); reaching it
    truncates"""

    # Speed levers: each keeps the learning curve (see README); auto picks what is fastest on this machine
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """the hidden layers' precision on training batches (output layers, log-probabilities and losses stay fp32). auto: bf16 autocast where the machine computes bf16 natively (a CPU with AVX512-BF16 or AMX, as oneDNN sees it; CUDA compute capability >= 8.0), else fp32. The run saves the resolved value"""
    compile: bool = False
    """torch.compile the critic and actor losses (forward and backward; about 10 s of compiling at start-up). Off: measured slower on every CPU tried (AMX Xeon 0.91x, Zen 4 0.80x of eager, both in bf16); for GPUs, where launch overhead dominates"""
    fused_adam: bool = True
    """Adam as one fused kernel over all parameters"""
    torch_threads: int = 0
    """torch intra-op threads on CPU. 0 (auto): OMP_NUM_THREADS if set, else the cores no other process keeps busy, re-checked every 5 s (a second thread gains 30% on an AMX Xeon, nothing on a Zen 4; sharing a core costs up to 10x). Set N for bit-identical reruns"""

    # to be filled in runtime (not flags)
    num_iterations: tyro.conf.Suppress[int] = 0


def validate_args(args: Args) -> None:
    """Exit with one clear line (no traceback) on impossible settings, before anything is written."""
    check_run_args(args)
    check_replay_args(args)
    check_positive(args, "policy_lr", "q_lr", "updates_per_step", "policy_frequency", "target_network_frequency")
    check_positive(args, "max_episode_steps")
    if not 0 < args.alpha <= 1000:  # NaN fails both; 1e300 would be inf in float32
        sys.exit(f"error: --alpha must be in (0, 1000] (the entropy coefficient without --autotune), got {args.alpha}")
    check_continuous_envpool_id(args.env_id, num_envs=args.num_envs)
    spec = envpool.make_spec(args.env_id)
    row = ReplayBuffer.row_width(spec.observation_space.shape[0], spec.action_space.shape[0])
    check_memory(args.buffer_size * row * 4, "the replay buffer", "--buffer-size")


def make_env(env_id: str, num_envs: int, seed: int, max_episode_steps: int | None = None):
    """EnvPool MuJoCo (or classic-control Pendulum), gymnasium API, no wrappers. `info["elapsed_step"]` counts the
    steps of the current episode."""
    # The limit is exact: a termination on the limit step stays a termination (EnvPool alone says truncated).
    return make_envpool(env_id, max_episode_steps, env_type="gymnasium", num_envs=num_envs, seed=seed)


class ReplayBuffer:
    """Transitions (obs, action, reward, next_obs, done) as rows of one float32 table on the training device: a
    batch is one gather with one index array, and on a GPU it never crosses the bus.

    Autoreset: the caller adds only real transitions. The step after a boundary is stale (its action was ignored,
    its reward is 0, it leads to the reset observation) and is never stored. A termination stores done = 1; a
    truncation stores done = 0 with next_obs the episode's real last observation (next-step mode returns it on
    the boundary step), so the target bootstraps from it."""

    def __init__(self, buffer_size: int, obs_dim: int, action_dim: int, device: torch.device):
        self.split = (obs_dim, action_dim, 1, obs_dim, 1)  # obs | action | reward | next_obs | done
        self.rows = torch.zeros((buffer_size, self.row_width(obs_dim, action_dim)), device=device)
        self.capacity, self.pos, self.size = buffer_size, 0, 0
        self.env_steps = 0  # env steps seen, over all envs, stale ones included

    @staticmethod
    def row_width(obs_dim: int, action_dim: int) -> int:
        return 2 * obs_dim + action_dim + 2

    def add(self, obs, actions, rewards, next_obs, terminations, stale, env_steps: int) -> None:
        """One step of every env (numpy arrays, one row per env); the envs whose step is `stale` are left out."""
        keep = ~stale
        rows = np.concatenate([obs[keep], actions[keep], rewards[keep, None], next_obs[keep], terminations[keep, None]], 1)
        index = (self.pos + np.arange(len(rows))) % self.capacity
        self.rows[torch.from_numpy(index).to(self.rows.device)] = torch.from_numpy(rows).to(self.rows)
        self.pos, self.size = (self.pos + len(rows)) % self.capacity, min(self.size + len(rows), self.capacity)
        self.env_steps += env_steps

    def sample(self, batch_size: int) -> tuple[torch.Tensor, ...]:
        """(obs, actions, rewards, next_obs, dones) of a uniform batch, drawn with torch's RNG on the device."""
        index = torch.randint(0, self.size, (batch_size,), device=self.rows.device)
        obs, actions, rewards, next_obs, dones = self.rows[index].split(self.split, dim=1)
        return obs, actions, rewards.squeeze(1), next_obs, dones.squeeze(1)

    def state_dict(self) -> dict:
        """The filled rows only, copied out: a view of them would pickle the whole capacity."""
        return dict(rows=self.rows[: self.size].to("cpu", copy=True), pos=self.pos, env_steps=self.env_steps)

    def load_state_dict(self, state: dict) -> None:
        """An empty dict (a checkpoint saved with --no-checkpoint-buffer) leaves the buffer empty. ValueError if a
        saved buffer does not fit this one."""
        if not state:
            return
        rows = state["rows"]
        if rows.dim() != 2 or rows.shape[1] != self.rows.shape[1] or rows.shape[0] > self.capacity:
            raise ValueError(f"saved rows {list(rows.shape)}, this buffer holds {list(self.rows.shape)}")
        self.rows[: len(rows)] = rows.to(self.rows)
        self.size, self.pos, self.env_steps = len(rows), int(state["pos"]) % self.capacity, int(state["env_steps"])


LOG_STD_MAX = 2
LOG_STD_MIN = -5


class Actor(nn.Module):
    """256-256 ReLU trunk, Gaussian mean and log-std heads; the sample is squashed by tanh into the action bounds."""

    def __init__(self, obs_dim: int, action_low: np.ndarray, action_high: np.ndarray, bf16: bool = False):
        super().__init__()
        action_dim = len(action_low)
        self.trunk = nn.Sequential(nn.Linear(obs_dim, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU())
        self.fc_mean = nn.Linear(256, action_dim)
        self.fc_logstd = nn.Linear(256, action_dim)
        low, high = (torch.as_tensor(x, dtype=torch.float32) for x in (action_low, action_high))
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_bias", (high + low) / 2.0)
        self.bf16 = bf16

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.autocast(obs.device.type, dtype=torch.bfloat16, enabled=self.bf16 and obs.shape[0] > 16):
            hidden = self.trunk(obs)
        hidden = hidden.float()  # the heads and everything after them run in fp32
        log_std = torch.tanh(self.fc_logstd(hidden))  # bounded to [LOG_STD_MIN, LOG_STD_MAX], smoothly
        return self.fc_mean(hidden), LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)

    def get_action(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(sampled action, its log-probability, the deterministic action tanh(mean)), actions in the env's bounds.
        log pi(a) = log N(u) - sum log(scale * (1 - tanh(u)^2)): the change of variables of a = scale * tanh(u) + bias."""
        mean, log_std = self(obs)
        normal = torch.distributions.Normal(mean, log_std.exp(), validate_args=False)
        x_t = normal.rsample()  # reparameterisation: the gradient flows through the sample
        y_t = torch.tanh(x_t)
        log_prob = normal.log_prob(x_t) - torch.log(self.action_scale * (1 - y_t.pow(2)) + 1e-6)
        action = y_t * self.action_scale + self.action_bias
        return action, log_prob.sum(-1), torch.tanh(mean) * self.action_scale + self.action_bias


class QNetworks(nn.Module):
    """The Q-networks (256-256 ReLU on [obs, action]; SAC and TD3 have two, DDPG one) as one batched network: each layer's weights are
    stacked, shape (2, in, out), and one batched matmul runs both critics. Initialised as two nn.Linear stacks
    (uniform in +-1/sqrt(fan_in)). Returns (num_critics, B): Q1, Q2."""

    def __init__(self, obs_dim: int, action_dim: int, bf16: bool = False, num_critics: int = 2):
        super().__init__()
        sizes = [obs_dim + action_dim, 256, 256, 1]
        self.weights, self.biases = nn.ParameterList(), nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            bound = 1 / math.sqrt(fan_in)
            self.weights.append(nn.Parameter(torch.empty(num_critics, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(num_critics, 1, fan_out).uniform_(-bound, bound)))
        self.num_critics, self.bf16 = num_critics, bf16

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, frozen: bool = False) -> torch.Tensor:
        """`frozen`: no gradient reaches the weights (the actor's loss needs dQ/da only)."""
        layers = list(zip(self.weights, self.biases))
        if frozen:
            layers = [(w.detach(), b.detach()) for w, b in layers]
        x = torch.cat([obs, actions], dim=-1).expand(self.num_critics, -1, -1)
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            for w, b in layers[:-1]:
                x = F.relu(torch.baddbmm(b, x, w))
        w, b = layers[-1]  # the Q-value layer in fp32
        return torch.baddbmm(b, x.float(), w).squeeze(-1)


class EntropyCoefficient(nn.Module):
    """alpha = exp(log_alpha): learnt with --autotune (from alpha = 1, as CleanRL), else fixed at --alpha."""

    def __init__(self, alpha: float, autotune: bool):
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor(0.0 if autotune else math.log(alpha)), requires_grad=autotune)

    def forward(self) -> torch.Tensor:
        return self.log_alpha.exp()


def evaluation_player(
    saved: dict, *, num_envs: int, seed: int, device: torch.device, greedy: bool, epsilon: float, render: bool
) -> Player:
    """How `cleanrl_utils.evaluate` plays a model this script saved (and films it during training): the
    deterministic policy (tanh of the Gaussian mean, scaled into the bounds), whatever `greedy` says; `epsilon` is DQN's, unused. EnvPool's MuJoCo
    cannot render headless, so videos are extra episodes in Gymnasium's env of the same id (Pendulum too)."""
    train_args = saved["args"]
    envs = make_env(train_args["env_id"], num_envs, seed, train_args["max_episode_steps"])
    action_space = envs.single_action_space
    actor = Actor(envs.single_observation_space.shape[0], action_space.low, action_space.high)
    actor.load_state_dict(saved["model_state_dict"])
    actor.to(device).eval()

    @torch.no_grad()
    def act(obs: np.ndarray) -> np.ndarray:
        action = actor.get_action(torch.as_tensor(obs, dtype=torch.float32, device=device))[2]
        return np.clip(action.cpu().numpy(), action_space.low, action_space.high)

    return Player(envs=envs, act=act, film_env_id=train_args["env_id"])


def critic_loss(actor: Actor, critic: QNetworks, target_critic: QNetworks, batch, alpha: torch.Tensor, gamma: float):
    """Soft TD error of both critics on one batch: y = r + gamma * (1 - done) * (min_i Q'_i(s', a') - alpha log pi(a'|s')),
    a' ~ pi(s'). done = 1 only at a termination: a truncated transition bootstraps from its real last observation.
    Returns (qf1_loss + qf2_loss, statistics)."""
    obs, actions, rewards, next_obs, dones = batch
    with torch.no_grad():
        next_actions, next_log_pi, _ = actor.get_action(next_obs)
        min_q_next = target_critic(next_obs, next_actions).min(dim=0).values - alpha * next_log_pi
        target = rewards + gamma * (1 - dones) * min_q_next
    q_values = critic(obs, actions)
    qf1_loss, qf2_loss = F.mse_loss(q_values[0], target), F.mse_loss(q_values[1], target)
    stats = dict(qf1_loss=qf1_loss, qf2_loss=qf2_loss, qf1_values=q_values[0].mean(), qf2_values=q_values[1].mean())
    return qf1_loss + qf2_loss, {name: value.detach() for name, value in stats.items()}


def actor_loss(actor: Actor, critic: QNetworks, entropy: EntropyCoefficient, obs: torch.Tensor, target_entropy: float):
    """The actor's loss E[alpha log pi(a|s) - min_i Q_i(s, a)], a ~ pi(s) reparameterised, and the entropy
    coefficient's loss -alpha (log pi + target entropy). The two share one sample and one backward pass: neither
    loss has a gradient in the other's parameters (alpha and log pi are detached where they cross)."""
    actions, log_pi, _ = actor.get_action(obs)
    alpha = entropy()
    min_q = critic(obs, actions, frozen=True).min(dim=0).values
    policy_loss = (alpha.detach() * log_pi - min_q).mean()
    alpha_loss = (-alpha * (log_pi.detach() + target_entropy)).mean()
    return policy_loss, alpha_loss


if __name__ == "__main__":
    args = tyro.cli(Args)
    keys = dict(critic_state_dict=dict, target_critic_state_dict=dict, entropy_state_dict=dict)
    keys |= dict(q_optimizer_state_dict=dict, replay_buffer=dict, num_updates=int)  # besides the actor, its optimiser
    checkpoint = load_torch(args.resume, SCRIPT, keys) if args.resume else None
    if checkpoint:  # the saved args, with the flags of this command that may change on resume applied
        args = resume_args(Args, checkpoint, args.resume, MAY_CHANGE_ON_RESUME + ("checkpoint_buffer", "compile"))
    validate_args(args)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    threads = choose_speed_levers(args, this_machine(device), checkpoint)  # prints them; args keep the resolved values
    args.num_iterations = args.total_timesteps // args.num_envs  # one iteration = one vector env step
    say_steps_run(args.total_timesteps, args.num_envs, "one step of each of --num-envs envs")
    run_name, run_dir = run_folder(args, args.resume)  # a resumed run continues in its checkpoint's folder
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic

    # env setup. EnvPool cannot snapshot its episodes: a resumed run plays new ones (new seeds); unfinished ones go unlogged.
    env_seed = resumed_env_seed(args.seed, checkpoint["iteration"] if checkpoint else 0)
    envs = make_env(args.env_id, args.num_envs, env_seed, args.max_episode_steps)
    obs_dim, action_dim = envs.single_observation_space.shape[0], envs.single_action_space.shape[0]
    action_low, action_high = envs.single_action_space.low, envs.single_action_space.high

    actor = Actor(obs_dim, action_low, action_high, bf16=args.precision == "bf16").to(device)
    critic = QNetworks(obs_dim, action_dim, bf16=args.precision == "bf16").to(device)
    target_critic = QNetworks(obs_dim, action_dim, bf16=args.precision == "bf16").to(device)
    target_critic.load_state_dict(critic.state_dict())
    entropy = EntropyCoefficient(args.alpha, args.autotune).to(device)
    target_entropy = -float(action_dim)
    q_optimizer = torch.optim.Adam(critic.parameters(), lr=args.q_lr, fused=args.fused_adam)
    # One optimiser, two parameter groups: Adam is per parameter, so this is CleanRL's two optimisers in one step.
    policy_groups = [dict(params=actor.parameters(), lr=args.policy_lr)]
    policy_groups += [dict(params=entropy.parameters(), lr=args.q_lr)] if args.autotune else []
    policy_optimizer = torch.optim.Adam(policy_groups, fused=args.fused_adam)
    rb = ReplayBuffer(args.buffer_size, obs_dim, action_dim, device)
    start_iteration, global_step = 1, 0
    if checkpoint:  # networks, optimisers, alpha, RNG states and replay buffer (one line if they do not fit)
        extra = dict(critic_state_dict=critic, target_critic_state_dict=target_critic, entropy_state_dict=entropy)
        extra |= dict(q_optimizer_state_dict=q_optimizer, replay_buffer=rb)
        start_iteration, global_step = restore_torch(args.resume, checkpoint, actor, policy_optimizer, args, extra=extra)
        print(f"replay buffer: {rb.size:,} transitions restored" if rb.size else "replay buffer: refilled from empty")
    writer = make_writer(args, run_name, run_dir, checkpoint["global_step"] if checkpoint else None)  # after every check

    def model_file(path: str) -> str:
        """The `.cleanrl_model` format `cleanrl_utils.evaluate` reads: script name, args, the actor's weights."""
        save_torch(path, {**WRITTEN_BY, "model_state_dict": actor.state_dict(), "args": vars(args)})
        return path

    def training_state(iteration: int) -> dict:
        counters = WRITTEN_BY | dict(run_name=run_name, args=vars(args), iteration=iteration, global_step=global_step)
        counters |= dict(num_updates=num_updates)  # the delayed schedules go on where they were
        weights = dict(model_state_dict=actor.state_dict(), critic_state_dict=critic.state_dict())
        weights |= dict(target_critic_state_dict=target_critic.state_dict(), entropy_state_dict=entropy.state_dict())
        weights |= dict(optimizer_state_dict=policy_optimizer.state_dict(), q_optimizer_state_dict=q_optimizer.state_dict())
        replay = dict(replay_buffer=rb.state_dict() if args.checkpoint_buffer else {})
        return counters | weights | {"rng": torch_rng_states()} | replay

    losses = {"critic": torch.compile(critic_loss), "actor": torch.compile(actor_loss)} if args.compile else {}
    critic_loss_fn, actor_loss_fn = losses.get("critic", critic_loss), losses.get("actor", actor_loss)

    episode_returns = np.zeros(args.num_envs, dtype=np.float64)
    recent_returns: list[float] = []
    progress = ProgressLine(global_step, args.num_iterations * args.num_envs)  # and SPS from here
    # a diverged run stops with one line naming its last good checkpoint and the flag to lower
    stop_if_diverged = functools.partial(
        exit_if_diverged,
        checkpoint_path=checkpoint_path,
        resumed_from=args.resume,
        writer=writer,
        progress=progress,
        flag="--q-lr or --policy-lr",
    )
    videos = VideoJobs(run_dir, model_file)
    stop = StopAfterIteration()  # from here on Ctrl-C/SIGTERM finish the iteration, checkpoint, exit 0
    obs, _ = envs.reset()
    # The step before the first one is not a boundary: the first transition of every env is real.
    prev_episode_over = np.zeros(args.num_envs, dtype=bool)
    num_updates = checkpoint["num_updates"] if checkpoint else 0  # critic updates: the actor and target schedules count them
    stats = policy_loss = alpha_loss = None

    for iteration in range(start_iteration, args.num_iterations + 1):
        # ALGO LOGIC: uniform random actions (numpy's global RNG, saved in checkpoints) until learning starts
        if rb.env_steps < args.learning_starts:
            actions = np.random.uniform(action_low, action_high, (args.num_envs, action_dim)).astype(np.float32)
        else:
            with torch.no_grad():  # tanh keeps the sample inside the bounds: the env executes what the buffer stores
                actions, _, _ = actor.get_action(torch.as_tensor(obs, dtype=torch.float32, device=device))
            actions = actions.cpu().numpy()
        global_step += args.num_envs
        # a policy that diverged since the last check stops here, before the env runs a NaN action
        stop_if_diverged(bool(np.isfinite(actions).all()), iteration=iteration, global_step=global_step)

        # TRY NOT TO MODIFY: execute the game and log data. On a stale step (the one after a boundary) EnvPool ignores
        # the action and returns the reset observation with reward 0: that transition is not stored.
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        rb.add(obs, actions, rewards, next_obs, terminations, prev_episode_over, args.num_envs)
        prev_episode_over = terminations | truncations
        obs = next_obs

        # An episode's length is EnvPool's elapsed_step, which does not count stale steps.
        episode_returns += rewards
        for i in np.flatnonzero(prev_episode_over):
            writer.add_scalar("charts/episodic_return", episode_returns[i], global_step)
            writer.add_scalar("charts/episodic_length", infos["elapsed_step"][i], global_step)
            recent_returns.append(float(episode_returns[i]))
        episode_returns[prev_episode_over] = 0.0

        # ALGO LOGIC: training. `rb.env_steps` equals global_step, except in a run resumed without its buffer, which
        # refills --learning-starts steps first. Updates per env step do not depend on --num-envs.
        if rb.env_steps > args.learning_starts:
            for _ in range(args.num_envs * args.updates_per_step):
                batch = rb.sample(args.batch_size)
                loss, stats = critic_loss_fn(actor, critic, target_critic, batch, entropy().detach(), args.gamma)
                q_optimizer.zero_grad(set_to_none=True)
                loss.backward()
                q_optimizer.step()
                num_updates += 1

                if num_updates % args.policy_frequency == 0:  # TD3-style delay, compensated: N actor updates every N
                    for _ in range(args.policy_frequency):
                        policy_loss, alpha_loss = actor_loss_fn(actor, critic, entropy, batch[0], target_entropy)
                        policy_optimizer.zero_grad(set_to_none=True)
                        (policy_loss + alpha_loss if args.autotune else policy_loss).backward()
                        policy_optimizer.step()

                if num_updates % args.target_network_frequency == 0:  # Polyak averaging, one fused call
                    with torch.no_grad():
                        torch._foreach_lerp_(list(target_critic.parameters()), list(critic.parameters()), args.tau)

        # Read the stop flag once: a signal landing between two reads must not skip the save.
        stopping = stop.requested
        last = iteration == args.num_iterations or stopping
        saving = checkpoint_due(iteration, args.num_iterations, args.checkpoint_every, stopping)
        sps = progress.sps(global_step)
        logging = updates_due(global_step, args.num_envs, 1000)  # every 1,000 steps: no per-step host sync
        if logging and stats is not None:
            for name, value in stats.items():
                writer.add_scalar(f"losses/{name}", value.item(), global_step)
            writer.add_scalar("losses/qf_loss", (stats["qf1_loss"] + stats["qf2_loss"]).item() / 2.0, global_step)
            writer.add_scalar("losses/alpha", entropy().item(), global_step)
        if logging and policy_loss is not None:
            writer.add_scalar("losses/actor_loss", policy_loss.item(), global_step)
            if args.autotune:
                writer.add_scalar("losses/alpha_loss", alpha_loss.item(), global_step)
        if logging:
            writer.add_scalar("charts/SPS", sps, global_step)
            writer.add_scalar("charts/torch_threads", threads.count, global_step)
        threads.update()  # each iteration, not only when logging: 1,000 steps on crowded cores can take minutes
        if logging or saving:  # a diverged run must never be saved
            nets = nn.ModuleList([actor, critic, entropy])
            finite = torch_all_finite(nets, None if stats is None else stats["qf1_loss"] + stats["qf2_loss"])
            stop_if_diverged(finite, iteration=iteration, global_step=global_step)
        if saving:
            save_torch(checkpoint_path, training_state(iteration), progress, keep=args.keep_checkpoints)
        if args.capture_video and (iteration % args.video_every == 0 or last):
            videos.film(iteration, final=last)  # at most one evaluator at a time
        progress.show(global_step, sps, recent_returns, final=last)
        if stopping and iteration < args.num_iterations:  # in the last one, record_end_step says it finished
            print(stopped_line(iteration, checkpoint_path))
            break

    if args.save_model:
        print(f"model saved to {model_file(os.path.join(run_dir, f'{args.exp_name}.cleanrl_model'))}")
    videos.finish()
    envs.close()
    record_end_step(writer, global_step)
    writer.close()

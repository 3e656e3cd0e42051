# RPO (Robust Policy Optimization) for MuJoCo through EnvPool, next-step autoreset done right: PPO whose update
# perturbs the Gaussian mean with uniform noise in [-rpo_alpha, rpo_alpha] (Rahman and Xue, 2022, "Robust Policy
# Optimization in Deep Reinforcement Learning"), which keeps the policy's entropy from collapsing. The rest is
# ppo_continuous_action_envpool.py. Hyperparameters: CleanRL's MuJoCo table (EnvPool paper, appendix F, Table 5).
# Autoreset semantics: "The Value of Autoresetting" (Gymnasium), next-step mode.
# EnvPool has no wrappers, so observation normalisation and reward scaling are written here, and
# their state is saved with the weights: a saved model evaluates as it trained.
from cleanrl_utils.stop import StopAfterIteration, exit_at_once_on_signals, stopped_line

if __name__ == "__main__":
    exit_at_once_on_signals(envpool_mujoco=True)  # Ctrl-C while the libraries below load: one line, no traceback

import os
import random
import sys
from dataclasses import dataclass

import envpool
import numpy as np
import torch
import torch.nn as nn
import tyro
from torch.distributions.normal import Normal

from cleanrl_utils.checkpoint import load_torch, restore_torch, resume_args, resumed_env_seed, save_torch, torch_rng_states
from cleanrl_utils.checks import (
    check_envpool_id,
    check_log_std_init,
    check_memory,
    check_positive,
    check_rollout_shape,
    check_run_args,
)
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
from cleanrl_utils.steps import say_steps_run
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
    """whether to save the model weights, normaliser state and args to `runs/{run_name}/{exp_name}.cleanrl_model`"""
    log_dir: str = "runs"
    """the folder the run's tensorboard events (and saved model) go under"""
    checkpoint_every: int = 0
    """save a resumable checkpoint to `runs/{run_name}/checkpoint.pt` every N iterations (0: only at Ctrl-C and at the end)"""
    keep_checkpoints: bool = False
    """keep every checkpoint as `checkpoint-{global_step}.pt` too, to evaluate the run's best point afterwards:
    `python -m cleanrl_utils.evaluate --model-path runs/{run_name} --greedy`"""
    resume: str | None = None
    """continue from a checkpoint: same run folder, args, step counter, lr schedule, optimiser, normaliser and RNG states"""
    capture_video: bool = False
    """film an evaluation episode to `runs/{run_name}/videos/` every --video-every iterations and at the end, in a separate process (the training envs never render)"""
    video_every: int = 100
    """iterations between evaluation videos with --capture-video"""

    # Algorithm specific arguments (EnvPool paper, Table 5)
    env_id: str = "HalfCheetah-v4"
    """the id of the environment (any EnvPool MuJoCo id, e.g. HalfCheetah-v4, Hopper-v4, Walker2d-v4, Ant-v4, Humanoid-v5)"""
    total_timesteps: int = 10_000_000
    """total timesteps of the experiments (agent steps, counting every env)"""
    learning_rate: float = 0.00295
    """the learning rate of the optimizer"""
    num_envs: int = 64
    """the number of parallel game environments"""
    num_steps: int = 64
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 4
    """the number of mini-batches"""
    update_epochs: int = 2
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization (per minibatch, over valid rows only)"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = False
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 0.0
    """coefficient of the entropy"""
    vf_coef: float = 1.3
    """coefficient of the value function"""
    max_grad_norm: float = 3.5
    """the maximum norm for the gradient clipping"""
    target_kl: float | None = None
    """the target KL divergence threshold (early stop of the update epochs)"""
    rpo_alpha: float = 0.5
    """the update draws each action mean's perturbation uniformly from [-rpo_alpha, rpo_alpha] (0: PPO)"""
    max_episode_steps: int | None = None
    """time limit per episode in agent steps (default: the env's own, 1000 for the locomotion tasks); reaching it truncates"""
    actor_logstd_init: float = 0.0
    """the policy's initial log-std, one per action dimension (0: std 1, as CleanRL; Tianshou's MuJoCo PPO starts at -0.5, std 0.61)"""
    obs_clip: float = 10.0
    """normalised observations are clipped to [-obs_clip, obs_clip]"""
    reward_clip: float = 10.0
    """scaled rewards are clipped to [-reward_clip, reward_clip]"""

    # Levers from the rl_games column of the EnvPool paper (off by default: the defaults are Table 5)
    norm_value: bool = False
    """the critic predicts returns standardised by their running mean/std (values are de-standardised for GAE)"""
    kl_adaptive_lr: float | None = None
    """target KL of an adaptive learning rate replacing --anneal-lr: after each epoch, lr / 1.5 if approx KL > 2x target, lr x 1.5 if < target / 2"""

    # Speed lever: `--torch-threads`
    torch_threads: int = 1
    """torch intra-op threads on CPU (0: auto, OMP_NUM_THREADS if set, else one per core); the 64-unit MLPs gain nothing from more, and EnvPool's threads want the cores"""

    # to be filled in runtime (not flags)
    batch_size: tyro.conf.Suppress[int] = 0
    minibatch_size: tyro.conf.Suppress[int] = 0
    num_iterations: tyro.conf.Suppress[int] = 0


def validate_args(args: Args) -> None:
    """Exit with one clear line (no traceback) on impossible settings, before anything is written."""
    check_run_args(args)
    if not 0 <= args.rpo_alpha <= 10:  # NaN fails both; past 10 the noise swamps any mean (actions live in [-1, 1])
        sys.exit(f"error: --rpo-alpha must be in [0, 10] (the half-width of the mean's perturbation), got {args.rpo_alpha}")
    check_rollout_shape(args.num_envs, args.num_steps, args.num_minibatches, args.update_epochs, args.total_timesteps)
    check_positive(args, "max_episode_steps", "obs_clip", "reward_clip", "kl_adaptive_lr")
    check_log_std_init(args.actor_logstd_init, "--actor-logstd-init")
    check_envpool_id(args.env_id, "envpool.mujoco.gym", num_envs=args.num_envs)
    spec = envpool.make_spec(args.env_id)
    row_bytes = 4 * (int(np.prod(spec.observation_space.shape)) + int(np.prod(spec.action_space.shape)))
    check_memory(args.num_steps * args.num_envs * (row_bytes + 40), "the rollout storage", "--num-envs or --num-steps")


def make_env(env_id: str, num_envs: int, seed: int, max_episode_steps: int | None = None):
    """EnvPool MuJoCo (gymnasium API). No wrappers exist in EnvPool: normalisation is done by the
    caller (RunningMeanStd below). `info["elapsed_step"]` counts the steps of the current episode."""
    # The limit is exact: a termination on the limit step stays a termination (EnvPool alone says truncated).
    return make_envpool(env_id, max_episode_steps, env_type="gymnasium", num_envs=num_envs, seed=seed)


class RunningMeanStd:
    """Mean and population variance (ddof=0) of everything passed to `update`, merged batch by batch
    (Chan et al.'s parallel algorithm) in float64. Starts empty (count 0): after any sequence of
    updates, `mean` and `var` equal numpy's over the concatenated stream."""

    def __init__(self, shape: tuple[int, ...] = ()):
        self.mean, self.var, self.count = np.zeros(shape, dtype=np.float64), np.ones(shape, dtype=np.float64), 0.0

    def update(self, batch: np.ndarray) -> None:
        batch = np.asarray(batch, dtype=np.float64).reshape((-1,) + self.mean.shape)
        batch_count = batch.shape[0]
        if batch_count == 0:
            return
        batch_mean, batch_var = batch.mean(axis=0), batch.var(axis=0)
        total = self.count + batch_count
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / total
        self.mean, self.var, self.count = self.mean + delta * batch_count / total, m2 / total, total

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: torch.tensor(np.asarray(getattr(self, name)), dtype=torch.float64) for name in ("mean", "var", "count")}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        mean, var = (np.array(state[name].numpy(), dtype=np.float64) for name in ("mean", "var"))
        if mean.shape != self.mean.shape or var.shape != self.var.shape:
            raise ValueError(f"statistics of shape {mean.shape}, where this run has {self.mean.shape}")
        self.mean, self.var, self.count = mean, var, float(state["count"])


def normalize_obs(obs: np.ndarray, obs_rms: RunningMeanStd, clip: float) -> np.ndarray:
    """(obs - mean) / std, clipped to [-clip, clip], as float32 for the network."""
    return np.clip((obs - obs_rms.mean) / np.sqrt(obs_rms.var + 1e-8), -clip, clip).astype(np.float32)


class RewardScaler:
    """Reward divided by the running std of the discounted return, clipped to [-clip, clip].

    Each env keeps its discounted-return accumulator R <- gamma * R + r, reset to 0 after every boundary (termination
    or truncation). Stale steps (the one after a boundary: EnvPool ignores the action and returns reward 0) do not
    update the statistics: their accumulator would be a meaningless 0 that drags the variance down. Their scaled
    reward is 0 and their row is masked."""

    def __init__(self, num_envs: int, gamma: float, clip: float):
        self.return_rms = RunningMeanStd(())
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.gamma, self.clip = gamma, clip

    def __call__(self, reward: np.ndarray, episode_over: np.ndarray, stale: np.ndarray) -> np.ndarray:
        self.returns = self.returns * self.gamma + reward
        self.return_rms.update(self.returns[~stale])
        scaled = np.clip(reward / np.sqrt(self.return_rms.var + 1e-8), -self.clip, self.clip)
        self.returns[episode_over] = 0.0
        return scaled.astype(np.float32)


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


def mlp(in_dim: int, out_dim: int, out_std: float) -> nn.Sequential:
    """64-64 tanh, orthogonal init (gain sqrt 2), the output layer's gain `out_std`."""
    hidden = [layer_init(nn.Linear(in_dim, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)), nn.Tanh()]
    return nn.Sequential(*hidden, layer_init(nn.Linear(64, out_dim), std=out_std))


class Agent(nn.Module):
    """Separate 64-64 tanh MLPs for the value and the Gaussian mean; state-independent log-std.
    Inputs are normalised observations; sampled actions are unbounded (clipped only in the env)."""

    def __init__(self, obs_dim: int, action_dim: int, rpo_alpha: float = 0.0, logstd_init: float = 0.0):
        super().__init__()
        self.rpo_alpha = rpo_alpha
        self.critic = mlp(obs_dim, 1, out_std=1.0)
        self.actor_mean = mlp(obs_dim, action_dim, out_std=0.01)
        self.actor_logstd = nn.Parameter(torch.full((1, action_dim), float(logstd_init)))

    def get_value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def get_action_and_value(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        action_mean = self.actor_mean(obs)
        if action is not None and self.rpo_alpha > 0:  # the update (acting passes no action): RPO's perturbation
            action_mean = action_mean + torch.empty_like(action_mean).uniform_(-self.rpo_alpha, self.rpo_alpha)
        probs = Normal(action_mean, self.actor_logstd.expand_as(action_mean).exp(), validate_args=False)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action).sum(-1), probs.entropy().sum(-1), self.critic(obs).squeeze(-1)


def evaluation_player(
    saved: dict, *, num_envs: int, seed: int, device: torch.device, greedy: bool, epsilon: float, render: bool
) -> Player:
    """How `cleanrl_utils.evaluate` plays a model this script saved (and films it during training): observations
    normalised with the saved statistics, frozen; actions sampled from the Gaussian (seeded), or its mean with
    `greedy`, clipped to the bounds. EnvPool's MuJoCo cannot render headless, so videos are extra episodes in
    Gymnasium's env of the same id. `epsilon` is DQN's, unused here."""
    train_args = saved["args"]
    envs = make_env(train_args["env_id"], num_envs, seed, train_args["max_episode_steps"])
    obs_shape, action_space = envs.single_observation_space.shape, envs.single_action_space
    agent = Agent(int(np.prod(obs_shape)), int(np.prod(action_space.shape)))
    agent.load_state_dict(saved["model_state_dict"])
    agent.to(device).eval()
    obs_rms = RunningMeanStd(obs_shape)
    obs_rms.load_state_dict(saved["obs_rms"])
    generator = torch.Generator(device=device).manual_seed(seed)

    @torch.no_grad()
    def act(obs: np.ndarray) -> np.ndarray:
        action = agent.actor_mean(torch.as_tensor(normalize_obs(obs, obs_rms, train_args["obs_clip"]), device=device))
        if not greedy:
            action = action + agent.actor_logstd.exp() * torch.randn(action.shape, generator=generator, device=device)
        return np.clip(action.cpu().numpy(), action_space.low, action_space.high)

    return Player(envs=envs, act=act, film_env_id=train_args["env_id"])


def compute_gae(
    values: torch.Tensor,  # (T+1, N): V(obs_t), last row V(obs after the rollout)
    rewards: torch.Tensor,  # (T, N)
    terminations: torch.Tensor,  # (T, N) bool
    truncations: torch.Tensor,  # (T, N) bool
    prev_episode_over: torch.Tensor,  # (N,) bool: the step before row 0 ended an episode
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE for next-step autoreset rollouts. Returns (advantages, valid_mask), both (T, N).

    In next-step mode the observation returned at a boundary step is the last one of the episode, and the step
    after a boundary is stale: the env ignores its action and returns the reset observation. So ("The Value of
    Autoresetting", "How does Autoreset-Mode Affect GAE"):
      - a termination bootstraps 0; a truncation bootstraps V(next obs) = values[t + 1], the value of the
        episode's real last observation (partial-episode bootstrapping);
      - the accumulation stops at every boundary, so nothing flows back across episodes;
      - a stale row is invalid: valid_mask is False there and its advantage is 0.
    A stale row never leaks into a valid one: the row before it is a boundary, which cuts the accumulation. Where
    this differs from the article's listing: valid rows are the *negation* of the previous step's episode_over (the
    listing puts initial_episode_over itself in row 0), the buffers are real zeros, flags come from the arguments.
    """
    num_steps = rewards.shape[0]
    episode_over = terminations | truncations
    bootstrap = (~terminations).to(values.dtype)
    keep_accumulating = (~episode_over).to(values.dtype)
    advantages = torch.zeros_like(rewards, dtype=values.dtype)
    last_gae = torch.zeros_like(values[0])
    for t in reversed(range(num_steps)):
        delta = rewards[t] + gamma * bootstrap[t] * values[t + 1] - values[t]
        last_gae = delta + gamma * gae_lambda * keep_accumulating[t] * last_gae
        advantages[t] = last_gae
    valid_mask = torch.cat([~prev_episode_over[None], ~episode_over[:-1]], dim=0)
    return advantages * valid_mask, valid_mask


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp_min(1)


def ppo_loss(
    agent: Agent, obs, actions, old_logprobs, advantages, returns, old_values, valid, args: Args
) -> tuple[torch.Tensor, dict]:
    """Clipped PPO loss on one minibatch. Stale rows (valid == False) contribute nothing: every
    mean, including the advantage normalisation statistics, runs over valid rows only."""
    mask = valid.to(torch.float32)
    _, newlogprob, entropy, newvalue = agent.get_action_and_value(obs, actions)
    logratio = newlogprob - old_logprobs
    ratio = logratio.exp()

    with torch.no_grad():
        # http://joschu.net/blog/kl-approx.html
        old_approx_kl = masked_mean(-logratio, mask)
        approx_kl = masked_mean((ratio - 1) - logratio, mask)
        clipfrac = masked_mean(((ratio - 1.0).abs() > args.clip_coef).float(), mask)

    if args.norm_adv:
        count = mask.sum().clamp_min(2)
        mean = masked_mean(advantages, mask)
        std = (((advantages - mean) ** 2 * mask).sum() / (count - 1)).sqrt()
        advantages = (advantages - mean) / (std + 1e-8)

    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
    pg_loss = masked_mean(torch.max(pg_loss1, pg_loss2), mask)

    if args.clip_vloss:
        v_loss_unclipped = (newvalue - returns) ** 2
        v_clipped = old_values + torch.clamp(newvalue - old_values, -args.clip_coef, args.clip_coef)
        v_loss_clipped = (v_clipped - returns) ** 2
        v_loss = 0.5 * masked_mean(torch.max(v_loss_unclipped, v_loss_clipped), mask)
    else:
        v_loss = 0.5 * masked_mean((newvalue - returns) ** 2, mask)

    entropy_loss = masked_mean(entropy, mask)
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
    stats = dict(policy_loss=pg_loss, value_loss=v_loss, entropy=entropy_loss, old_approx_kl=old_approx_kl)
    stats |= dict(approx_kl=approx_kl, clipfrac=clipfrac)
    return loss, {name: value.detach() for name, value in stats.items()}  # logged, not differentiated


if __name__ == "__main__":
    args = tyro.cli(Args)
    keys = dict(obs_rms=dict, return_rms=dict, value_rms=dict, learning_rate=float)  # besides weights, optimiser, counters
    checkpoint = load_torch(args.resume, SCRIPT, keys) if args.resume else None
    if checkpoint:  # the saved args, with the flags of this command that may change on resume applied
        args = resume_args(Args, checkpoint, args.resume)
    validate_args(args)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    threads = choose_speed_levers(args, this_machine(device), checkpoint)  # prints them; args keep the resolved values
    args.batch_size = int(args.num_envs * args.num_steps)
    args.minibatch_size = int(args.batch_size // args.num_minibatches)
    args.num_iterations = args.total_timesteps // args.batch_size
    say_steps_run(args.total_timesteps, args.batch_size, "--num-envs x --num-steps")
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
    obs_shape, action_shape = envs.single_observation_space.shape, envs.single_action_space.shape
    action_low, action_high = envs.single_action_space.low.astype(np.float32), envs.single_action_space.high.astype(np.float32)

    agent = Agent(
        int(np.prod(obs_shape)), int(np.prod(action_shape)), rpo_alpha=args.rpo_alpha, logstd_init=args.actor_logstd_init
    ).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    # Normalisation, update-then-normalise: every observation EnvPool returns (reset, regular, an episode's last one,
    # the reset one of a stale step) enters the statistics once, on arrival, and is then normalised with the updated
    # statistics and stored normalised. So an episode's last observation, stored on the stale row, is normalised like
    # every row, and V(stale row) is the truncation bootstrap computed on exactly that normalised input.
    obs_rms = RunningMeanStd(obs_shape)
    reward_scaler = RewardScaler(args.num_envs, args.gamma, args.reward_clip)
    # --norm-value: value = critic output * value_std + value_mean, statistics of the valid returns.
    value_rms = RunningMeanStd(())
    value_mean, value_std = 0.0, 1.0
    normalisers = {"obs_rms": obs_rms, "return_rms": reward_scaler.return_rms, "value_rms": value_rms}
    start_iteration, global_step = 1, 0
    if checkpoint:  # weights, Adam, RNG and normaliser states (one line if they do not fit); prints where the run resumes
        # The running statistics carry on; the reward scaler's per-env discounted-return accumulators restart at 0, like
        # the envs they follow.
        start_iteration, global_step = restore_torch(args.resume, checkpoint, agent, optimizer, args, extra=normalisers)
        if args.norm_value:
            value_mean, value_std = float(value_rms.mean), float(np.sqrt(value_rms.var + 1e-8))
        # --kl-adaptive-lr's adapted rate is state, not a schedule: it continues unless this command passes a different
        # --learning-rate (a rescue), which then applies, as it does without --kl-adaptive-lr.
        if args.kl_adaptive_lr is not None and args.learning_rate == checkpoint["args"]["learning_rate"]:
            optimizer.param_groups[0]["lr"] = checkpoint["learning_rate"]
    writer = make_writer(args, run_name, run_dir, checkpoint["global_step"] if checkpoint else None)  # after every check

    def model_file(path: str) -> str:
        """The `.cleanrl_model` format `cleanrl_utils.evaluate` reads: script name, args, weights and normaliser statistics."""
        statistics = {name: rms.state_dict() for name, rms in normalisers.items()}
        save_torch(path, {**WRITTEN_BY, "model_state_dict": agent.state_dict(), "args": vars(args)} | statistics)
        return path

    def training_state(iteration: int) -> dict:
        counters = WRITTEN_BY | dict(run_name=run_name, args=vars(args), iteration=iteration, global_step=global_step)
        weights = dict(model_state_dict=agent.state_dict(), optimizer_state_dict=optimizer.state_dict())
        statistics = {name: rms.state_dict() for name, rms in normalisers.items()}
        adapted = {"learning_rate": optimizer.param_groups[0]["lr"]}  # restored on resume with --kl-adaptive-lr
        return counters | weights | {"rng": torch_rng_states()} | statistics | adapted

    # ALGO Logic: Storage setup
    obs = torch.zeros((args.num_steps, args.num_envs) + obs_shape, device=device)
    actions = torch.zeros((args.num_steps, args.num_envs) + action_shape, device=device)
    logprobs = torch.zeros((args.num_steps, args.num_envs), device=device)
    rewards = torch.zeros((args.num_steps, args.num_envs), device=device)
    terminations = torch.zeros((args.num_steps, args.num_envs), dtype=torch.bool, device=device)
    truncations = torch.zeros((args.num_steps, args.num_envs), dtype=torch.bool, device=device)
    values = torch.zeros((args.num_steps + 1, args.num_envs), device=device)

    # Episode statistics in raw (unscaled) reward units.
    episode_returns = np.zeros(args.num_envs, dtype=np.float64)
    recent_returns: list[float] = []

    progress = ProgressLine(global_step, args.num_iterations * args.batch_size)  # and SPS from here
    videos = VideoJobs(run_dir, model_file)
    stop = StopAfterIteration()  # from here on Ctrl-C/SIGTERM finish the iteration, checkpoint, exit 0
    next_obs_np, _ = envs.reset()
    obs_rms.update(next_obs_np)
    next_obs = torch.from_numpy(normalize_obs(next_obs_np, obs_rms, args.obs_clip)).to(device)
    # The step before the first one is not a boundary: row 0 of the first rollout is valid.
    prev_episode_over = torch.zeros(args.num_envs, dtype=torch.bool, device=device)
    next_stale = np.zeros(args.num_envs, dtype=bool)

    for iteration in range(start_iteration, args.num_iterations + 1):
        if args.anneal_lr and args.kl_adaptive_lr is None:  # linearly, from --learning-rate towards 0 after the last iteration
            optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / args.num_iterations) * args.learning_rate

        for step in range(0, args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs

            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value * value_std + value_mean
            actions[step] = action
            logprobs[step] = logprob

            # TRY NOT TO MODIFY: execute the game and log data. On a stale step (the one after a boundary)
            # EnvPool ignores the action and returns the reset observation with reward 0; compute_gae masks that row.
            # The env gets the action clipped to its bounds; the buffer keeps the sample whose log-prob was stored.
            next_obs_np, reward, term, trunc, info = envs.step(np.clip(action.cpu().numpy(), action_low, action_high))
            episode_over = term | trunc
            stale, next_stale = next_stale, episode_over  # stale if the previous step ended an episode (reward 0)
            rewards[step] = torch.from_numpy(reward_scaler(reward, episode_over, stale)).to(device)
            terminations[step] = torch.from_numpy(term).to(device)
            truncations[step] = torch.from_numpy(trunc).to(device)
            obs_rms.update(next_obs_np)
            next_obs = torch.from_numpy(normalize_obs(next_obs_np, obs_rms, args.obs_clip)).to(device)

            # An episode's length is EnvPool's elapsed_step, which does not count stale steps.
            episode_returns += reward
            for i in np.flatnonzero(episode_over):
                writer.add_scalar("charts/episodic_return", episode_returns[i], global_step)
                writer.add_scalar("charts/episodic_length", info["elapsed_step"][i], global_step)
                recent_returns.append(float(episode_returns[i]))
            episode_returns[episode_over] = 0.0

        # bootstrap value and GAE (see compute_gae for the autoreset rules)
        with torch.no_grad():
            values[args.num_steps] = agent.get_value(next_obs) * value_std + value_mean
            advantages, valid_mask = compute_gae(
                values, rewards, terminations, truncations, prev_episode_over, args.gamma, args.gae_lambda
            )
            prev_episode_over = terminations[-1] | truncations[-1]  # carried into the next rollout's row 0
            returns = advantages + values[:-1]
            if args.norm_value:
                value_rms.update(returns[valid_mask].cpu().numpy())
                value_mean, value_std = float(value_rms.mean), float(np.sqrt(value_rms.var + 1e-8))

        # flatten the batch, one named field per argument of the loss; returns and old values in the critic's output
        # space, where the value loss works (identity without --norm-value)
        critic_returns, critic_values = (returns - value_mean) / value_std, (values[:-1] - value_mean) / value_std
        rollout = dict(obs=obs, actions=actions, old_logprobs=logprobs, advantages=advantages, returns=critic_returns)
        rollout |= dict(old_values=critic_values, valid=valid_mask)
        batch = {name: x.reshape((args.batch_size,) + x.shape[2:]) for name, x in rollout.items()}

        # Optimizing the policy and value network
        clipfracs = []
        for epoch in range(args.update_epochs):
            epoch_kls = []
            b_inds = torch.randperm(args.batch_size, device=device)
            for start in range(0, args.batch_size, args.minibatch_size):
                mb_inds = b_inds[start : start + args.minibatch_size]
                loss, stats = ppo_loss(agent, **{name: x[mb_inds] for name, x in batch.items()}, args=args)
                clipfracs.append(stats["clipfrac"])
                epoch_kls.append(stats["approx_kl"])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

            if args.kl_adaptive_lr is not None:  # rl_games' rule, on the epoch's mean approx KL
                epoch_kl, lr = torch.stack(epoch_kls).mean().item(), optimizer.param_groups[0]["lr"]
                if epoch_kl > 2.0 * args.kl_adaptive_lr:
                    optimizer.param_groups[0]["lr"] = max(lr / 1.5, 1e-6)
                elif epoch_kl < 0.5 * args.kl_adaptive_lr:
                    optimizer.param_groups[0]["lr"] = min(lr * 1.5, 1e-2)
            if args.target_kl is not None and stats["approx_kl"] > args.target_kl:
                break

        valid_values, valid_returns = values[:-1][valid_mask], returns[valid_mask]  # raw units
        var_y = valid_returns.var() if len(valid_returns) > 1 else torch.tensor(0.0)  # one row: no variance, no warning
        explained_var = (1 - (valid_returns - valid_values).var() / var_y).item() if var_y > 0 else float("nan")

        sps = progress.sps(global_step)
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        for name in ("value_loss", "policy_loss", "entropy", "old_approx_kl", "approx_kl"):  # the last minibatch's
            writer.add_scalar(f"losses/{name}", stats[name].item(), global_step)
        writer.add_scalar("losses/clipfrac", torch.stack(clipfracs).mean().item(), global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        writer.add_scalar("charts/torch_threads", threads.count, global_step)
        threads.update()  # fewer threads while another process computes on these cores

        # Read the stop flag once: a signal landing between two reads must not skip the save.
        stopping = stop.requested
        finite = torch_all_finite(agent, loss)
        where = dict(iteration=iteration, global_step=global_step, checkpoint_path=checkpoint_path, writer=writer)
        exit_if_diverged(finite, **where, resumed_from=args.resume, progress=progress)
        if checkpoint_due(iteration, args.num_iterations, args.checkpoint_every, stopping):
            save_torch(checkpoint_path, training_state(iteration), keep=args.keep_checkpoints)
        last = iteration == args.num_iterations or stopping
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

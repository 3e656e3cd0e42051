# PPO for MuJoCo through EnvPool, next-step autoreset done right.
# Hyperparameters: CleanRL's MuJoCo table (EnvPool paper, appendix F, Table 5).
# Autoreset semantics: "The Value of Autoresetting" (Gymnasium), next-step mode.
# EnvPool has no wrappers, so observation normalisation and reward scaling are written here, and
# their state is saved with the weights: a saved model evaluates as it trained.
import difflib
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import envpool
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import tyro
from torch.distributions.normal import Normal


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
    max_episode_steps: int | None = None
    """time limit per episode in agent steps (default: the env's own, 1000 for the locomotion tasks); reaching it truncates"""
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
    """torch intra-op threads on CPU (0: one per core); the 64-unit MLPs gain nothing from more, and EnvPool's threads want the cores"""

    # to be filled in runtime
    batch_size: int = 0
    """the batch size (computed in runtime)"""
    minibatch_size: int = 0
    """the mini-batch size (computed in runtime)"""
    num_iterations: int = 0
    """the number of iterations (computed in runtime)"""


def validate_args(args: Args) -> None:
    """Exit with one clear line (no traceback) on impossible settings."""
    for name in ("total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs"):
        if getattr(args, name) <= 0:
            sys.exit(f"error: --{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    if args.max_episode_steps is not None and args.max_episode_steps <= 0:
        sys.exit(f"error: --max-episode-steps must be a positive integer, got {args.max_episode_steps}")
    if args.learning_rate <= 0:
        sys.exit(f"error: --learning-rate must be positive, got {args.learning_rate}")
    if not (0 < args.gamma <= 1 and 0 <= args.gae_lambda <= 1):
        sys.exit(f"error: need 0 < --gamma <= 1 and 0 <= --gae-lambda <= 1, got {args.gamma} and {args.gae_lambda}")
    if args.video_every <= 0:
        sys.exit(f"error: --video-every must be a positive integer, got {args.video_every}")
    if args.checkpoint_every < 0:
        sys.exit(f"error: --checkpoint-every must be >= 0 (0 = only at Ctrl-C and at the end), got {args.checkpoint_every}")
    for name in ("obs_clip", "reward_clip"):
        if getattr(args, name) <= 0:
            sys.exit(f"error: --{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.kl_adaptive_lr is not None and args.kl_adaptive_lr <= 0:
        sys.exit(f"error: --kl-adaptive-lr must be positive, got {args.kl_adaptive_lr}")
    if args.torch_threads < 0:
        sys.exit(f"error: --torch-threads must be >= 0 (0 = one per core), got {args.torch_threads}")
    batch_size = args.num_envs * args.num_steps
    if batch_size % args.num_minibatches != 0:
        sys.exit(
            f"error: --num-minibatches {args.num_minibatches} does not divide the batch size "
            f"{batch_size} (= --num-envs {args.num_envs} x --num-steps {args.num_steps})"
        )
    if batch_size > args.total_timesteps:
        sys.exit(f"error: --total-timesteps {args.total_timesteps} is smaller than one rollout ({batch_size} steps)")
    mujoco_ids = [env_id for env_id, spec in envpool.registration.registry.specs.items() if spec[0] == "envpool.mujoco.gym"]
    if args.env_id not in mujoco_ids:
        close = difflib.get_close_matches(args.env_id, mujoco_ids, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; e.g. HalfCheetah-v4, Hopper-v4, Walker2d-v4, Ant-v4"
        sys.exit(f"error: --env-id {args.env_id!r} is not an EnvPool MuJoCo environment{hint}")


def make_env(env_id: str, num_envs: int, seed: int, max_episode_steps: int | None = None):
    """EnvPool MuJoCo (gymnasium API). No wrappers exist in EnvPool: normalisation is done by the
    caller (RunningMeanStd below). `info["elapsed_step"]` counts the steps of the current episode."""
    kwargs = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
    envs = envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, seed=seed, **kwargs)
    return envs


class RunningMeanStd:
    """Mean and population variance (ddof=0) of everything passed to `update`, merged batch by batch
    (Chan et al.'s parallel algorithm) in float64. Starts empty (count 0): after any sequence of
    updates, `mean` and `var` equal numpy's over the concatenated stream."""

    def __init__(self, shape: tuple[int, ...] = ()):
        self.mean = np.zeros(shape, dtype=np.float64)
        self.var = np.ones(shape, dtype=np.float64)
        self.count = 0.0

    def update(self, batch: np.ndarray) -> None:
        batch = np.asarray(batch, dtype=np.float64).reshape((-1,) + self.mean.shape)
        batch_count = batch.shape[0]
        if batch_count == 0:
            return
        batch_mean, batch_var = batch.mean(axis=0), batch.var(axis=0)
        total = self.count + batch_count
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / total
        self.mean = self.mean + delta * batch_count / total
        self.var = m2 / total
        self.count = total

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {
            "mean": torch.tensor(np.asarray(self.mean), dtype=torch.float64),
            "var": torch.tensor(np.asarray(self.var), dtype=torch.float64),
            "count": torch.tensor(self.count, dtype=torch.float64),
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.mean = np.array(state["mean"].numpy(), dtype=np.float64)
        self.var = np.array(state["var"].numpy(), dtype=np.float64)
        self.count = float(state["count"])


def normalize_obs(obs: np.ndarray, obs_rms: RunningMeanStd, clip: float) -> np.ndarray:
    """(obs - mean) / std, clipped to [-clip, clip], as float32 for the network."""
    return np.clip((obs - obs_rms.mean) / np.sqrt(obs_rms.var + 1e-8), -clip, clip).astype(np.float32)


class RewardScaler:
    """Reward divided by the running std of the discounted return, clipped to [-clip, clip].

    Each env keeps its discounted-return accumulator R <- gamma * R + r, reset to 0 after every
    boundary (termination or truncation). Stale steps (the one after a boundary: EnvPool ignores the
    action and returns reward 0) do not update the statistics: their accumulator would be a
    meaningless 0 that drags the variance down. Their scaled reward is 0 and their row is masked."""

    def __init__(self, num_envs: int, gamma: float, clip: float):
        self.return_rms = RunningMeanStd(())
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.gamma = gamma
        self.clip = clip

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


class Agent(nn.Module):
    """Separate 64-64 tanh MLPs for the value and the Gaussian mean; state-independent log-std.
    Inputs are normalised observations; sampled actions are unbounded (clipped only in the env)."""

    def __init__(self, obs_dim: int, action_dim: int):
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor_mean = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, action_dim), std=0.01),
        )
        self.actor_logstd = nn.Parameter(torch.zeros(1, action_dim))

    def get_value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def get_action_and_value(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        action_mean = self.actor_mean(obs)
        probs = Normal(action_mean, self.actor_logstd.expand_as(action_mean).exp(), validate_args=False)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action).sum(-1), probs.entropy().sum(-1), self.critic(obs).squeeze(-1)


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

    In next-step mode the observation returned at a boundary step is the last one of the episode,
    and the step after a boundary is stale: the env ignores its action and returns the reset
    observation. So (seed 000, "How does Autoreset-Mode Affect GAE"):
      - a termination bootstraps 0; a truncation bootstraps V(next obs) = values[t + 1], the
        value of the episode's real last observation (partial-episode bootstrapping);
      - the accumulation stops at every boundary, so nothing flows back across episodes;
      - a stale row is invalid: valid_mask is False there and its advantage is 0.
    A stale row never leaks into a valid one: the row before it is a boundary, which cuts the
    accumulation. Fixes of the seed's listing: valid rows are the *negation* of the previous
    step's episode_over (the seed puts initial_episode_over itself in row 0), the buffers are
    real zeros, and flags are read from the arguments.
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


def save_checkpoint(path: str, state: dict) -> None:
    """Write, then rename: a crash or Ctrl-C mid-write never leaves a torn checkpoint behind."""
    tmp_path = path + ".tmp"
    torch.save(state, tmp_path)
    os.replace(tmp_path, path)


def rng_states() -> dict:
    np_name, np_keys, np_pos, np_has_gauss, np_cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": (np_name, np_keys.tolist(), np_pos, np_has_gauss, np_cached),  # plain types: loads with weights_only
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_states(states: dict) -> None:
    random.setstate(states["python"])
    np_name, np_keys, np_pos, np_has_gauss, np_cached = states["numpy"]
    np.random.set_state((np_name, np.array(np_keys, dtype=np.uint32), np_pos, np_has_gauss, np_cached))
    torch.set_rng_state(states["torch"])
    if states["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def load_checkpoint(path: str, script: str) -> dict:
    """A checkpoint of this script, or one clear line and exit."""
    if not os.path.isfile(path):
        sys.exit(f"error: --resume {path!r} does not exist")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        sys.exit(f"error: --resume {path!r} is not a readable checkpoint ({type(error).__name__})")
    if not isinstance(checkpoint, dict) or "optimizer_state_dict" not in checkpoint:
        sys.exit(f"error: --resume {path!r} is not a resumable checkpoint (no optimiser state)")
    if checkpoint.get("script") != script:
        sys.exit(f"error: --resume {path!r} is a checkpoint of {checkpoint.get('script')!r}, not of {script!r}")
    return checkpoint


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp_min(1)


def ppo_loss(
    agent: Agent,
    obs: torch.Tensor,
    actions: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    old_values: torch.Tensor,
    valid: torch.Tensor,
    args: Args,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
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
    stats = {
        "policy_loss": pg_loss.detach(),
        "value_loss": v_loss.detach(),
        "entropy": entropy_loss.detach(),
        "old_approx_kl": old_approx_kl,
        "approx_kl": approx_kl,
        "clipfrac": clipfrac,
    }
    return loss, stats


if __name__ == "__main__":
    args = tyro.cli(Args)
    checkpoint = None
    if args.resume:
        # The run continues with the hyperparameters it started with (they define the batch shapes
        # and the lr schedule); only where to resume from and how often to checkpoint are new.
        checkpoint = load_checkpoint(args.resume, "ppo_continuous_action_envpool")
        new_flags = {name: getattr(args, name) for name in ("resume", "checkpoint_every", "capture_video", "video_every")}
        args = Args(**{**checkpoint["args"], **new_flags})
    validate_args(args)
    args.batch_size = int(args.num_envs * args.num_steps)
    args.minibatch_size = int(args.batch_size // args.num_minibatches)
    args.num_iterations = args.total_timesteps // args.batch_size
    run_name = checkpoint["run_name"] if checkpoint else f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    run_dir = os.path.join(args.log_dir, run_name)
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")

    if args.track:
        import wandb

        wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            sync_tensorboard=True,
            config=vars(args),
            name=run_name,
            save_code=True,
        )
    from torch.utils.tensorboard import SummaryWriter

    # On resume, events the interrupted run logged after its checkpoint are dropped (purge_step).
    writer = SummaryWriter(run_dir, purge_step=checkpoint["global_step"] + 1 if checkpoint else None)
    writer.add_text(
        "hyperparameters",
        "|param|value|\n|-|-|\n%s" % ("\n".join([f"|{key}|{value}|" for key, value in vars(args).items()])),
    )

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)

    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    # env setup. EnvPool's simulators cannot be snapshotted: a resumed run starts fresh episodes
    # (seeded from the seed and the iteration) and the unfinished episodes are never logged.
    env_seed = args.seed if checkpoint is None else args.seed + 7919 * checkpoint["iteration"]
    envs = make_env(args.env_id, args.num_envs, env_seed, args.max_episode_steps)
    obs_shape = envs.single_observation_space.shape
    action_shape = envs.single_action_space.shape
    action_low = envs.single_action_space.low.astype(np.float32)
    action_high = envs.single_action_space.high.astype(np.float32)

    agent = Agent(int(np.prod(obs_shape)), int(np.prod(action_shape))).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    # Normalisation, update-then-normalise: every observation EnvPool returns (reset, regular, an
    # episode's last one, the reset one of a stale step) enters the statistics once, on arrival, and
    # is then normalised with the updated statistics and stored normalised. So an episode's last
    # observation, stored on the stale row, is normalised like every row, and V(stale row) is the
    # truncation bootstrap computed on exactly that normalised input.
    obs_rms = RunningMeanStd(obs_shape)
    reward_scaler = RewardScaler(args.num_envs, args.gamma, args.reward_clip)
    # --norm-value: value = critic output * value_std + value_mean, statistics of the valid returns.
    value_rms = RunningMeanStd(())
    value_mean, value_std = 0.0, 1.0
    start_iteration, global_step = 1, 0
    if checkpoint:
        agent.load_state_dict(checkpoint["model_state_dict"])
        optimizer.load_state_dict(checkpoint["optimizer_state_dict"])
        set_rng_states(checkpoint["rng"])
        # The running statistics carry on; the reward scaler's per-env discounted-return
        # accumulators restart at 0, like the envs they follow.
        obs_rms.load_state_dict(checkpoint["obs_rms"])
        reward_scaler.return_rms.load_state_dict(checkpoint["return_rms"])
        value_rms.load_state_dict(checkpoint["value_rms"])
        if args.norm_value:
            value_mean, value_std = float(value_rms.mean), float(np.sqrt(value_rms.var + 1e-8))
        if args.kl_adaptive_lr is not None:
            # not a schedule: the adapted rate is state, saved with the checkpoint
            optimizer.param_groups[0]["lr"] = checkpoint["learning_rate"]
        start_iteration, global_step = checkpoint["iteration"] + 1, checkpoint["global_step"]
        print(f"resumed {run_name} at iteration {checkpoint['iteration']} (global step {global_step:,})", flush=True)

    def model_file(path: str) -> str:
        """The `.cleanrl_model` format `cleanrl_utils.evaluate` reads: script name, args, weights and normaliser statistics."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        torch.save(
            {
                "script": "ppo_continuous_action_envpool",
                "model_state_dict": agent.state_dict(),
                "args": vars(args),
                "obs_rms": obs_rms.state_dict(),
                "return_rms": reward_scaler.return_rms.state_dict(),
                "value_rms": value_rms.state_dict(),
            },
            path,
        )
        return path

    def film(iteration: int) -> subprocess.Popen:
        """Evaluation video of the current policy, played by the evaluator in its own process."""
        video_dir = os.path.join(run_dir, "videos", f"iteration-{iteration}")
        model_path = model_file(os.path.join(video_dir, "model.cleanrl_model"))
        command = [sys.executable, "-m", "cleanrl_utils.evaluate", "--model-path", model_path, "--episodes", "1"]
        log = open(os.path.join(video_dir, "evaluate.log"), "w")
        return subprocess.Popen(command + ["--capture-video", "--video-dir", video_dir, "--no-cuda"], stdout=log, stderr=log)

    video_jobs: list[subprocess.Popen] = []

    def training_state(iteration: int) -> dict:
        return {
            "script": "ppo_continuous_action_envpool",
            "run_name": run_name,
            "args": vars(args),
            "iteration": iteration,
            "global_step": global_step,
            "model_state_dict": agent.state_dict(),
            "optimizer_state_dict": optimizer.state_dict(),
            "rng": rng_states(),
            "obs_rms": obs_rms.state_dict(),
            "return_rms": reward_scaler.return_rms.state_dict(),
            "value_rms": value_rms.state_dict(),
            "learning_rate": optimizer.param_groups[0]["lr"],
        }

    # Ctrl-C finishes the current iteration, writes a checkpoint and exits 0; a second one aborts.
    stop_requested = False

    def request_stop(signum, frame):
        global stop_requested
        stop_requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)
        print("\nCtrl-C: stopping after this iteration (press again to abort without saving)", flush=True)

    signal.signal(signal.SIGINT, request_stop)

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

    # TRY NOT TO MODIFY: start the game
    start_global_step = global_step
    start_time = time.time()
    # Progress: on a terminal, one live line rewritten in place every second; otherwise (CI, log
    # files, pipes) a plain line every 10 s.
    live_progress = sys.stdout.isatty()
    last_print = 0.0
    next_obs_np, _ = envs.reset()
    obs_rms.update(next_obs_np)
    next_obs = torch.from_numpy(normalize_obs(next_obs_np, obs_rms, args.obs_clip)).to(device)
    # The step before the first one is not a boundary: row 0 of the first rollout is valid.
    prev_episode_over = torch.zeros(args.num_envs, dtype=torch.bool, device=device)
    next_stale = np.zeros(args.num_envs, dtype=bool)

    for iteration in range(start_iteration, args.num_iterations + 1):
        # Annealing the rate if instructed to do so.
        if args.anneal_lr and args.kl_adaptive_lr is None:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            lrnow = frac * args.learning_rate
            optimizer.param_groups[0]["lr"] = lrnow
        rollout_prev_episode_over = prev_episode_over

        for step in range(0, args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs

            # ALGO LOGIC: action logic
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value * value_std + value_mean
            actions[step] = action
            logprobs[step] = logprob

            # TRY NOT TO MODIFY: execute the game and log data.
            # The env gets the action clipped to its bounds; the buffer keeps the unclipped sample
            # whose log-prob was stored. On a stale step (the one after a boundary) EnvPool ignores
            # the action and returns the reset observation with reward 0; compute_gae masks that row.
            env_action = np.clip(action.cpu().numpy(), action_low, action_high)
            next_obs_np, reward, term, trunc, info = envs.step(env_action)
            episode_over = term | trunc
            # this step was stale if the previous one ended an episode (its reward is 0)
            stale, next_stale = next_stale, episode_over
            rewards[step] = torch.from_numpy(reward_scaler(reward, episode_over, stale)).to(device)
            terminations[step] = torch.from_numpy(term).to(device)
            truncations[step] = torch.from_numpy(trunc).to(device)
            obs_rms.update(next_obs_np)
            next_obs = torch.from_numpy(normalize_obs(next_obs_np, obs_rms, args.obs_clip)).to(device)

            # Episode length is EnvPool's elapsed_step, which does not count stale steps.
            episode_returns += reward
            if episode_over.any():
                for i in np.flatnonzero(episode_over):
                    writer.add_scalar("charts/episodic_return", episode_returns[i], global_step)
                    writer.add_scalar("charts/episodic_length", info["elapsed_step"][i], global_step)
                    recent_returns.append(float(episode_returns[i]))
                episode_returns[episode_over] = 0.0

        prev_episode_over = terminations[-1] | truncations[-1]

        # bootstrap value and GAE (see compute_gae for the autoreset rules)
        with torch.no_grad():
            values[args.num_steps] = agent.get_value(next_obs) * value_std + value_mean
            advantages, valid_mask = compute_gae(
                values, rewards, terminations, truncations, rollout_prev_episode_over, args.gamma, args.gae_lambda
            )
            returns = advantages + values[:-1]
            if args.norm_value:
                value_rms.update(returns[valid_mask].cpu().numpy())
                value_mean, value_std = float(value_rms.mean), float(np.sqrt(value_rms.var + 1e-8))

        # flatten the batch
        b_obs = obs.reshape((-1,) + obs_shape)
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape((-1,) + action_shape)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values[:-1].reshape(-1)
        b_valid = valid_mask.reshape(-1)
        # the value loss works in the critic's output space (identity without --norm-value)
        b_value_targets = (b_returns - value_mean) / value_std
        b_old_critic = (b_values - value_mean) / value_std

        # Optimizing the policy and value network
        clipfracs = []
        for epoch in range(args.update_epochs):
            epoch_kls = []
            b_inds = torch.randperm(args.batch_size, device=device)
            for start in range(0, args.batch_size, args.minibatch_size):
                mb_inds = b_inds[start : start + args.minibatch_size]
                loss, stats = ppo_loss(
                    agent,
                    b_obs[mb_inds],
                    b_actions[mb_inds],
                    b_logprobs[mb_inds],
                    b_advantages[mb_inds],
                    b_value_targets[mb_inds],
                    b_old_critic[mb_inds],
                    b_valid[mb_inds],
                    args,
                )
                clipfracs.append(stats["clipfrac"])
                epoch_kls.append(stats["approx_kl"])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

            if args.kl_adaptive_lr is not None:
                epoch_kl = torch.stack(epoch_kls).mean().item()
                lr = optimizer.param_groups[0]["lr"]
                if epoch_kl > 2.0 * args.kl_adaptive_lr:
                    optimizer.param_groups[0]["lr"] = max(lr / 1.5, 1e-6)
                elif epoch_kl < 0.5 * args.kl_adaptive_lr:
                    optimizer.param_groups[0]["lr"] = min(lr * 1.5, 1e-2)
            if args.target_kl is not None and stats["approx_kl"] > args.target_kl:
                break

        valid_values = b_values[b_valid]
        valid_returns = b_returns[b_valid]
        var_y = valid_returns.var()
        explained_var = (1 - (valid_returns - valid_values).var() / var_y).item() if var_y > 0 else float("nan")

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        sps = int((global_step - start_global_step) / (time.time() - start_time))
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        writer.add_scalar("losses/value_loss", stats["value_loss"].item(), global_step)
        writer.add_scalar("losses/policy_loss", stats["policy_loss"].item(), global_step)
        writer.add_scalar("losses/entropy", stats["entropy"].item(), global_step)
        writer.add_scalar("losses/old_approx_kl", stats["old_approx_kl"].item(), global_step)
        writer.add_scalar("losses/approx_kl", stats["approx_kl"].item(), global_step)
        writer.add_scalar("losses/clipfrac", torch.stack(clipfracs).mean().item(), global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        writer.add_scalar("charts/SPS", sps, global_step)

        # A diverged run stops here, before any checkpoint could be overwritten with its state.
        if not (torch.isfinite(loss) and all(torch.isfinite(p).all() for p in agent.parameters())):
            writer.close()
            if live_progress:
                print()  # end the live line before the error message
            saved = (
                f"last good checkpoint: {checkpoint_path}" if os.path.exists(checkpoint_path) else "no checkpoint was written"
            )
            sys.exit(f"error: non-finite loss or parameters at iteration {iteration} (global step {global_step:,}); {saved}")
        # The flag is read once: a Ctrl-C arriving after this line stops the next iteration, so a
        # stop is never announced without the checkpoint it names.
        stopping = stop_requested
        if (args.checkpoint_every and iteration % args.checkpoint_every == 0) or stopping or iteration == args.num_iterations:
            save_checkpoint(checkpoint_path, training_state(iteration))
        if args.capture_video and (iteration % args.video_every == 0 or iteration == args.num_iterations or stopping):
            video_jobs.append(film(iteration))

        now = time.time()
        final_line = iteration == args.num_iterations or stopping
        if now - last_print > (1 if live_progress else 10) or final_line:
            last_print = now
            recent = recent_returns[-20:]
            mean_return = f"{np.mean(recent):.2f}" if recent else "n/a"
            eta = (args.num_iterations - iteration) * args.batch_size / max(sps, 1)
            line = (
                f"step {global_step:,}/{args.num_iterations * args.batch_size:,}  SPS {sps:,}  "
                f"return(last {len(recent)}) {mean_return}  episodes {len(recent_returns):,}  ETA {eta / 60:.1f} min"
            )
            if live_progress:  # "\r\x1b[K": back to column 0 and clear the line, so it is rewritten in place
                line = f"\r\x1b[K{line}"
            print(line, end="\n" if final_line or not live_progress else "", flush=True)
        if stopping:
            print(
                f"stopped at iteration {iteration}; checkpoint: {checkpoint_path} (continue with --resume {checkpoint_path})"
            )
            break

    if args.save_model:
        print(f"model saved to {model_file(os.path.join(run_dir, f'{args.exp_name}.cleanrl_model'))}")
    for job in video_jobs:
        video_dir = os.path.dirname(job.args[job.args.index("--model-path") + 1])
        status = "written" if job.wait() == 0 else f"FAILED (exit {job.returncode}, see {video_dir}/evaluate.log)"
        print(f"evaluation video {status}: {video_dir}")

    envs.close()
    writer.close()

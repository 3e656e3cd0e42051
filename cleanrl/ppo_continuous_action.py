# PPO for MuJoCo on Gymnasium vector envs, same-step autoreset done right.
# Hyperparameters: CleanRL's MuJoCo table (EnvPool paper, appendix F, Table 5), as in this script's EnvPool twin, so the
# two autoreset modes compare run for run. (CleanRL's single-env defaults, 1 env x 2048 steps and 10 epochs of 32
# minibatches, spend 320 gradient steps per 2048 env steps; Table 5 spends 8 per 4096, what a CPU can afford.)
# Autoreset semantics: "The Value of Autoresetting" (Gymnasium), same-step mode.
# Observation normalisation and reward scaling are written here: Gymnasium's vector NormalizeObservation refuses
# same-step envs, and its per-env wrappers would keep one set of statistics per env, inside the subprocesses under
# --vector-mode async. Their state is saved with the weights: a saved model evaluates as it trained.
from cleanrl_utils.stop import StopAfterIteration, exit_at_once_on_signals, ignore_signals_in_worker, stopped_line

if __name__ == "__main__":
    exit_at_once_on_signals()  # Ctrl-C while the libraries below load: one line, no traceback

import atexit
import multiprocessing
import os
import random
import sys
import warnings
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import tyro
from torch.distributions.normal import Normal

from cleanrl_utils.checkpoint import load_torch, restore_torch, resume_args, resumed_env_seed, save_torch, torch_rng_states
from cleanrl_utils.checks import check_gymnasium_env, check_memory, check_positive, check_rollout_shape, check_run_args
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
    """seed of the experiment (torch, numpy, python and the Gymnasium envs)"""
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
    """continue from a checkpoint: same run folder, args, step counter, lr schedule, optimiser, RNG and normaliser states"""
    capture_video: bool = False
    """film an evaluation episode to `runs/{run_name}/videos/` every --video-every iterations and at the end, in a separate process (the training envs never render)"""
    video_every: int = 100
    """iterations between evaluation videos with --capture-video"""

    # Algorithm specific arguments (EnvPool paper, Table 5)
    env_id: str = "HalfCheetah-v4"
    """the id of the environment (a Gymnasium env with continuous actions and vector observations, e.g. HalfCheetah-v4, Hopper-v5, Walker2d-v5, Ant-v5)"""
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
    """Toggles advantages normalization (per minibatch)"""
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
    """time limit per episode in agent steps (default: the env's registered limit); reaching it truncates"""
    obs_clip: float = 10.0
    """normalised observations are clipped to [-obs_clip, obs_clip]"""
    reward_clip: float = 10.0
    """scaled rewards are clipped to [-reward_clip, reward_clip]"""
    vector_mode: str = "sync"
    """`sync` (SyncVectorEnv, envs stepped in this process) or `async` (AsyncVectorEnv, one subprocess per env: 64 by default)"""
    torch_threads: int = 1
    """torch intra-op threads on CPU (0: auto, OMP_NUM_THREADS if set, else one per core); 1 is fastest for these 64-unit MLPs"""

    # to be filled in runtime (not flags)
    batch_size: tyro.conf.Suppress[int] = 0
    minibatch_size: tyro.conf.Suppress[int] = 0
    num_iterations: tyro.conf.Suppress[int] = 0


def without_version_advice() -> None:
    """v4 on purpose (EnvPool's MuJoCo envs and the published tables are v4): Gymnasium's advice to move to v5, on
    every env it makes, is noise."""
    warnings.filterwarnings("ignore", message=".*is out of date. You should consider upgrading")


def validate_args(args: Args) -> None:
    """Exit with one clear line (no traceback) on impossible settings, before anything is written."""
    without_version_advice()
    check_run_args(args)
    check_rollout_shape(args.num_envs, args.num_steps, args.num_minibatches, args.update_epochs, args.total_timesteps)
    check_positive(args, "obs_clip", "reward_clip", "max_episode_steps")
    if args.vector_mode not in ("sync", "async"):
        sys.exit(f"error: --vector-mode must be sync or async, got {args.vector_mode!r}")
    observation_space, action_space = check_gymnasium_env(
        args.env_id,
        "HalfCheetah-v4, Hopper-v5, Walker2d-v5",
        fits=lambda obs, action: isinstance(action, gym.spaces.Box) and len(action.shape) == 1,
    )
    if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1:
        sys.exit(
            f"error: --env-id {args.env_id!r} has {action_space} actions; this script needs a flat Box (see ppo.py for discrete ones)"
        )
    if not isinstance(observation_space, gym.spaces.Box) or len(observation_space.shape) != 1:
        sys.exit(f"error: --env-id {args.env_id!r} has {observation_space} observations; this script needs a flat Box")
    obs_bytes = 4 * (observation_space.shape[0] + action_space.shape[0])  # observations and actions, float32
    check_memory(args.num_steps * args.num_envs * (obs_bytes + 40), "the rollout storage", "--num-envs or --num-steps")


def make_env(
    env_id: str, num_envs: int, vector_mode: str = "sync", max_episode_steps: int | None = None
) -> gym.vector.VectorEnv:
    """`num_envs` copies of a Gymnasium env in one vector env with *same-step* autoreset, under Gymnasium's vector
    RecordEpisodeStatistics (`info["episode"]`, mask `info["_episode"]`, at every boundary; its same-step counting is
    checked against hand-counted episodes in the tests). Seed with `envs.reset(seed=...)`: sub-env i gets seed + i."""
    kwargs = (
        {"max_episode_steps": max_episode_steps} if max_episode_steps else {}
    )  # None (0 in older files): the registered limit
    without_version_advice()

    def make_one() -> gym.Env:
        if multiprocessing.parent_process() is not None:
            ignore_signals_in_worker()  # an AsyncVectorEnv worker: Ctrl-C and SIGTERM are the main process's
        return gym.make(env_id, **kwargs)

    env_fns = [make_one for _ in range(num_envs)]
    vector_env = gym.vector.SyncVectorEnv if vector_mode == "sync" else gym.vector.AsyncVectorEnv
    envs = vector_env(env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    if vector_mode == "async":  # the workers ignore SIGTERM, which multiprocessing's exit-time terminate() sends:
        atexit.register(envs.close)  # close them on every exit (a sys.exit included), or that exit would wait forever
    return gym.wrappers.vector.RecordEpisodeStatistics(envs)


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
    or truncation). In same-step mode every step is real, so every step updates the statistics; the reset happens
    after the boundary step's reward is counted."""

    def __init__(self, num_envs: int, gamma: float, clip: float):
        self.return_rms = RunningMeanStd(())
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.gamma, self.clip = gamma, clip

    def __call__(self, reward: np.ndarray, episode_over: np.ndarray) -> np.ndarray:
        self.returns = self.returns * self.gamma + reward
        self.return_rms.update(self.returns)
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

    def __init__(self, obs_dim: int, action_dim: int):
        super().__init__()
        self.critic = mlp(obs_dim, 1, out_std=1.0)
        self.actor_mean = mlp(obs_dim, action_dim, out_std=0.01)
        self.actor_logstd = nn.Parameter(torch.zeros(1, action_dim))

    def get_value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def get_action_and_value(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        action_mean = self.actor_mean(obs)
        probs = Normal(action_mean, self.actor_logstd.expand_as(action_mean).exp(), validate_args=False)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action).sum(-1), probs.entropy().sum(-1), self.critic(obs).squeeze(-1)


def evaluation_player(
    saved: dict, *, num_envs: int, seed: int, device: torch.device, greedy: bool, epsilon: float, render: bool
) -> Player:
    """How `cleanrl_utils.evaluate` plays a model this script saved (and films it during training): observations
    normalised with the saved statistics, frozen; actions sampled from the Gaussian (seeded), or its mean with
    `greedy`, clipped to the bounds; videos are extra episodes in a Gymnasium env of the same id. `epsilon` is
    DQN's, unused here."""
    train_args = saved["args"]
    envs = make_env(train_args["env_id"], num_envs, "sync", train_args["max_episode_steps"])
    obs_shape, action_space = envs.single_observation_space.shape, envs.single_action_space
    agent = Agent(obs_shape[0], action_space.shape[0])
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

    return Player(envs=envs, act=act, film_env_id=train_args["env_id"], reset_seed=seed)


def compute_gae_same_step(
    values: torch.Tensor,  # (T, N): V(obs_t)
    last_values: torch.Tensor,  # (N,): V(obs after the rollout)
    final_values: torch.Tensor,  # (T, N): V(info["final_obs"]) on truncated rows (truncation_values)
    rewards: torch.Tensor,  # (T, N)
    terminations: torch.Tensor,  # (T, N) bool
    truncations: torch.Tensor,  # (T, N) bool
    gamma: float,
    gae_lambda: float,
) -> torch.Tensor:
    """GAE for same-step autoreset rollouts. Returns the advantages, (T, N).

    In same-step mode the env resets inside the step that ends an episode: the observation it returns is already
    the first one of the next episode, and the episode's real last observation is in info["final_obs"]. Every step
    is a real transition, so there is no stale row and no mask. So ("The Value of Autoresetting"):
      - a step bootstraps the value of the observation after it, values[t + 1] (last_values after the last row);
      - but a termination bootstraps 0, and a truncation V(final obs) = final_values[t] (partial-episode
        bootstrapping), never values[t + 1] = V(reset obs), the value of another episode's start; final_values
        is read on truncated rows only;
      - the accumulation stops at every boundary, so nothing flows back across episodes.
    A step both terminated and truncated counts as terminated.
    """
    next_values = torch.cat([values[1:], last_values[None]], dim=0)
    next_values = torch.where(truncations & ~terminations, final_values, next_values)
    num_steps = rewards.shape[0]
    episode_over = terminations | truncations
    bootstrap = (~terminations).to(values.dtype)
    keep_accumulating = (~episode_over).to(values.dtype)
    advantages = torch.zeros_like(rewards, dtype=values.dtype)
    last_gae = torch.zeros_like(values[0])
    for t in reversed(range(num_steps)):
        delta = rewards[t] + gamma * bootstrap[t] * next_values[t] - values[t]
        last_gae = delta + gamma * gae_lambda * keep_accumulating[t] * last_gae
        advantages[t] = last_gae
    return advantages


def truncation_values(agent: Agent, info: dict, term, trunc, obs_rms: RunningMeanStd, obs_clip: float) -> torch.Tensor:
    """(N,): V(info["final_obs"]) on the rows this step truncated (and did not terminate), 0 elsewhere: what a
    truncation bootstraps (see compute_gae_same_step). The final observations are normalised as the step's next
    observations were. One extra value call, for those rows only (the network does not change during the rollout,
    so now is as good as later)."""
    device = next(agent.parameters()).device
    final_values = torch.zeros(len(trunc), device=device)
    truncated = np.flatnonzero(trunc & ~term)
    if truncated.size:
        final_obs = torch.from_numpy(normalize_obs(np.stack(info["final_obs"][truncated]), obs_rms, obs_clip)).to(device)
        with torch.no_grad():
            final_values[truncated] = agent.get_value(final_obs)
    return final_values


def ppo_loss(
    agent: Agent, obs, actions, old_logprobs, advantages, returns, old_values, args: Args
) -> tuple[torch.Tensor, dict]:
    """Clipped PPO loss on one minibatch. In same-step mode every row is a real step: plain means."""
    _, newlogprob, entropy, newvalue = agent.get_action_and_value(obs, actions)
    logratio = newlogprob - old_logprobs
    ratio = logratio.exp()

    with torch.no_grad():
        # http://joschu.net/blog/kl-approx.html
        old_approx_kl = (-logratio).mean()
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > args.clip_coef).float().mean()

    if args.norm_adv:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
    pg_loss = torch.max(pg_loss1, pg_loss2).mean()

    if args.clip_vloss:
        v_loss_unclipped = (newvalue - returns) ** 2
        v_clipped = old_values + torch.clamp(newvalue - old_values, -args.clip_coef, args.clip_coef)
        v_loss_clipped = (v_clipped - returns) ** 2
        v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
    else:
        v_loss = 0.5 * ((newvalue - returns) ** 2).mean()

    entropy_loss = entropy.mean()
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
    stats = dict(policy_loss=pg_loss, value_loss=v_loss, entropy=entropy_loss, old_approx_kl=old_approx_kl)
    stats |= dict(approx_kl=approx_kl, clipfrac=clipfrac)
    return loss, {name: value.detach() for name, value in stats.items()}  # logged, not differentiated


if __name__ == "__main__":
    args = tyro.cli(Args)
    keys = dict(obs_rms=dict, return_rms=dict, recent_returns=list)  # besides weights, optimiser, counters
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

    # env setup. The MuJoCo envs cannot be snapshotted (they pickle by constructor arguments, and under --vector-mode
    # async they live in subprocesses): a resumed run plays new episodes (new seeds); unfinished ones go unlogged, and
    # the reward scaler's per-env discounted returns restart at 0 with them. The normaliser statistics carry on.
    env_seed = resumed_env_seed(args.seed, checkpoint["iteration"] if checkpoint else 0)
    envs = make_env(args.env_id, args.num_envs, args.vector_mode, args.max_episode_steps)
    obs_shape, action_shape = envs.single_observation_space.shape, envs.single_action_space.shape
    action_low, action_high = envs.single_action_space.low.astype(np.float32), envs.single_action_space.high.astype(np.float32)

    agent = Agent(obs_shape[0], action_shape[0]).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    # Normalisation, update-then-normalise: every observation the env returns (the reset ones included) enters the
    # statistics once, on arrival, and is then normalised with the updated statistics and stored normalised. An
    # episode's last observation (info["final_obs"], seen only at a boundary) is normalised with the same statistics
    # before its truncation bootstrap value. Episode statistics come from RecordEpisodeStatistics (raw rewards).
    obs_rms = RunningMeanStd(obs_shape)
    reward_scaler = RewardScaler(args.num_envs, args.gamma, args.reward_clip)
    normalisers = {"obs_rms": obs_rms, "return_rms": reward_scaler.return_rms}
    start_iteration, global_step = 1, 0
    recent_returns: list[float] = []
    if checkpoint:  # weights, Adam, RNG and normaliser states (one line if they do not fit); prints where the run resumes
        start_iteration, global_step = restore_torch(args.resume, checkpoint, agent, optimizer, args, extra=normalisers)
        recent_returns = list(checkpoint["recent_returns"])
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
        return counters | weights | {"rng": torch_rng_states()} | statistics | {"recent_returns": recent_returns}

    # ALGO Logic: Storage setup
    obs = torch.zeros((args.num_steps, args.num_envs) + obs_shape, device=device)
    actions = torch.zeros((args.num_steps, args.num_envs) + action_shape, device=device)
    logprobs = torch.zeros((args.num_steps, args.num_envs), device=device)
    rewards = torch.zeros((args.num_steps, args.num_envs), device=device)
    terminations = torch.zeros((args.num_steps, args.num_envs), dtype=torch.bool, device=device)
    truncations = torch.zeros((args.num_steps, args.num_envs), dtype=torch.bool, device=device)
    values = torch.zeros((args.num_steps, args.num_envs), device=device)
    final_values = torch.zeros((args.num_steps, args.num_envs), device=device)  # V(info["final_obs"]) where truncated

    # and SPS from here; the restored returns are not counted as since the resume
    progress = ProgressLine(global_step, args.num_iterations * args.batch_size, episodes_before=len(recent_returns))
    videos = VideoJobs(run_dir, model_file)
    stop = StopAfterIteration()  # from here on Ctrl-C/SIGTERM finish the iteration, checkpoint, exit 0
    next_obs_np, _ = envs.reset(seed=env_seed)
    obs_rms.update(next_obs_np)
    next_obs = torch.from_numpy(normalize_obs(next_obs_np, obs_rms, args.obs_clip)).to(device)

    for iteration in range(start_iteration, args.num_iterations + 1):
        if args.anneal_lr:  # linearly, from --learning-rate at iteration 1 towards 0 after the last one
            optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / args.num_iterations) * args.learning_rate

        for step in range(0, args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs

            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value
            actions[step] = action
            logprobs[step] = logprob

            # TRY NOT TO MODIFY: execute the game and log data. Same-step autoreset: at a boundary next_obs is
            # already the reset observation of the next episode; the episode's last one is info["final_obs"][i].
            # The env gets the action clipped to its bounds; the buffer keeps the sample whose log-prob was stored.
            next_obs_np, reward, term, trunc, info = envs.step(np.clip(action.cpu().numpy(), action_low, action_high))
            rewards[step] = torch.from_numpy(reward_scaler(reward, term | trunc)).to(device)
            terminations[step] = torch.as_tensor(term, device=device)
            truncations[step] = torch.as_tensor(trunc, device=device)
            obs_rms.update(next_obs_np)
            next_obs = torch.from_numpy(normalize_obs(next_obs_np, obs_rms, args.obs_clip)).to(device)
            final_values[step] = truncation_values(agent, info, term, trunc, obs_rms, args.obs_clip)

            if "episode" in info:
                for i in np.flatnonzero(info["_episode"]):
                    writer.add_scalar("charts/episodic_return", info["episode"]["r"][i], global_step)
                    writer.add_scalar("charts/episodic_length", info["episode"]["l"][i], global_step)
                    recent_returns.append(float(info["episode"]["r"][i]))

        # bootstrap value and GAE (see compute_gae_same_step for the autoreset rules)
        with torch.no_grad():
            last_values = agent.get_value(next_obs)
            advantages = compute_gae_same_step(
                values, last_values, final_values, rewards, terminations, truncations, args.gamma, args.gae_lambda
            )
            returns = advantages + values

        # flatten the batch: one named field per argument of the loss
        rollout = dict(obs=obs, actions=actions, old_logprobs=logprobs, advantages=advantages, returns=returns)
        rollout |= dict(old_values=values)
        batch = {name: x.reshape((args.batch_size,) + x.shape[2:]) for name, x in rollout.items()}

        # Optimizing the policy and value network
        clipfracs = []
        for epoch in range(args.update_epochs):
            b_inds = torch.randperm(args.batch_size, device=device)
            for start in range(0, args.batch_size, args.minibatch_size):
                mb_inds = b_inds[start : start + args.minibatch_size]
                loss, stats = ppo_loss(agent, **{name: x[mb_inds] for name, x in batch.items()}, args=args)
                clipfracs.append(stats["clipfrac"])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

            if args.target_kl is not None and stats["approx_kl"] > args.target_kl:
                break

        b_returns, b_values = batch["returns"], batch["old_values"]
        var_y = b_returns.var() if len(b_returns) > 1 else torch.tensor(0.0)  # one row: no variance, no warning
        explained_var = (1 - (b_returns - b_values).var() / var_y).item() if var_y > 0 else float("nan")

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

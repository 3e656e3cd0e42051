# REINFORCE (Williams, 1992) for MuJoCo through EnvPool, next-step autoreset done right. No critic: the policy
# gradient is weighted by normalised discounted Monte Carlo returns.
# Hyperparameters: Tianshou's MuJoCo benchmark (examples/mujoco/mujoco_reinforce.py, PGPolicy in policy/modelfree/pg.py).
# Autoreset semantics: "The Value of Autoresetting" (Gymnasium), next-step mode.
# EnvPool has no wrappers, so observation and return normalisation are written here, and
# their state is saved with the weights: a saved model evaluates as it trained.
from cleanrl_utils.stop import StopAfterIteration, exit_at_once_on_signals, stopped_line

if __name__ == "__main__":
    exit_at_once_on_signals(envpool_mujoco=True)  # Ctrl-C while the libraries below load: one line, no traceback

import os
import random
import sys
from dataclasses import dataclass
from typing import Literal

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

    # Algorithm specific arguments (Tianshou, examples/mujoco/mujoco_reinforce.py)
    env_id: str = "HalfCheetah-v4"
    """the id of the environment (any EnvPool MuJoCo id, e.g. HalfCheetah-v4, Hopper-v4, Walker2d-v4, Ant-v4, Humanoid-v5)"""
    total_timesteps: int = 3_000_000
    """total timesteps of the experiments (Tianshou: 100 epochs x 30,000 steps)"""
    learning_rate: float = 0.001
    """the learning rate of the Adam optimizer (Tianshou: --lr 1e-3)"""
    num_envs: int = 10
    """the number of parallel game environments (Tianshou: --training-num 10)"""
    num_steps: int = 205
    """steps per env per rollout (Tianshou: --step-per-collect 2048; its collector steps all 10 envs until >= 2048, so 2,050)"""
    anneal_lr: bool = True
    """decay the learning rate linearly to 0 (Tianshou: --lr-decay, once per collect)"""
    gamma: float = 0.99
    """the discount factor gamma (Tianshou: --gamma)"""
    norm_returns: bool = True
    """standardise the discounted returns by the running mean/std of all earlier batches' returns (Tianshou: --rew-norm)"""
    init_logstd: float = -0.5
    """initial log-std of the Gaussian policy (Tianshou: sigma_param initialised to -0.5)"""
    max_episode_steps: int | None = None
    """time limit per episode in agent steps (default: the env's own, 1000 for the locomotion tasks); reaching it truncates"""
    obs_clip: float = 10.0
    """normalised observations are clipped to [-obs_clip, obs_clip] (Tianshou: VectorEnvNormObs, clip 10)"""
    action_bound: Literal["clip", "tanh"] = "clip"
    """how an unbounded Gaussian sample meets the env's bounds: clip, or tanh, squashed and scaled onto them (Tianshou's default, --action-bound-method tanh); the log-prob is the unbounded sample's either way"""

    # Speed lever: `--torch-threads`
    torch_threads: int = 1
    """torch intra-op threads on CPU (0: auto, OMP_NUM_THREADS if set, else one per core); the 64-unit MLPs gain nothing from more, and EnvPool's threads want the cores"""

    # to be filled in runtime (not flags)
    batch_size: tyro.conf.Suppress[int] = 0
    num_iterations: tyro.conf.Suppress[int] = 0


def validate_args(args: Args) -> None:
    """Exit with one clear line (no traceback) on impossible settings, before anything is written."""
    check_run_args(args)
    check_rollout_shape(args.num_envs, args.num_steps, 1, 1, args.total_timesteps)  # one gradient step on the whole batch
    if args.num_steps < 2:  # the rollout edge cuts every return (compute_returns): one step leaves a lone reward
        sys.exit(f"error: --num-steps must be >= 2 (a return sums the rewards of one rollout), got {args.num_steps}")
    check_positive(args, "max_episode_steps", "obs_clip")
    check_log_std_init(args.init_logstd, "--init-logstd")
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


def env_action(action: np.ndarray, low: np.ndarray, high: np.ndarray, bound: str) -> np.ndarray:
    """The action the env gets for an unbounded sample: clipped to [low, high], or squashed by tanh and scaled onto
    them (Tianshou's action_bound_method "tanh" with action_scaling). Clipping sends every sample past a bound to that
    bound, so the gradient may push the mean further out with no effect on the env; tanh keeps each sample's effect."""
    if bound == "tanh":
        return low + (np.tanh(action) + 1.0) * 0.5 * (high - low)
    return np.clip(action, low, high)


def normalize_obs(obs: np.ndarray, obs_rms: RunningMeanStd, clip: float) -> np.ndarray:
    """(obs - mean) / std, clipped to [-clip, clip], as float32 for the network."""
    return np.clip((obs - obs_rms.mean) / np.sqrt(obs_rms.var + 1e-8), -clip, clip).astype(np.float32)


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


def mlp(in_dim: int, out_dim: int, out_std: float) -> nn.Sequential:
    """64-64 tanh, orthogonal init (gain sqrt 2), the output layer's gain `out_std`."""
    hidden = [layer_init(nn.Linear(in_dim, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)), nn.Tanh()]
    return nn.Sequential(*hidden, layer_init(nn.Linear(64, out_dim), std=out_std))


class Agent(nn.Module):
    """A 64-64 tanh MLP for the Gaussian mean and a state-independent log-std; no critic (Tianshou's ActorProb,
    unbounded). Inputs are normalised observations; sampled actions are unbounded, bounded only on their way to the
    env (`env_action`: clipped by default; Tianshou squashes with tanh, --action-bound tanh)."""

    def __init__(self, obs_dim: int, action_dim: int, init_logstd: float = -0.5):
        super().__init__()
        self.actor_mean = mlp(obs_dim, action_dim, out_std=0.01)
        self.actor_logstd = nn.Parameter(torch.full((1, action_dim), init_logstd))

    def get_action(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        action_mean = self.actor_mean(obs)
        probs = Normal(action_mean, self.actor_logstd.expand_as(action_mean).exp(), validate_args=False)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action).sum(-1), probs.entropy().sum(-1)


def evaluation_player(
    saved: dict, *, num_envs: int, seed: int, device: torch.device, greedy: bool, epsilon: float, render: bool
) -> Player:
    """How `cleanrl_utils.evaluate` plays a model this script saved (and films it during training): observations
    normalised with the saved statistics, frozen; actions sampled from the Gaussian (seeded), or its mean with
    `greedy`, bounded as in training (--action-bound). EnvPool's MuJoCo cannot render headless, so videos are extra episodes in
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
        bound = train_args.get("action_bound", "clip")  # models saved before the flag existed clipped
        return env_action(action.cpu().numpy(), action_space.low, action_space.high, bound)

    return Player(envs=envs, act=act, film_env_id=train_args["env_id"])


def compute_returns(
    rewards: torch.Tensor,  # (T, N)
    terminations: torch.Tensor,  # (T, N) bool
    truncations: torch.Tensor,  # (T, N) bool
    prev_episode_over: torch.Tensor,  # (N,) bool: the step before row 0 ended an episode
    gamma: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Discounted Monte Carlo returns G_t = r_t + gamma * G_{t+1} for next-step autoreset rollouts. Returns
    (returns, valid_mask), both (T, N).

      - the sum stops at every boundary, termination or truncation alike: with no critic there is nothing to
        bootstrap a truncated episode with, so its return counts only the rewards it received (Tianshou bootstraps
        the running mean of the returns there, a guess that ignores the state; we add nothing);
      - the rollout edge is a cut too: an episode still running after the last row gets the rewards seen so far,
        nothing carried into the next rollout (whose policy has changed). This shortens the horizon of the last
        ~1 / (1 - gamma) rows of each env; masking the unfinished tail instead would drop every row once episodes
        outlast a rollout (InvertedPendulum's 1000 steps against 205 per env);
      - a stale row (the step after a boundary: reward 0, action ignored) is invalid: valid_mask is False there
        and its return is 0. It never leaks into a valid row: the row before it is a boundary, which cuts the sum.
    """
    num_steps = rewards.shape[0]
    episode_over = terminations | truncations
    keep_accumulating = (~episode_over).to(rewards.dtype)
    returns = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[0])  # the rollout edge: nothing after the last row
    for t in reversed(range(num_steps)):
        running = rewards[t] + gamma * keep_accumulating[t] * running
        returns[t] = running
    valid_mask = torch.cat([~prev_episode_over[None], ~episode_over[:-1]], dim=0)
    return returns * valid_mask, valid_mask


def normalize_returns(returns: torch.Tensor, valid: torch.Tensor, return_rms: RunningMeanStd) -> torch.Tensor:
    """Tianshou's PGPolicy.process_fn: standardise with the statistics of the earlier batches, then add this batch's
    valid returns to them (the first batch, before any statistics, passes unchanged: mean 0, var 1)."""
    normalised = (returns - float(return_rms.mean)) / float(np.sqrt(return_rms.var + 1e-8))
    return_rms.update(returns[valid].cpu().numpy())
    return normalised * valid


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp_min(1)


def reinforce_loss(agent: Agent, obs, actions, returns, valid) -> tuple[torch.Tensor, dict]:
    """-E[log pi(a|s) * G] over the whole batch (Tianshou's PGPolicy.learn: no baseline beyond the return
    normalisation, no entropy bonus, no gradient clipping). Stale rows (valid == False) contribute nothing."""
    mask = valid.to(torch.float32)
    _, logprob, entropy = agent.get_action(obs, actions)
    pg_loss = -masked_mean(logprob * returns, mask)
    stats = dict(policy_loss=pg_loss, entropy=masked_mean(entropy, mask))
    return pg_loss, {name: value.detach() for name, value in stats.items()}  # logged, not differentiated


if __name__ == "__main__":
    args = tyro.cli(Args)
    keys = dict(obs_rms=dict, return_rms=dict)  # besides weights, optimiser, counters
    checkpoint = load_torch(args.resume, SCRIPT, keys) if args.resume else None
    if checkpoint:  # the saved args, with the flags of this command that may change on resume applied
        args = resume_args(Args, checkpoint, args.resume)
    validate_args(args)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    threads = choose_speed_levers(args, this_machine(device), checkpoint)  # prints them; args keep the resolved values
    args.batch_size = int(args.num_envs * args.num_steps)
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

    agent = Agent(int(np.prod(obs_shape)), int(np.prod(action_shape)), args.init_logstd).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate)  # Tianshou: torch's default eps

    # Normalisation, update-then-normalise: every observation EnvPool returns (reset, regular, an episode's last one,
    # the reset one of a stale step) enters the statistics once, on arrival, and is then normalised with the updated
    # statistics and stored normalised.
    obs_rms = RunningMeanStd(obs_shape)
    return_rms = RunningMeanStd(())  # of the valid discounted returns, for their normalisation
    normalisers = {"obs_rms": obs_rms, "return_rms": return_rms}
    start_iteration, global_step = 1, 0
    if checkpoint:  # weights, Adam, RNG and normaliser states (one line if they do not fit); prints where the run resumes
        start_iteration, global_step = restore_torch(args.resume, checkpoint, agent, optimizer, args, extra=normalisers)
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
        return counters | weights | {"rng": torch_rng_states()} | statistics

    # ALGO Logic: Storage setup
    obs = torch.zeros((args.num_steps, args.num_envs) + obs_shape, device=device)
    actions = torch.zeros((args.num_steps, args.num_envs) + action_shape, device=device)
    rewards = torch.zeros((args.num_steps, args.num_envs), device=device)
    terminations = torch.zeros((args.num_steps, args.num_envs), dtype=torch.bool, device=device)
    truncations = torch.zeros((args.num_steps, args.num_envs), dtype=torch.bool, device=device)

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

    for iteration in range(start_iteration, args.num_iterations + 1):
        if args.anneal_lr:  # linearly, from --learning-rate towards 0 after the last iteration
            optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / args.num_iterations) * args.learning_rate

        for step in range(0, args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs

            with torch.no_grad():
                action, _, _ = agent.get_action(next_obs)
            actions[step] = action

            # TRY NOT TO MODIFY: execute the game and log data. On a stale step (the one after a boundary)
            # EnvPool ignores the action and returns the reset observation with reward 0; compute_returns masks that row.
            # The env gets the action bounded (--action-bound); the buffer keeps the sample whose log-prob was stored.
            env_actions = env_action(action.cpu().numpy(), action_low, action_high, args.action_bound)
            next_obs_np, reward, term, trunc, info = envs.step(env_actions)
            episode_over = term | trunc
            rewards[step] = torch.from_numpy(reward).to(device)  # raw: the returns are normalised instead
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

        # discounted returns (see compute_returns for the autoreset and rollout-edge rules), normalised
        with torch.no_grad():
            returns, valid_mask = compute_returns(rewards, terminations, truncations, prev_episode_over, args.gamma)
            prev_episode_over = terminations[-1] | truncations[-1]  # carried into the next rollout's row 0
            if args.norm_returns:
                returns = normalize_returns(returns, valid_mask, return_rms)

        # flatten the batch: one named field per argument of the loss
        rollout = dict(obs=obs, actions=actions, returns=returns, valid=valid_mask)
        batch = {name: x.reshape((args.batch_size,) + x.shape[2:]) for name, x in rollout.items()}

        # Optimizing the policy: one gradient step on the whole batch (Tianshou: --repeat-per-collect 1, no --batch-size)
        loss, stats = reinforce_loss(agent, **batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

        sps = progress.sps(global_step)
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        for name in ("policy_loss", "entropy"):
            writer.add_scalar(f"losses/{name}", stats[name].item(), global_step)
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

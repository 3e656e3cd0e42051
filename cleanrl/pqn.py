# PQN (Parallel Q-Networks) for classic control on Gymnasium vector envs, same-step autoreset done right.
# Gallici et al., 2024, "Simplifying Deep Temporal Difference Learning": many envs, no replay buffer, no target
# network, LayerNorm in the Q-network, Q(lambda) targets over each rollout. Hyperparameters: CleanRL's pqn.py.
# Autoreset semantics: "The Value of Autoresetting" (Gymnasium), same-step mode.
from cleanrl_utils.stop import StopAfterIteration, exit_at_once_on_signals, ignore_signals_in_worker, stopped_line

if __name__ == "__main__":
    exit_at_once_on_signals()  # Ctrl-C while the libraries below load: one line, no traceback

import atexit
import multiprocessing
import os
import random
import sys
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import tyro

from cleanrl_utils.checkpoint import load_torch, restore_torch, resume_args, resumed_env_seed, save_torch, torch_rng_states
from cleanrl_utils.checks import (
    check_epsilon_schedule,
    check_gymnasium_env,
    check_memory,
    check_positive,
    check_rollout_shape,
    check_run_args,
)
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
from cleanrl_utils.vector_env_state import SavedVectorEnv
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
    """whether to save the model weights and args to `runs/{run_name}/{exp_name}.cleanrl_model`"""
    log_dir: str = "runs"
    """the folder the run's tensorboard events (and saved model) go under"""
    checkpoint_every: int = 0
    """save a resumable checkpoint to `runs/{run_name}/checkpoint.pt` every N iterations (0: only at Ctrl-C and at the end)"""
    keep_checkpoints: bool = False
    """keep every checkpoint as `checkpoint-{global_step}.pt` too, to evaluate the run's best point afterwards:
    `python -m cleanrl_utils.evaluate --model-path runs/{run_name} --greedy`"""
    resume: str | None = None
    """continue from a checkpoint: same run folder, args, step counter, lr and epsilon schedules, optimiser, RNG and (sync) env states"""
    capture_video: bool = False
    """film an evaluation episode to `runs/{run_name}/videos/` every --video-every iterations and at the end, in a separate process (the training envs never render)"""
    video_every: int = 100
    """iterations between evaluation videos with --capture-video"""

    # Algorithm specific arguments (CleanRL's pqn.py)
    env_id: str = "CartPole-v1"
    """the id of the environment (a Gymnasium env with discrete actions and vector observations, e.g. CartPole-v1, Acrobot-v1, MountainCar-v0, LunarLander-v3 with Box2D)"""
    total_timesteps: int = 500_000
    """total timesteps of the experiments (agent steps, counting every env); changed on --resume, it extends or shortens the run and leaves the epsilon schedule as it was (see --exploration-fraction)"""
    learning_rate: float = 2.5e-4
    """the learning rate of the RAdam optimizer"""
    num_envs: int = 4
    """the number of parallel game environments"""
    num_steps: int = 128
    """the number of steps to run in each environment per rollout (the Q(lambda) targets span one rollout)"""
    anneal_lr: bool = True
    """Toggle learning rate annealing"""
    gamma: float = 0.99
    """the discount factor gamma"""
    q_lambda: float = 0.65
    """the lambda of the Q(lambda) targets (0: one-step Q-learning targets, 1: Monte Carlo returns)"""
    num_minibatches: int = 4
    """the number of mini-batches"""
    update_epochs: int = 4
    """the K epochs over each rollout"""
    start_e: float = 1.0
    """the starting epsilon for exploration"""
    end_e: float = 0.05
    """the ending epsilon for exploration"""
    exploration_fraction: float = 0.5
    """the fraction of `total-timesteps` it takes from start-e to go end-e: of the run's first --total-timesteps, in env steps, kept when --resume extends or shortens the run"""
    max_grad_norm: float = 10.0
    """the maximum norm for the gradient clipping"""
    max_episode_steps: int | None = None
    """time limit per episode in agent steps (default: the env's registered limit); reaching it truncates"""
    vector_mode: str = "sync"
    """`sync` (SyncVectorEnv, envs stepped in this process) or `async` (AsyncVectorEnv, one subprocess per env)"""
    torch_threads: int = 1
    """torch intra-op threads on CPU (0: auto, OMP_NUM_THREADS if set, else one per core); 1 is fastest for these tiny MLPs"""

    # to be filled in runtime (not flags)
    batch_size: tyro.conf.Suppress[int] = 0
    minibatch_size: tyro.conf.Suppress[int] = 0
    num_iterations: tyro.conf.Suppress[int] = 0
    exploration_steps: tyro.conf.Suppress[float] = 0.0  # --exploration-fraction x the first --total-timesteps


def validate_args(args: Args) -> None:
    """Exit with one clear line (no traceback) on impossible settings, before anything is written."""
    check_run_args(args)
    check_rollout_shape(args.num_envs, args.num_steps, args.num_minibatches, args.update_epochs, args.total_timesteps)
    check_positive(args, "max_episode_steps", "max_grad_norm")
    check_epsilon_schedule(args)
    if not 0 <= args.q_lambda <= 1:
        sys.exit(f"error: --q-lambda must be in [0, 1], got {args.q_lambda}")
    if args.vector_mode not in ("sync", "async"):
        sys.exit(f"error: --vector-mode must be sync or async, got {args.vector_mode!r}")
    observation_space, action_space = check_gymnasium_env(
        args.env_id,
        "CartPole-v1, Acrobot-v1, MountainCar-v0",
        fits=lambda obs, action: isinstance(action, gym.spaces.Discrete),
    )
    if not isinstance(action_space, gym.spaces.Discrete):
        sys.exit(f"error: --env-id {args.env_id!r} has {action_space} actions; this script needs discrete ones")
    if not isinstance(observation_space, gym.spaces.Box) or len(observation_space.shape) != 1:
        sys.exit(f"error: --env-id {args.env_id!r} has {observation_space} observations; this script needs a flat Box")
    obs_bytes = 4 * observation_space.shape[0]
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


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class QNetwork(nn.Module):
    """CleanRL's PQN network: 120-84 ReLU with LayerNorm before each activation, which keeps Q-learning stable
    without a target network (the paper's point)."""

    def __init__(self, obs_dim: int, num_actions: int):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 120)),
            nn.LayerNorm(120),
            nn.ReLU(),
            layer_init(nn.Linear(120, 84)),
            nn.LayerNorm(84),
            nn.ReLU(),
            layer_init(nn.Linear(84, num_actions)),
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.network(obs)


def evaluation_player(
    saved: dict, *, num_envs: int, seed: int, device: torch.device, greedy: bool, epsilon: float, render: bool
) -> Player:
    """How `cleanrl_utils.evaluate` plays a model this script saved (and films it during training): epsilon-greedy
    on the Q-values, as CleanRL evaluates its Q-learners (a uniformly random action with probability `epsilon`, 0
    with `greedy`; coin flips seeded with `seed`); videos are extra episodes in a Gymnasium env of the same id."""
    train_args = saved["args"]
    envs = make_env(train_args["env_id"], num_envs, "sync", train_args["max_episode_steps"])
    num_actions = int(envs.single_action_space.n)
    q_network = QNetwork(envs.single_observation_space.shape[0], num_actions)
    q_network.load_state_dict(saved["model_state_dict"])
    q_network.to(device).eval()
    rng, epsilon = np.random.default_rng(seed), 0.0 if greedy else epsilon

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            q_values = q_network(torch.as_tensor(obs, dtype=torch.float32, device=device))
        explore = rng.random(len(obs)) < epsilon
        return np.where(explore, rng.integers(0, num_actions, len(obs)), q_values.argmax(dim=1).cpu().numpy())

    return Player(envs=envs, act=act, film_env_id=train_args["env_id"], reset_seed=seed)


def linear_schedule(start_e: float, end_e: float, duration: float, t: int) -> float:
    """From start_e at t = 0 down to end_e at t = duration, then end_e (validate_args: end_e <= start_e)."""
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


def q_lambda_returns_same_step(
    next_values: torch.Tensor,  # (T, N): max_a Q(obs_{t+1}, a): values[t + 1], after the last row max Q(next_obs)
    final_values: torch.Tensor,  # (T, N): max_a Q(info["final_obs"], a) on truncated rows (truncation_values)
    rewards: torch.Tensor,  # (T, N)
    terminations: torch.Tensor,  # (T, N) bool
    truncations: torch.Tensor,  # (T, N) bool
    gamma: float,
    q_lambda: float,
) -> torch.Tensor:
    """Q(lambda) targets of a same-step autoreset rollout, (T, N):
        G_t = r_t + gamma * ((1 - lambda) * max_a Q(s_{t+1}, a) + lambda * G_{t+1}),
    the Q-learning lambda-return PQN trains on (the max, not the behaviour policy's action, so exploration does not
    bias it). Its chain is cut at every boundary ("The Value of Autoresetting"): a termination's target is r_t alone;
    a truncation's is r_t + gamma * max Q(final obs), the real last observation in info["final_obs"], never the
    reset observation same-step mode returns, and never G_{t+1}, which is another episode's. The last row of the
    rollout bootstraps fully from max Q(next_obs). A step both terminated and truncated counts as terminated.
    (CleanRL's pqn.py cuts only the (1 - lambda) part at a boundary: lambda * G_{t+1} leaks the next episode in.)"""
    next_values = torch.where(truncations & ~terminations, final_values, next_values)
    next_values = torch.where(terminations, torch.zeros_like(next_values), next_values)
    episode_over = terminations | truncations
    returns = torch.zeros_like(rewards)
    next_return = next_values[-1]  # after the rollout, G_{T} is replaced by its one-step bootstrap
    for t in reversed(range(rewards.shape[0])):
        blend = torch.where(episode_over[t], next_values[t], (1 - q_lambda) * next_values[t] + q_lambda * next_return)
        returns[t] = rewards[t] + gamma * blend
        next_return = returns[t]
    return returns


def truncation_values(q_network: QNetwork, info: dict, term, trunc) -> torch.Tensor:
    """(N,): max_a Q(info["final_obs"], a) on the rows this step truncated (and did not terminate), 0 elsewhere: what
    a truncation bootstraps (see q_lambda_returns_same_step). One extra forward pass, for those rows only."""
    device = next(q_network.parameters()).device
    final_values = torch.zeros(len(trunc), device=device)
    truncated = np.flatnonzero(trunc & ~term)
    if truncated.size:
        final_obs = torch.as_tensor(np.stack(info["final_obs"][truncated]), dtype=torch.float32, device=device)
        with torch.no_grad():
            final_values[truncated] = q_network(final_obs).max(dim=1).values
    return final_values


def td_loss(q_network: QNetwork, obs, actions, returns) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean squared error between Q(obs, action) and its Q(lambda) target on one minibatch (every row of a same-step
    rollout is a real step: plain means); also the Q-values, for the log."""
    q_values = q_network(obs).gather(1, actions[:, None]).squeeze(1)
    return F.mse_loss(q_values, returns), q_values.detach()


if __name__ == "__main__":
    args = tyro.cli(Args)
    keys = dict(env_state=object, next_obs=torch.Tensor, recent_returns=list)  # besides weights, optimiser, counters
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
    if not args.exploration_steps:  # a fresh run, or a checkpoint older than the field: its run's total at the time
        args.exploration_steps = args.exploration_fraction * args.total_timesteps
    run_name, run_dir = run_folder(args, args.resume)  # a resumed run continues in its checkpoint's folder
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic

    # env setup. Sync envs are saved in the checkpoint and continue their episodes on resume; async ones
    # (subprocesses) cannot be snapshotted: a resumed async run plays new episodes, the unfinished ones go unlogged.
    env_seed = resumed_env_seed(args.seed, checkpoint["iteration"] if checkpoint else 0)
    envs = make_env(args.env_id, args.num_envs, args.vector_mode, args.max_episode_steps)
    obs_shape = envs.single_observation_space.shape

    num_actions = int(envs.single_action_space.n)
    q_network = QNetwork(obs_shape[0], num_actions).to(device)
    optimizer = torch.optim.RAdam(q_network.parameters(), lr=args.learning_rate)  # CleanRL's and the paper's choice
    start_iteration, global_step = 1, 0
    recent_returns: list[float] = []
    saved_envs = SavedVectorEnv(envs)  # its state_dict() is None where the envs cannot be saved (async, MuJoCo)
    if checkpoint:  # weights, Adam, RNG and env states (one line if they do not fit); prints where the run resumes
        extra = {"env_state": saved_envs}
        start_iteration, global_step = restore_torch(args.resume, checkpoint, q_network, optimizer, args, extra=extra)
        recent_returns = list(checkpoint["recent_returns"])
    writer = make_writer(args, run_name, run_dir, checkpoint["global_step"] if checkpoint else None)  # after every check

    def model_file(path: str) -> str:
        """The `.cleanrl_model` format `cleanrl_utils.evaluate` reads: script name, args, weights."""
        save_torch(path, {**WRITTEN_BY, "model_state_dict": q_network.state_dict(), "args": vars(args)})
        return path

    def training_state(iteration: int) -> dict:
        counters = WRITTEN_BY | dict(run_name=run_name, args=vars(args), iteration=iteration, global_step=global_step)
        weights = dict(model_state_dict=q_network.state_dict(), optimizer_state_dict=optimizer.state_dict())
        envs_state = dict(env_state=saved_envs.state_dict(), next_obs=next_obs.cpu(), recent_returns=recent_returns)
        return counters | weights | {"rng": torch_rng_states()} | envs_state

    # ALGO Logic: Storage setup
    obs = torch.zeros((args.num_steps, args.num_envs) + obs_shape, device=device)
    actions = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long, device=device)
    rewards = torch.zeros((args.num_steps, args.num_envs), device=device)
    terminations = torch.zeros((args.num_steps, args.num_envs), dtype=torch.bool, device=device)
    truncations = torch.zeros((args.num_steps, args.num_envs), dtype=torch.bool, device=device)
    values = torch.zeros((args.num_steps, args.num_envs), device=device)  # max_a Q(obs_t, a)
    final_values = torch.zeros((args.num_steps, args.num_envs), device=device)  # max Q(info["final_obs"]) where truncated

    # and SPS from here; the restored returns are not counted as since the resume
    progress = ProgressLine(global_step, args.num_iterations * args.batch_size, episodes_before=len(recent_returns))
    videos = VideoJobs(run_dir, model_file)
    stop = StopAfterIteration()  # from here on Ctrl-C/SIGTERM finish the iteration, checkpoint, exit 0
    if checkpoint and checkpoint["env_state"] is not None:
        # The restored sync envs continue the very episodes the checkpoint interrupted: with the RNG
        # states restored, the resumed run logs exactly what the uninterrupted one would have.
        next_obs = checkpoint["next_obs"].to(device)
    else:
        next_obs_np, _ = envs.reset(seed=env_seed)
        next_obs = torch.as_tensor(next_obs_np, dtype=torch.float32, device=device)

    for iteration in range(start_iteration, args.num_iterations + 1):
        if args.anneal_lr:  # linearly, from --learning-rate at iteration 1 towards 0 after the last one
            optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / args.num_iterations) * args.learning_rate

        for step in range(0, args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs

            # ALGO LOGIC: epsilon-greedy, a coin flip per env from numpy's global RNG (saved in checkpoints)
            epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_steps, global_step)
            explore = torch.as_tensor(np.random.random(args.num_envs) < epsilon, device=device)
            random_actions = torch.as_tensor(np.random.randint(num_actions, size=args.num_envs), device=device)
            with torch.no_grad():
                q_values = q_network(next_obs)
            values[step], greedy_actions = q_values.max(dim=1)
            action = torch.where(explore, random_actions, greedy_actions)
            actions[step] = action

            # TRY NOT TO MODIFY: execute the game and log data. Same-step autoreset: at a boundary next_obs is
            # already the reset observation of the next episode; the episode's last one is info["final_obs"][i].
            next_obs_np, reward, term, trunc, info = envs.step(action.cpu().numpy())
            rewards[step] = torch.as_tensor(reward, dtype=torch.float32, device=device)
            terminations[step] = torch.as_tensor(term, device=device)
            truncations[step] = torch.as_tensor(trunc, device=device)
            next_obs = torch.as_tensor(next_obs_np, dtype=torch.float32, device=device)
            final_values[step] = truncation_values(q_network, info, term, trunc)

            if "episode" in info:
                for i in np.flatnonzero(info["_episode"]):
                    writer.add_scalar("charts/episodic_return", info["episode"]["r"][i], global_step)
                    writer.add_scalar("charts/episodic_length", info["episode"]["l"][i], global_step)
                    recent_returns.append(float(info["episode"]["r"][i]))

        # Q(lambda) targets from the rollout's own max-Q values (see q_lambda_returns_same_step for the autoreset rules)
        with torch.no_grad():
            next_values = torch.cat([values[1:], q_network(next_obs).max(dim=1).values[None]], dim=0)
            returns = q_lambda_returns_same_step(
                next_values, final_values, rewards, terminations, truncations, args.gamma, args.q_lambda
            )

        # flatten the batch: one named field per argument of the loss
        rollout = dict(obs=obs, actions=actions, returns=returns)
        batch = {name: x.reshape((args.batch_size,) + x.shape[2:]) for name, x in rollout.items()}

        # Optimizing the Q-network: epochs of minibatches over the rollout, no replay, no target network
        for epoch in range(args.update_epochs):
            b_inds = torch.randperm(args.batch_size, device=device)
            for start in range(0, args.batch_size, args.minibatch_size):
                mb_inds = b_inds[start : start + args.minibatch_size]
                loss, q_taken = td_loss(q_network, **{name: x[mb_inds] for name, x in batch.items()})
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(q_network.parameters(), args.max_grad_norm)
                optimizer.step()

        sps = progress.sps(global_step)
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        writer.add_scalar("charts/epsilon", epsilon, global_step)
        writer.add_scalar("losses/td_loss", loss.item(), global_step)  # the last minibatch's
        writer.add_scalar("losses/q_values", q_taken.mean().item(), global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        writer.add_scalar("charts/torch_threads", threads.count, global_step)
        threads.update()  # fewer threads while another process computes on these cores

        # Read the stop flag once: a signal landing between two reads must not skip the save.
        stopping = stop.requested
        finite = torch_all_finite(q_network, loss)
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

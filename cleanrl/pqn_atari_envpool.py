# PQN (Parallel Q-Networks) for Atari through EnvPool, next-step autoreset done right.
# Gallici et al., 2024, "Simplifying Deep Temporal Difference Learning": many envs, no replay buffer, no target
# network, LayerNorm in the Q-network, Q(lambda) targets over each rollout. Hyperparameters: CleanRL's
# pqn_atari_envpool.py. Autoreset semantics: "The Value of Autoresetting" (Gymnasium), next-step mode.
# Words: with episodic_life an *episode* ends at every life loss (the targets and the masks see those); a
# *game* is all lives, and charts/episodic_return reports whole games.
from cleanrl_utils.stop import StopAfterIteration, exit_at_once_on_signals, stopped_line

if __name__ == "__main__":
    exit_at_once_on_signals()  # Ctrl-C while the libraries below load: one line, no traceback

import os
import random
import sys
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn as nn
import tyro

from cleanrl_utils.checkpoint import load_torch, restore_torch, resume_args, resumed_env_seed, save_torch, torch_rng_states
from cleanrl_utils.checks import (
    check_envpool_id,
    check_epsilon_schedule,
    check_memory,
    check_positive,
    check_rollout_shape,
    check_run_args,
)
from cleanrl_utils.envpool_time_limit import make_envpool
from cleanrl_utils.evaluate import Player, play_in_bf16, written_by
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
    """whether to save the model weights and args to `runs/{run_name}/{exp_name}.cleanrl_model`"""
    log_dir: str = "runs"
    """the folder the run's tensorboard events (and saved model) go under"""
    checkpoint_every: int = 0
    """save a resumable checkpoint to `runs/{run_name}/checkpoint.pt` every N iterations (0: only at Ctrl-C and at the end)"""
    keep_checkpoints: bool = False
    """keep every checkpoint as `checkpoint-{global_step}.pt` too, to evaluate the run's best point afterwards:
    `python -m cleanrl_utils.evaluate --model-path runs/{run_name} --greedy`"""
    resume: str | None = None
    """continue from a checkpoint: same run folder, args, step counter, lr and epsilon schedules, optimiser and RNG states"""
    capture_video: bool = False
    """film an evaluation game to `runs/{run_name}/videos/` every --video-every iterations and at the end, in a separate process (the training envs never render)"""
    video_every: int = 1000
    """iterations between evaluation videos with --capture-video"""

    # Algorithm specific arguments (CleanRL's pqn_atari_envpool.py)
    env_id: str = "Breakout-v5"
    """the id of the environment (any EnvPool Atari id, e.g. Pong-v5, Breakout-v5, BeamRider-v5)"""
    total_timesteps: int = 10_000_000
    """total timesteps of the experiments (agent steps, counting every env; frames = 4x); changed on --resume, it extends or shortens the run and leaves the epsilon schedule as it was"""
    learning_rate: float = 2.5e-4
    """the learning rate of the RAdam optimizer"""
    num_envs: int = 8
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
    end_e: float = 0.01
    """the ending epsilon for exploration"""
    exploration_fraction: float = 0.10
    """the fraction of `total-timesteps` it takes from start-e to go end-e: of the run's first --total-timesteps, in env steps, kept when --resume extends or shortens the run"""
    max_grad_norm: float = 10.0
    """the maximum norm for the gradient clipping"""
    max_episode_steps: int = 27_000
    """time limit per game in agent steps (27,000 = 108,000 frames); reaching it truncates"""

    # Speed levers: each keeps the learning curve (see README); auto picks what is fastest on this machine
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """the network trunk's precision (heads stay fp32). auto: bf16 autocast where the machine computes bf16 natively (a CPU with AVX512-BF16 or AMX, as oneDNN sees it; CUDA compute capability >= 8.0), else fp32. The run saves the resolved value"""
    channels_last: Literal["auto", "on", "off"] = "auto"
    """channels-last memory format for the convolutions. auto: on in fp32 and on CUDA, off for bf16 on CPU"""
    uint8_obs: bool = True
    """store rollout observations as uint8 and scale to [0, 1] inside the network (else float32)"""
    torch_threads: int = 0
    """torch intra-op threads on CPU. 0 (auto): OMP_NUM_THREADS if set, else the cores no other process keeps busy, re-checked every 5 s. Set N for bit-identical reruns"""

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
    check_envpool_id(args.env_id, "envpool.atari", num_envs=args.num_envs)
    obs_bytes = 4 * 84 * 84 * (1 if args.uint8_obs else 4)
    check_memory(args.num_steps * args.num_envs * (obs_bytes + 40), "the rollout storage", "--num-envs or --num-steps")


def make_env(env_id: str, num_envs: int, seed: int, max_episode_steps: int = 27_000, render_mode: str | None = None):
    """EnvPool Atari with the standard DeepMind preprocessing (84x84 grey, 4-frame stack,
    frame-skip 4, up to 30 no-ops, fire on reset), life loss as termination and clipped rewards.
    `info["reward"]` keeps the unclipped reward and `info["terminated"]` marks game over.
    `render_mode="rgb_array"` (evaluation videos only) makes `render()` return full RGB frames."""
    # The limit is exact: a game over on the limit step stays a termination (EnvPool alone says truncated).
    atari = dict(episodic_life=True, reward_clip=True, render_mode=render_mode)
    return make_envpool(env_id, max_episode_steps, env_type="gymnasium", num_envs=num_envs, seed=seed, **atari)


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class QNetwork(nn.Module):
    """CleanRL's PQN network: the Nature CNN with LayerNorm before every ReLU, one Q-value per action. LayerNorm keeps
    Q-learning stable without a target network (the paper's point)."""

    def __init__(self, num_actions: int, bf16: bool = False, channels_last: bool = False):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)),
            nn.LayerNorm([32, 20, 20]),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.LayerNorm([64, 9, 9]),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.LayerNorm([64, 7, 7]),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.LayerNorm(512),
            nn.ReLU(),
        )
        self.q_head = layer_init(nn.Linear(512, num_actions))
        self.bf16, self.channels_last = bf16, channels_last
        if channels_last:
            self.network.to(memory_format=torch.channels_last)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        # Observations arrive as uint8 0..255 (or float32 with --no-uint8-obs). Integers up to 256
        # are exact in bf16, so in bf16 precision we cast once, straight to the compute dtype and
        # layout (a no-op layout change for the rollout storage, which is kept in that layout).
        dtype = torch.bfloat16 if self.bf16 else torch.float32
        memory_format = torch.channels_last if self.channels_last else torch.contiguous_format
        # cast, then change the layout: one copy doing both is a slow strided loop (32 stacks: 0.72 against 0.39 ms, Zen 3)
        x = obs.to(dtype).contiguous(memory_format=memory_format)
        conv1 = self.network[0]
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            # x / 255 folded into conv1's weight: conv(x, w / 255) = conv(x / 255, w), with the same
            # parameters and gradients, but no pass over the whole batch.
            h = self.network[1:](nn.functional.conv2d(x, conv1.weight * (1.0 / 255.0), conv1.bias, stride=4))
        # The head runs in fp32: Q-values feed the targets, where bf16's 8-bit mantissa would blur
        # differences between actions and between steps.
        return self.q_head(h.float())


def evaluation_player(
    saved: dict, *, num_envs: int, seed: int, device: torch.device, greedy: bool, epsilon: float, render: bool
) -> Player:
    """How `cleanrl_utils.evaluate` plays a model this script saved (and films it during training): whole games,
    every life, filmed by EnvPool's own renderer; epsilon-greedy on the Q-values (a uniformly random action with
    probability `epsilon`, 0 with `greedy`; coin flips seeded with `seed`)."""
    train_args = saved["args"]
    render_mode = "rgb_array" if render else None
    envs = make_env(train_args["env_id"], num_envs, seed, train_args["max_episode_steps"], render_mode=render_mode)
    bf16, channels_last = play_in_bf16(train_args, device), train_args["channels_last"] == "on"
    num_actions = int(envs.single_action_space.n)
    q_network = QNetwork(num_actions, bf16=bf16, channels_last=channels_last)
    q_network.load_state_dict(saved["model_state_dict"])
    q_network.to(device).eval()
    rng, epsilon = np.random.default_rng(seed), 0.0 if greedy else epsilon

    @torch.no_grad()
    def act(obs: np.ndarray) -> np.ndarray:
        greedy_actions = q_network(torch.as_tensor(obs, device=device)).argmax(dim=1).cpu().numpy()
        explore = rng.random(len(obs)) < epsilon
        return np.where(explore, rng.integers(0, num_actions, len(obs)), greedy_actions)

    return Player(envs=envs, act=act, whole_games=True)


def linear_schedule(start_e: float, end_e: float, duration: float, t: int) -> float:
    """From start_e at t = 0 down to end_e at t = duration, then end_e (validate_args: end_e <= start_e)."""
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


def q_lambda_returns(
    values: torch.Tensor,  # (T+1, N): max_a Q(obs_t, a), last row max Q(obs after the rollout)
    rewards: torch.Tensor,  # (T, N)
    terminations: torch.Tensor,  # (T, N) bool
    truncations: torch.Tensor,  # (T, N) bool
    prev_episode_over: torch.Tensor,  # (N,) bool: the step before row 0 ended an episode
    gamma: float,
    q_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Q(lambda) targets of a next-step autoreset rollout. Returns (returns, valid_mask), both (T, N):
        G_t = r_t + gamma * ((1 - lambda) * max_a Q(s_{t+1}, a) + lambda * G_{t+1}).
    In next-step mode the observation returned at a boundary step is the episode's last one, and the step after a
    boundary is stale: the env ignores its action and returns the reset observation. So ("The Value of
    Autoresetting"), as for PPO's GAE:
      - a termination (a life loss included, under episodic_life) bootstraps nothing: G_t = r_t;
      - a truncation bootstraps max Q(next obs) = values[t + 1], the episode's real last observation, and
        never G_{t+1}, which is the stale row's;
      - the chain is cut at every boundary, so no target mixes two episodes;
      - a stale row is invalid: valid_mask is False there and its target is 0; the loss skips it.
    The rollout's last row bootstraps fully from values[T]."""
    episode_over = terminations | truncations
    next_values = torch.where(terminations, torch.zeros_like(values[1:]), values[1:])
    returns = torch.zeros_like(rewards, dtype=values.dtype)
    next_return = next_values[-1]  # after the rollout, G_{T} is replaced by its one-step bootstrap
    for t in reversed(range(rewards.shape[0])):
        blend = torch.where(episode_over[t], next_values[t], (1 - q_lambda) * next_values[t] + q_lambda * next_return)
        returns[t] = rewards[t] + gamma * blend
        next_return = returns[t]
    valid_mask = torch.cat([~prev_episode_over[None], ~episode_over[:-1]], dim=0)
    return returns * valid_mask, valid_mask


def td_loss(q_network: QNetwork, obs, actions, returns, valid) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean squared error between Q(obs, action) and its Q(lambda) target over the minibatch's valid rows (a stale
    row's action was ignored by the env: it teaches nothing); also the mean Q(obs, action) of those rows, for the
    log."""
    mask = valid.to(torch.float32)
    q_values = q_network(obs).gather(1, actions[:, None]).squeeze(1)
    count = mask.sum().clamp_min(1)
    return (((q_values - returns) ** 2) * mask).sum() / count, (q_values.detach() * mask).sum() / count


if __name__ == "__main__":
    args = tyro.cli(Args)
    checkpoint = load_torch(args.resume, SCRIPT) if args.resume else None
    if checkpoint:  # the saved args, with the flags of this command that may change on resume applied
        args = resume_args(Args, checkpoint, args.resume)
    validate_args(args)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    threads = choose_speed_levers(args, this_machine(device), checkpoint)  # prints them; args keep the resolved values
    args.batch_size = int(args.num_envs * args.num_steps)
    args.minibatch_size = int(args.batch_size // args.num_minibatches)
    args.num_iterations = args.total_timesteps // args.batch_size
    say_steps_run(args.total_timesteps, args.batch_size, "--num-envs x --num-steps")
    if not args.exploration_steps:  # a fresh run (a resumed one keeps its first total's schedule)
        args.exploration_steps = args.exploration_fraction * args.total_timesteps
    run_name, run_dir = run_folder(args, args.resume)  # a resumed run continues in its checkpoint's folder
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic

    # env setup. EnvPool cannot snapshot its games: a resumed run plays new ones (new seeds); unfinished ones go unlogged.
    env_seed = resumed_env_seed(args.seed, checkpoint["iteration"] if checkpoint else 0)
    envs = make_env(args.env_id, args.num_envs, env_seed, args.max_episode_steps)

    num_actions = int(envs.single_action_space.n)
    q_network = QNetwork(num_actions, bf16=args.precision == "bf16", channels_last=args.channels_last == "on").to(device)
    optimizer = torch.optim.RAdam(q_network.parameters(), lr=args.learning_rate)  # CleanRL's and the paper's choice
    start_iteration, global_step = 1, 0
    if checkpoint:  # weights, Adam and RNG states (one line if they do not fit); prints where the run resumes
        start_iteration, global_step = restore_torch(args.resume, checkpoint, q_network, optimizer, args)
    writer = make_writer(args, run_name, run_dir, checkpoint["global_step"] if checkpoint else None)  # after every check

    def model_file(path: str) -> str:
        """The `.cleanrl_model` format `cleanrl_utils.evaluate` reads: script name, args, weights."""
        save_torch(path, {**WRITTEN_BY, "model_state_dict": q_network.state_dict(), "args": vars(args)})
        return path

    def training_state(iteration: int) -> dict:
        counters = WRITTEN_BY | dict(run_name=run_name, args=vars(args), iteration=iteration, global_step=global_step)
        weights = dict(model_state_dict=q_network.state_dict(), optimizer_state_dict=optimizer.state_dict())
        return counters | weights | {"rng": torch_rng_states()}

    # ALGO Logic: Storage setup. Observations stay uint8 (4x less memory traffic than float32).
    obs_dtype = torch.uint8 if args.uint8_obs else torch.float32
    # They are stored in the network's memory layout, so a minibatch converts dtype only, not layout.
    obs_shape = envs.single_observation_space.shape
    layout = torch.channels_last if q_network.channels_last else torch.contiguous_format
    obs = torch.zeros((args.num_steps * args.num_envs,) + obs_shape, dtype=obs_dtype, device=device)
    obs = obs.contiguous(memory_format=layout).view((args.num_steps, args.num_envs) + obs_shape)
    actions = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long, device=device)
    rewards = torch.zeros((args.num_steps, args.num_envs), device=device)
    terminations = torch.zeros((args.num_steps, args.num_envs), dtype=torch.bool, device=device)
    truncations = torch.zeros((args.num_steps, args.num_envs), dtype=torch.bool, device=device)
    values = torch.zeros((args.num_steps + 1, args.num_envs), device=device)  # max_a Q(obs_t, a)

    # Episode statistics per *game* (not per life), from the unclipped reward.
    episode_returns = np.zeros(args.num_envs, dtype=np.float64)
    recent_returns: list[float] = []

    progress = ProgressLine(global_step, args.num_iterations * args.batch_size, "games")  # and SPS from here
    videos = VideoJobs(run_dir, model_file)
    stop = StopAfterIteration()  # from here on Ctrl-C/SIGTERM finish the iteration, checkpoint, exit 0
    next_obs_np, _ = envs.reset()
    next_obs = torch.from_numpy(next_obs_np).to(device, obs_dtype)
    # The step before the first one is not a boundary: row 0 of the first rollout is valid.
    prev_episode_over = torch.zeros(args.num_envs, dtype=torch.bool, device=device)

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
                values[step], greedy_actions = q_network(next_obs).max(dim=1)
            action = torch.where(explore, random_actions, greedy_actions)
            actions[step] = action

            # TRY NOT TO MODIFY: execute the game and log data. On a stale step (the one after a boundary)
            # EnvPool ignores the action and returns the reset observation with reward 0; q_lambda_returns masks that row.
            next_obs_np, reward, term, trunc, info = envs.step(action.cpu().numpy())
            rewards[step] = torch.from_numpy(reward).to(device)
            terminations[step] = torch.from_numpy(term).to(device)
            truncations[step] = torch.from_numpy(trunc).to(device)
            next_obs = torch.from_numpy(next_obs_np).to(device, obs_dtype)

            # A game ends at game over (info["terminated"]; `term` is also set on every life loss) or at
            # the time limit. Its length is EnvPool's elapsed_step, which does not count stale steps.
            episode_returns += info["reward"]
            game_over = info["terminated"].astype(bool) | trunc
            for i in np.flatnonzero(game_over):
                writer.add_scalar("charts/episodic_return", episode_returns[i], global_step)
                writer.add_scalar("charts/episodic_length", info["elapsed_step"][i], global_step)
                recent_returns.append(float(episode_returns[i]))
            episode_returns[game_over] = 0.0

        # Q(lambda) targets from the rollout's own max-Q values (see q_lambda_returns for the autoreset rules)
        with torch.no_grad():
            values[args.num_steps] = q_network(next_obs).max(dim=1).values
            returns, valid_mask = q_lambda_returns(
                values, rewards, terminations, truncations, prev_episode_over, args.gamma, args.q_lambda
            )
            prev_episode_over = terminations[-1] | truncations[-1]  # carried into the next rollout's row 0

        # flatten the batch: one named field per argument of the loss
        rollout = dict(obs=obs, actions=actions, returns=returns, valid=valid_mask)
        batch = {name: x.reshape((args.batch_size,) + x.shape[2:]) for name, x in rollout.items()}

        # Optimizing the Q-network: epochs of minibatches over the rollout, no replay, no target network
        for epoch in range(args.update_epochs):
            b_inds = torch.randperm(args.batch_size, device=device)
            for start in range(0, args.batch_size, args.minibatch_size):
                mb_inds = b_inds[start : start + args.minibatch_size]
                loss, q_taken = td_loss(q_network, **{name: x.index_select(0, mb_inds) for name, x in batch.items()})
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(q_network.parameters(), args.max_grad_norm)
                optimizer.step()

        sps = progress.sps(global_step)
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        writer.add_scalar("charts/epsilon", epsilon, global_step)
        writer.add_scalar("losses/td_loss", loss.item(), global_step)  # the last minibatch's
        writer.add_scalar("losses/q_values", q_taken.item(), global_step)
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

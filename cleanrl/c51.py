# C51 (categorical distributional DQN) for classic control on Gymnasium vector envs, same-step autoreset done right.
# Bellemare, Dabney and Munos, 2017, "A Distributional Perspective on Reinforcement Learning".
# Hyperparameters and network: CleanRL's c51.py (its defaults for CartPole-v1).
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
from cleanrl_utils.checks import (
    check_epsilon_schedule,
    check_gymnasium_env,
    check_memory,
    check_positive,
    check_replay_args,
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
from cleanrl_utils.steps import say_steps_run, updates_due
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
    `python -m cleanrl_utils.evaluate --model-path runs/{run_name} --greedy` (with the replay buffer in each, a kept checkpoint is as large as the buffer: see --checkpoint-buffer)"""
    checkpoint_buffer: bool = True
    """save the replay buffer in the checkpoint; without it a resumed run refills its buffer: gradient steps resume once it again holds --learning-starts transitions"""
    resume: str | None = None
    """continue from a checkpoint: same run folder, args, step counter, networks, Adam, RNG, replay buffer and (sync) env states"""
    capture_video: bool = False
    """film an evaluation episode to `runs/{run_name}/videos/` every --video-every iterations and at the end, in a separate process (the training envs never render)"""
    video_every: int = 50_000
    """iterations (vector env steps) between evaluation videos with --capture-video"""

    # Algorithm specific arguments (CleanRL's c51.py defaults)
    env_id: str = "CartPole-v1"
    """the id of the environment (a Gymnasium env with discrete actions and vector observations, e.g. CartPole-v1, Acrobot-v1, MountainCar-v0)"""
    total_timesteps: int = 500_000
    """total timesteps of the experiments (agent steps, counting every env); changed on --resume, it extends or shortens the run and leaves the epsilon schedule as it was (see --exploration-fraction)"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer (Adam, eps 0.01 / batch size as in the paper)"""
    num_envs: int = 1
    """the number of parallel game environments"""
    buffer_size: int = 10_000
    """the replay memory buffer size (transitions, all envs together)"""
    gamma: float = 0.99
    """the discount factor gamma"""
    n_atoms: int = 101
    """the number of atoms of the return distribution's support"""
    v_min: float = -100.0
    """the return of the support's lowest atom"""
    v_max: float = 100.0
    """the return of the support's highest atom"""
    target_network_frequency: int = 500
    """the timesteps it takes to update the target network"""
    batch_size: int = 128
    """the batch size of sample from the replay memory"""
    start_e: float = 1.0
    """the starting epsilon for exploration"""
    end_e: float = 0.05
    """the ending epsilon for exploration"""
    exploration_fraction: float = 0.5
    """the fraction of `total-timesteps` it takes from start-e to go end-e: of the run's first --total-timesteps, in env steps, kept when --resume extends or shortens the run (epsilon that reached --end-e stays there)"""
    learning_starts: int = 10_000
    """timestep to start learning"""
    train_frequency: int = 10
    """the frequency of training (one gradient step per this many timesteps, counting every env)"""
    max_episode_steps: int | None = None
    """time limit per episode in agent steps (default: the env's registered limit); reaching it truncates"""
    vector_mode: str = "sync"
    """`sync` (SyncVectorEnv, envs stepped in this process) or `async` (AsyncVectorEnv, one subprocess per env)"""
    torch_threads: int = 1
    """torch intra-op threads on CPU (0: auto, OMP_NUM_THREADS if set, else one per core); 1 is fastest for these tiny MLPs"""

    # to be filled in runtime (not flags)
    num_iterations: tyro.conf.Suppress[int] = 0
    exploration_steps: tyro.conf.Suppress[float] = 0.0  # --exploration-fraction x the first --total-timesteps


def validate_args(args: Args, checkpoint: dict | None = None) -> None:
    """Exit with one clear line (no traceback) on impossible settings, before anything is written. `checkpoint`: the
    run is resumed from it."""
    check_run_args(args)
    check_replay_args(args, resumed=checkpoint is not None)
    check_epsilon_schedule(args)
    check_positive(args, "train_frequency", "target_network_frequency", "max_episode_steps")
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
    check_memory(args.buffer_size * (2 * obs_bytes + 16), "the replay buffer", "--buffer-size")


def make_env(
    env_id: str, num_envs: int, vector_mode: str = "sync", max_episode_steps: int | None = None
) -> gym.vector.VectorEnv:
    """`num_envs` copies of a Gymnasium env in one vector env with *same-step* autoreset, under Gymnasium's vector
    RecordEpisodeStatistics (`info["episode"]`, mask `info["_episode"]`, at every boundary). Seed with
    `envs.reset(seed=...)`: sub-env i gets seed + i. (As cleanrl/ppo.py's.)"""
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


class QNetwork(nn.Module):
    """CleanRL's C51 network: the classic-control 120-84 ReLU MLP with `n_atoms` logits per action; a softmax over
    each action's atoms gives its return distribution on the fixed support `atoms`, and Q is that distribution's
    mean."""

    def __init__(self, obs_dim: int, num_actions: int, n_atoms: int, v_min: float, v_max: float):
        super().__init__()
        self.num_actions, self.n_atoms = num_actions, n_atoms
        self.register_buffer("atoms", torch.linspace(v_min, v_max, steps=n_atoms))
        self.network = nn.Sequential(
            nn.Linear(obs_dim, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, num_actions * n_atoms)
        )

    def pmfs(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, actions, atoms): each action's probabilities over the support."""
        return torch.softmax(self.network(x).view(len(x), self.num_actions, self.n_atoms), dim=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Q-values, (batch, actions): the mean of each action's distribution."""
        return (self.pmfs(x) * self.atoms).sum(dim=2)


def evaluation_player(
    saved: dict, *, num_envs: int, seed: int, device: torch.device, greedy: bool, epsilon: float, render: bool
) -> Player:
    """How `cleanrl_utils.evaluate` plays a model this script saved (and films it during training): epsilon-greedy
    on the Q-values, as CleanRL evaluates C51 (a uniformly random action with probability `epsilon`, 0 with
    `greedy`; coin flips seeded with `seed`); videos are extra episodes in a Gymnasium env of the same id."""
    train_args = saved["args"]
    envs = make_env(train_args["env_id"], num_envs, "sync", train_args["max_episode_steps"])
    num_actions = int(envs.single_action_space.n)
    support = (train_args["n_atoms"], train_args["v_min"], train_args["v_max"])
    q_network = QNetwork(envs.single_observation_space.shape[0], num_actions, *support)
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


class ReplayBuffer:
    """Transitions of `num_envs` envs in numpy ring arrays of (buffer_size // num_envs, num_envs, ...): one row per
    vector step. `sample` draws from numpy's global RNG, so a resumed run (RNG states restored) draws what the
    uninterrupted one would have. The whole state goes into a checkpoint with `state_dict()`."""

    NAMES = ("obs", "next_obs", "actions", "rewards", "dones")

    def __init__(self, buffer_size: int, num_envs: int, obs_shape: tuple):
        self.rows, self.num_envs = buffer_size // num_envs, num_envs
        self.obs = np.zeros((self.rows, num_envs) + obs_shape, dtype=np.float32)
        self.next_obs = np.zeros_like(self.obs)
        self.actions = np.zeros((self.rows, num_envs), dtype=np.int64)
        self.rewards = np.zeros((self.rows, num_envs), dtype=np.float32)
        self.dones = np.zeros((self.rows, num_envs), dtype=np.float32)
        self.pos = 0  # the row the next step goes into
        self.env_steps = 0  # transitions added since the buffer was empty (all envs)

    def add(self, obs, next_obs, actions, rewards, terminations) -> None:
        """One vector step. `next_obs` must be the real next observations (real_next_obs), `terminations` the done
        flags: truncations are stored as not done (they bootstrap)."""
        for name, value in zip(self.NAMES, (obs, next_obs, actions, rewards, terminations)):
            getattr(self, name)[self.pos] = value
        self.pos = (self.pos + 1) % self.rows
        self.env_steps += self.num_envs

    def sample(self, batch_size: int, device: torch.device) -> tuple[torch.Tensor, ...]:
        """(obs, actions, rewards, next_obs, dones), drawn uniformly with replacement over the stored transitions."""
        filled = min(self.env_steps // self.num_envs, self.rows)
        rows, envs = np.divmod(np.random.randint(0, filled * self.num_envs, size=batch_size), self.num_envs)
        batch = (self.obs, self.actions, self.rewards, self.next_obs, self.dones)
        return tuple(torch.as_tensor(array[rows, envs], device=device) for array in batch)

    def state_dict(self) -> dict:
        """The arrays as torch views (no copy; torch.save writes them at once) and the counters as ints."""
        arrays = {name: torch.from_numpy(getattr(self, name)) for name in self.NAMES}
        return arrays | dict(pos=self.pos, env_steps=self.env_steps)

    def load_state_dict(self, state: dict) -> None:
        """{} (a checkpoint saved with --no-checkpoint-buffer) leaves the buffer empty: it refills. Raises (KeyError,
        ValueError) if a saved buffer does not fit this one."""
        if not state:
            return
        for name in self.NAMES:
            saved, array = state[name].numpy(), getattr(self, name)
            if saved.shape != array.shape or saved.dtype != array.dtype:
                raise ValueError(f"saved {name} {saved.dtype}{list(saved.shape)}, this run's {array.dtype}{list(array.shape)}")
        if not (0 <= state["pos"] < self.rows and state["env_steps"] >= 0):
            raise ValueError(f"saved position {state['pos']} or count {state['env_steps']} out of range")
        for name in self.NAMES:
            getattr(self, name)[...] = state[name].numpy()
        self.pos, self.env_steps = int(state["pos"]), int(state["env_steps"])


def real_next_obs(next_obs: np.ndarray, term: np.ndarray, trunc: np.ndarray, info: dict) -> np.ndarray:
    """The observations each env reached with this step. In same-step mode the env resets inside the step that
    ends an episode: there `next_obs` is already the next episode's first observation, and the episode's real last
    one is in info["final_obs"]. That is what the transition stores, at terminations (done = 1, never
    bootstrapped) and truncations (done = 0: the time limit is not part of the MDP, so Q(final obs) bootstraps)."""
    episode_over = np.flatnonzero(term | trunc)
    if not episode_over.size:
        return next_obs
    real = next_obs.copy()
    for i in episode_over:
        real[i] = info["final_obs"][i]
    return real


def project_distribution(
    next_pmfs: torch.Tensor, rewards: torch.Tensor, dones: torch.Tensor, gamma: float, atoms: torch.Tensor
) -> torch.Tensor:
    """The C51 target (Bellemare et al., Algorithm 1): each atom z_j of the next state's distribution moves to
    r + gamma * z_j (to r alone when done), is clipped into [v_min, v_max], and its probability is split between the
    two atoms around it in proportion to closeness (all of it to an atom it lands on exactly). (batch, atoms)."""
    v_min, v_max, n_atoms = atoms[0], atoms[-1], len(atoms)
    delta_z = (v_max - v_min) / (n_atoms - 1)
    moved = (rewards[:, None] + gamma * (1 - dones[:, None]) * atoms[None]).clamp(v_min, v_max)
    position = (moved - v_min) / delta_z  # in atom units, in [0, n_atoms - 1]
    lower = position.floor().clamp(0, n_atoms - 1)
    upper = position.ceil().clamp(0, n_atoms - 1)
    lower_share = torch.where(upper == lower, torch.ones_like(position), upper - position)
    target = torch.zeros_like(next_pmfs)
    target.scatter_add_(1, lower.long(), lower_share * next_pmfs)
    target.scatter_add_(1, upper.long(), (1 - lower_share) * next_pmfs)
    return target


def td_loss(
    q_network: QNetwork, target_network: QNetwork, obs, actions, rewards, next_obs, dones, gamma: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy between the projected target distribution (the target network's, at its greedy next action)
    and Q's distribution of the action taken. Returns (loss, Q(obs, action))."""
    with torch.no_grad():
        next_all = target_network.pmfs(next_obs)
        next_action = (next_all * target_network.atoms).sum(dim=2).argmax(dim=1)
        next_pmfs = next_all[torch.arange(len(next_obs)), next_action]
        target = project_distribution(next_pmfs, rewards, dones, gamma, target_network.atoms)
    pmfs = q_network.pmfs(obs)[torch.arange(len(obs)), actions]
    loss = -(target * pmfs.clamp(min=1e-5, max=1 - 1e-5).log()).sum(dim=1).mean()
    return loss, (pmfs.detach() * q_network.atoms).sum(dim=1)


if __name__ == "__main__":
    args = tyro.cli(Args)
    keys = dict(target_state_dict=dict, replay_buffer=dict)  # besides weights, Adam, counters
    keys |= dict(env_state=object, obs=torch.Tensor, recent_returns=list)
    checkpoint = load_torch(args.resume, SCRIPT, keys) if args.resume else None
    if checkpoint:  # the saved args, with the flags of this command that may change on resume applied
        args = resume_args(Args, checkpoint, args.resume, MAY_CHANGE_ON_RESUME + ("checkpoint_buffer",))
    validate_args(args, checkpoint)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    threads = choose_speed_levers(args, this_machine(device), checkpoint)  # prints them; args keep the resolved values
    args.num_iterations = args.total_timesteps // args.num_envs  # one iteration = one vector env step
    say_steps_run(args.total_timesteps, args.num_envs, "one step of each of --num-envs envs")
    if not args.exploration_steps:  # a fresh run, or a checkpoint older than the field: its run's total at the time
        first_total = checkpoint["args"]["total_timesteps"] if checkpoint else args.total_timesteps
        args.exploration_steps = args.exploration_fraction * first_total
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
    obs_shape, num_actions = envs.single_observation_space.shape, int(envs.single_action_space.n)

    support = (args.n_atoms, args.v_min, args.v_max)
    q_network = QNetwork(obs_shape[0], num_actions, *support).to(device)
    optimizer = torch.optim.Adam(q_network.parameters(), lr=args.learning_rate, eps=0.01 / args.batch_size)
    target_network = QNetwork(obs_shape[0], num_actions, *support).to(device)
    target_network.load_state_dict(q_network.state_dict())
    rb = ReplayBuffer(args.buffer_size, args.num_envs, obs_shape)
    start_iteration, global_step = 1, 0
    recent_returns: list[float] = []
    saved_envs = SavedVectorEnv(envs)  # its state_dict() is None where the envs cannot be saved (async)
    if checkpoint:  # weights, Adam, RNG, buffer and env states (one line if they do not fit); prints where it resumes
        extra = {"target_state_dict": target_network, "replay_buffer": rb, "env_state": saved_envs}
        start_iteration, global_step = restore_torch(args.resume, checkpoint, q_network, optimizer, args, extra=extra)
        stored = min(rb.env_steps, rb.rows * rb.num_envs)
        print(f"replay buffer: {stored:,} transitions restored" if stored else "replay buffer: refilled from empty")
        recent_returns = list(checkpoint["recent_returns"])
    writer = make_writer(args, run_name, run_dir, checkpoint["global_step"] if checkpoint else None)  # after every check

    def model_file(path: str) -> str:
        """The `.cleanrl_model` format `cleanrl_utils.evaluate` reads: script name, args, weights."""
        save_torch(path, {**WRITTEN_BY, "model_state_dict": q_network.state_dict(), "args": vars(args)})
        return path

    def training_state(iteration: int) -> dict:
        counters = WRITTEN_BY | dict(run_name=run_name, args=vars(args), iteration=iteration, global_step=global_step)
        weights = dict(model_state_dict=q_network.state_dict(), target_state_dict=target_network.state_dict())
        weights |= dict(optimizer_state_dict=optimizer.state_dict())
        replay = dict(replay_buffer=rb.state_dict() if args.checkpoint_buffer else {})
        envs_state = dict(env_state=saved_envs.state_dict(), obs=torch.from_numpy(obs), recent_returns=recent_returns)
        return counters | weights | {"rng": torch_rng_states()} | replay | envs_state

    # and SPS from here; the restored returns are not counted as since the resume
    progress = ProgressLine(global_step, args.num_iterations * args.num_envs, episodes_before=len(recent_returns))
    videos = VideoJobs(run_dir, model_file)
    stop = StopAfterIteration()  # from here on Ctrl-C/SIGTERM finish the iteration, checkpoint, exit 0
    if checkpoint and checkpoint["env_state"] is not None:
        # The restored sync envs continue the very episodes the checkpoint interrupted: with the RNG
        # states and the buffer restored, the resumed run computes exactly what the uninterrupted one would have.
        obs = checkpoint["obs"].numpy()
    else:
        obs, _ = envs.reset(seed=env_seed)
    loss = q_values = None

    for iteration in range(start_iteration, args.num_iterations + 1):
        # ALGO LOGIC: epsilon-greedy, a coin flip per env from numpy's global RNG (saved in checkpoints). Both draws
        # are made every step, so the RNG stream does not depend on the flips; the network runs only if needed.
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_steps, global_step)
        explore = np.random.random(args.num_envs) < epsilon
        actions = np.random.randint(num_actions, size=args.num_envs)
        if not explore.all():
            with torch.no_grad():
                greedy = q_network(torch.as_tensor(obs, dtype=torch.float32, device=device)).argmax(dim=1).cpu().numpy()
            actions = np.where(explore, actions, greedy)
        global_step += args.num_envs

        # TRY NOT TO MODIFY: execute the game and log data. Same-step autoreset: at a boundary next_obs is
        # already the reset observation of the next episode; the episode's last one is info["final_obs"][i].
        next_obs, rewards, term, trunc, info = envs.step(actions)
        if "episode" in info:
            for i in np.flatnonzero(info["_episode"]):
                writer.add_scalar("charts/episodic_return", info["episode"]["r"][i], global_step)
                writer.add_scalar("charts/episodic_length", info["episode"]["l"][i], global_step)
                recent_returns.append(float(info["episode"]["r"][i]))

        # save data to the replay buffer: the real next observations (final ones at boundaries), done = terminated
        rb.add(obs, real_next_obs(next_obs, term, trunc, info), actions, rewards, term)
        obs = next_obs  # CRUCIAL step easy to overlook

        # ALGO LOGIC: training, one gradient step per --train-frequency env steps (counting every env), once the
        # buffer has received --learning-starts transitions (a fresh run: global_step > learning_starts).
        if rb.env_steps > args.learning_starts:
            for _ in range(updates_due(global_step, args.num_envs, args.train_frequency)):
                loss, q_values = td_loss(q_network, target_network, *rb.sample(args.batch_size, device), args.gamma)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

            # copy the network into the target network each time global_step passes a multiple of
            # --target-network-frequency
            if updates_due(global_step, args.num_envs, args.target_network_frequency):
                target_network.load_state_dict(q_network.state_dict())

        # Read the stop flag once: a signal landing between two reads must not skip the save.
        stopping = stop.requested
        last = iteration == args.num_iterations or stopping
        saving = checkpoint_due(iteration, args.num_iterations, args.checkpoint_every, stopping)
        sps = progress.sps(global_step)
        logging = updates_due(global_step, args.num_envs, 1000)  # every 1,000 steps: no per-step host sync
        if logging and loss is not None:
            writer.add_scalar("losses/td_loss", loss.item(), global_step)
            writer.add_scalar("losses/q_values", q_values.mean().item(), global_step)
        if logging:
            writer.add_scalar("charts/epsilon", epsilon, global_step)
            writer.add_scalar("charts/SPS", sps, global_step)
            writer.add_scalar("charts/torch_threads", threads.count, global_step)
        threads.update()  # each iteration, not only when logging: 1,000 steps on crowded cores can take minutes
        if logging or saving:  # a diverged run must never be saved
            where = dict(iteration=iteration, global_step=global_step, checkpoint_path=checkpoint_path, writer=writer)
            exit_if_diverged(torch_all_finite(q_network, loss), **where, resumed_from=args.resume, progress=progress)
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

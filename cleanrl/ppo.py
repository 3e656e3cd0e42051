# PPO for classic control on Gymnasium vector envs, same-step autoreset done right.
# Hyperparameters: CleanRL's classic-control defaults (cleanrl/ppo.py, CartPole-v1).
# Autoreset semantics: "The Value of Autoresetting" (Gymnasium), same-step mode.
import difflib
import io
import multiprocessing
import os
import pickle
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import tyro
from torch.distributions.categorical import Categorical


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
    resume: str | None = None
    """continue from a checkpoint: same run folder, args, step counter, lr schedule, optimiser, RNG and (sync) env states"""
    capture_video: bool = False
    """film an evaluation episode to `runs/{run_name}/videos/` every --video-every iterations and at the end, in a separate process (the training envs never render)"""
    video_every: int = 100
    """iterations between evaluation videos with --capture-video"""

    # Algorithm specific arguments (CleanRL's classic-control defaults)
    env_id: str = "CartPole-v1"
    """the id of the environment (a Gymnasium env with discrete actions and vector observations, e.g. CartPole-v1, Acrobot-v1, MountainCar-v0, LunarLander-v3 with Box2D)"""
    total_timesteps: int = 500_000
    """total timesteps of the experiments (agent steps, counting every env)"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: int = 4
    """the number of parallel game environments"""
    num_steps: int = 128
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 4
    """the number of mini-batches"""
    update_epochs: int = 4
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization (per minibatch)"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 0.01
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: float | None = None
    """the target KL divergence threshold (early stop of the update epochs)"""
    max_episode_steps: int = 0
    """time limit per episode in agent steps; reaching it truncates (0: the env's registered limit)"""
    vector_mode: str = "sync"
    """`sync` (SyncVectorEnv, envs stepped in this process) or `async` (AsyncVectorEnv, one subprocess per env)"""
    torch_threads: int = 1
    """torch intra-op threads on CPU (0: one per core); 1 is fastest for these tiny MLPs"""

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
    if args.max_episode_steps < 0:
        sys.exit(f"error: --max-episode-steps must be >= 0 (0 = the env's own limit), got {args.max_episode_steps}")
    if args.learning_rate <= 0:
        sys.exit(f"error: --learning-rate must be positive, got {args.learning_rate}")
    if not (0 < args.gamma <= 1 and 0 <= args.gae_lambda <= 1):
        sys.exit(f"error: need 0 < --gamma <= 1 and 0 <= --gae-lambda <= 1, got {args.gamma} and {args.gae_lambda}")
    if args.video_every <= 0:
        sys.exit(f"error: --video-every must be a positive integer, got {args.video_every}")
    if args.checkpoint_every < 0:
        sys.exit(f"error: --checkpoint-every must be >= 0 (0 = only at Ctrl-C and at the end), got {args.checkpoint_every}")
    if args.torch_threads < 0:
        sys.exit(f"error: --torch-threads must be >= 0 (0 = one per core), got {args.torch_threads}")
    if args.vector_mode not in ("sync", "async"):
        sys.exit(f"error: --vector-mode must be sync or async, got {args.vector_mode!r}")
    batch_size = args.num_envs * args.num_steps
    if batch_size % args.num_minibatches != 0:
        sys.exit(
            f"error: --num-minibatches {args.num_minibatches} does not divide the batch size "
            f"{batch_size} (= --num-envs {args.num_envs} x --num-steps {args.num_steps})"
        )
    if batch_size > args.total_timesteps:
        sys.exit(f"error: --total-timesteps {args.total_timesteps} is smaller than one rollout ({batch_size} steps)")
    if args.env_id not in gym.registry:
        close = difflib.get_close_matches(args.env_id, list(gym.registry), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; e.g. CartPole-v1, Acrobot-v1, MountainCar-v0"
        sys.exit(f"error: --env-id {args.env_id!r} is not a registered Gymnasium environment{hint}")
    try:
        env = gym.make(args.env_id)
    except gym.error.DependencyNotInstalled as error:
        sys.exit(f"error: --env-id {args.env_id!r} needs a package that is not installed: {str(error).splitlines()[0]}")
    except Exception as error:  # an env that cannot be built here: say so in one line
        sys.exit(
            f"error: --env-id {args.env_id!r} could not be created ({type(error).__name__}: {str(error).splitlines()[0]})"
        )
    observation_space, action_space = env.observation_space, env.action_space
    env.close()
    if not isinstance(action_space, gym.spaces.Discrete):
        sys.exit(
            f"error: --env-id {args.env_id!r} has {action_space} actions; this script needs discrete ones (see ppo_continuous_action.py)"
        )
    if not isinstance(observation_space, gym.spaces.Box) or len(observation_space.shape) != 1:
        sys.exit(f"error: --env-id {args.env_id!r} has {observation_space} observations; this script needs a flat Box")


def make_env(env_id: str, num_envs: int, vector_mode: str = "sync", max_episode_steps: int = 0) -> gym.vector.VectorEnv:
    """`num_envs` copies of a Gymnasium env in one vector env with *same-step* autoreset, under
    Gymnasium's vector RecordEpisodeStatistics (`info["episode"]`, mask `info["_episode"]`, at every
    boundary; its same-step counting is checked in tests/test_ppo.py). Seed with `envs.reset(seed=...)`:
    sub-env i gets seed + i."""
    kwargs = {"max_episode_steps": max_episode_steps} if max_episode_steps > 0 else {}

    def make_one() -> gym.Env:
        if multiprocessing.parent_process() is not None:
            # An AsyncVectorEnv worker. Ctrl-C in a terminal reaches the whole process group: only
            # the main process acts on it (finish the iteration, checkpoint); a worker must not die.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        return gym.make(env_id, **kwargs)

    env_fns = [make_one for _ in range(num_envs)]
    vector_env = gym.vector.SyncVectorEnv if vector_mode == "sync" else gym.vector.AsyncVectorEnv
    envs = vector_env(env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    return gym.wrappers.vector.RecordEpisodeStatistics(envs)


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """Separate 64-64 tanh MLPs for a categorical actor and the value function."""

    def __init__(self, obs_dim: int, num_actions: int):
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, num_actions), std=0.01),
        )

    def get_value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def get_action_and_value(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        probs = Categorical(logits=self.actor(obs), validate_args=False)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(obs).squeeze(-1)


def compute_gae_same_step(
    values: torch.Tensor,  # (T, N): V(obs_t)
    next_values: torch.Tensor,  # (T, N): V(obs_{t+1}); on truncated rows V(info["final_obs"])
    rewards: torch.Tensor,  # (T, N)
    terminations: torch.Tensor,  # (T, N) bool
    truncations: torch.Tensor,  # (T, N) bool
    gamma: float,
    gae_lambda: float,
) -> torch.Tensor:
    """GAE for same-step autoreset rollouts. Returns the advantages, (T, N).

    In same-step mode the env resets inside the step that ends an episode: the observation it
    returns is already the first one of the next episode, and the episode's real last observation
    is in info["final_obs"]. Every step is a real transition, so there is no stale row and no mask.
    The caller builds `next_values`: values[t + 1] on ordinary rows (V(obs after the rollout) for
    the last row), V(info["final_obs"]) on truncated rows (an extra value call for those rows
    only); what it holds on terminated rows is ignored. Then ("The Value of Autoresetting"):
      - a termination bootstraps 0; a truncation bootstraps V(final obs) (partial-episode
        bootstrapping), never V(reset obs), the value of another episode's start;
      - the accumulation stops at every boundary, so nothing flows back across episodes.
    A step both terminated and truncated counts as terminated.
    """
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


class EnvStateUnpickler(pickle.Unpickler):
    """Unpickles the sub-envs of a checkpoint, naming nothing but Gymnasium classes and numpy's
    array, scalar and random-generator reconstructors: a tampered file cannot call anything else."""

    NUMPY = {("numpy", "dtype"), ("numpy", "ndarray"), ("numpy._core.multiarray", "_reconstruct")}
    NUMPY |= {("numpy._core.multiarray", "scalar")}

    def find_class(self, module: str, name: str):
        if (module, name) in self.NUMPY or module.startswith("numpy.random."):
            return super().find_class(module, name)
        if module.startswith("gymnasium."):
            found = super().find_class(module, name)
            if isinstance(found, type):
                return found
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in an env state")


def vector_env_state(envs: gym.vector.VectorEnv) -> dict | None:
    """Everything the episodes in flight depend on, for a SyncVectorEnv under make_env's
    RecordEpisodeStatistics: each sub-env whole (simulator state, `np_random`, TimeLimit's elapsed
    steps, the order-enforcing and checker flags), the episode-statistics accumulators and the
    autoreset bookkeeping. None where that cannot be had: AsyncVectorEnv (the envs live in
    subprocesses), or envs that pickle by constructor arguments (EzPickle: Box2D, MuJoCo), which
    would come back as fresh, un-reset envs.
    The sub-envs are pickled: their state is arbitrary Python objects (CartPole's `state` array and
    `steps_beyond_terminated`, a numpy Generator, wrapper counters), and a pickle gets all of it
    for any classic-control env. It is stored as a uint8 tensor of the pickle so the checkpoint
    still loads with torch.load(weights_only=True); EnvStateUnpickler reads it back."""
    sync_env = envs.unwrapped
    if not isinstance(sync_env, gym.vector.SyncVectorEnv):
        return None
    if any(isinstance(env.unwrapped, gym.utils.EzPickle) for env in sync_env.envs):
        return None
    try:
        sub_envs = pickle.dumps(sync_env.envs)
    except Exception:  # an env holding something unpicklable: resume with fresh episodes
        return None
    return {
        "sub_envs": torch.frombuffer(bytearray(sub_envs), dtype=torch.uint8),
        "autoreset_envs": torch.from_numpy(sync_env._autoreset_envs.copy()),
        "episode_returns": torch.from_numpy(envs.episode_returns.copy()),
        "episode_lengths": torch.from_numpy(envs.episode_lengths.copy()),
        "prev_dones": torch.from_numpy(envs.prev_dones.copy()),
        "episode_count": int(envs.episode_count),
    }


def set_vector_env_state(envs: gym.vector.VectorEnv, state: dict) -> None:
    """Put a vector env made by make_env (sync) back into the state vector_env_state saved."""
    sync_env = envs.unwrapped
    sub_envs = EnvStateUnpickler(io.BytesIO(state["sub_envs"].numpy().tobytes())).load()
    if len(sub_envs) != sync_env.num_envs:
        raise ValueError(f"the saved env state has {len(sub_envs)} envs, not {sync_env.num_envs}")
    for env in sync_env.envs:
        env.close()
    sync_env.envs = sub_envs
    sync_env._autoreset_envs = state["autoreset_envs"].numpy().copy()
    envs.episode_returns = state["episode_returns"].numpy().copy()
    envs.episode_lengths = state["episode_lengths"].numpy().copy()
    envs.prev_dones = state["prev_dones"].numpy().copy()
    envs.episode_count = state["episode_count"]


def ppo_loss(
    agent: Agent,
    obs: torch.Tensor,
    actions: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    old_values: torch.Tensor,
    args: Args,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
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
        checkpoint = load_checkpoint(args.resume, "ppo")
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

    # env setup
    envs = make_env(args.env_id, args.num_envs, args.vector_mode, args.max_episode_steps)
    obs_shape = envs.single_observation_space.shape

    agent = Agent(obs_shape[0], envs.single_action_space.n).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    start_iteration, global_step = 1, 0
    recent_returns: list[float] = []
    if checkpoint:
        agent.load_state_dict(checkpoint["model_state_dict"])
        optimizer.load_state_dict(checkpoint["optimizer_state_dict"])
        set_rng_states(checkpoint["rng"])
        start_iteration, global_step = checkpoint["iteration"] + 1, checkpoint["global_step"]
        recent_returns = list(checkpoint["recent_returns"])
        print(f"resumed {run_name} at iteration {checkpoint['iteration']} (global step {global_step:,})", flush=True)

    def model_file(path: str) -> str:
        """The `.cleanrl_model` format `cleanrl_utils.evaluate` reads: script name, args, weights."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        torch.save({"script": "ppo", "model_state_dict": agent.state_dict(), "args": vars(args)}, path)
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
            "script": "ppo",
            "run_name": run_name,
            "args": vars(args),
            "iteration": iteration,
            "global_step": global_step,
            "model_state_dict": agent.state_dict(),
            "optimizer_state_dict": optimizer.state_dict(),
            "rng": rng_states(),
            "env_state": vector_env_state(envs),
            "next_obs": next_obs.cpu(),
            "recent_returns": recent_returns,
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
    actions = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long, device=device)
    logprobs = torch.zeros((args.num_steps, args.num_envs), device=device)
    rewards = torch.zeros((args.num_steps, args.num_envs), device=device)
    terminations = torch.zeros((args.num_steps, args.num_envs), dtype=torch.bool, device=device)
    truncations = torch.zeros((args.num_steps, args.num_envs), dtype=torch.bool, device=device)
    values = torch.zeros((args.num_steps, args.num_envs), device=device)
    # V(info["final_obs"]), filled on truncated rows only (read only where truncations is set)
    final_values = torch.zeros((args.num_steps, args.num_envs), device=device)

    # TRY NOT TO MODIFY: start the game
    start_global_step = global_step
    start_time = time.time()
    # Progress: on a terminal, one live line rewritten in place every second; otherwise (CI, log
    # files, pipes) a plain line every 10 s.
    live_progress = sys.stdout.isatty()
    last_print = 0.0
    if checkpoint and checkpoint["env_state"] is not None:
        # Sync envs continue the very episodes the checkpoint interrupted: with the RNG states
        # restored, the resumed run logs exactly what the uninterrupted one would have.
        try:
            set_vector_env_state(envs, checkpoint["env_state"])
        except Exception as error:
            sys.exit(f"error: --resume {args.resume!r} holds an env state that cannot be restored ({type(error).__name__})")
        next_obs = checkpoint["next_obs"].to(device)
    else:
        # Fresh episodes. On resume under --vector-mode async (the envs live in subprocesses and
        # cannot be snapshotted) they are seeded from the seed and the iteration, and the episodes
        # the checkpoint interrupted are never logged.
        env_seed = args.seed if checkpoint is None else args.seed + 7919 * checkpoint["iteration"]
        next_obs_np, _ = envs.reset(seed=env_seed)
        next_obs = torch.as_tensor(next_obs_np, dtype=torch.float32, device=device)

    for iteration in range(start_iteration, args.num_iterations + 1):
        # Annealing the rate if instructed to do so.
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            lrnow = frac * args.learning_rate
            optimizer.param_groups[0]["lr"] = lrnow

        for step in range(0, args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs

            # ALGO LOGIC: action logic
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value
            actions[step] = action
            logprobs[step] = logprob

            # TRY NOT TO MODIFY: execute the game and log data.
            # Same-step autoreset: at a boundary next_obs is already the reset observation of the
            # next episode; the episode's last observation is info["final_obs"][i].
            next_obs_np, reward, term, trunc, info = envs.step(action.cpu().numpy())
            rewards[step] = torch.as_tensor(reward, dtype=torch.float32, device=device)
            terminations[step] = torch.as_tensor(term, device=device)
            truncations[step] = torch.as_tensor(trunc, device=device)
            next_obs = torch.as_tensor(next_obs_np, dtype=torch.float32, device=device)

            # A truncation bootstraps V(final obs): one extra value call, for the truncated rows only
            # (the network does not change during the rollout, so now is as good as later).
            truncated = np.flatnonzero(trunc & ~term)
            if truncated.size:
                final_obs = torch.as_tensor(np.stack(info["final_obs"][truncated]), dtype=torch.float32, device=device)
                with torch.no_grad():
                    final_values[step, truncated] = agent.get_value(final_obs)

            if "episode" in info:
                for i in np.flatnonzero(info["_episode"]):
                    writer.add_scalar("charts/episodic_return", info["episode"]["r"][i], global_step)
                    writer.add_scalar("charts/episodic_length", info["episode"]["l"][i], global_step)
                    recent_returns.append(float(info["episode"]["r"][i]))

        # bootstrap value and GAE (see compute_gae_same_step for the autoreset rules)
        with torch.no_grad():
            next_values = torch.cat([values[1:], agent.get_value(next_obs)[None]], dim=0)
            next_values = torch.where(truncations & ~terminations, final_values, next_values)
            advantages = compute_gae_same_step(
                values, next_values, rewards, terminations, truncations, args.gamma, args.gae_lambda
            )
            returns = advantages + values

        # flatten the batch
        b_obs = obs.reshape((-1,) + obs_shape)
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape(-1)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)

        # Optimizing the policy and value network
        clipfracs = []
        for epoch in range(args.update_epochs):
            b_inds = torch.randperm(args.batch_size, device=device)
            for start in range(0, args.batch_size, args.minibatch_size):
                mb_inds = b_inds[start : start + args.minibatch_size]
                loss, stats = ppo_loss(
                    agent,
                    b_obs[mb_inds],
                    b_actions[mb_inds],
                    b_logprobs[mb_inds],
                    b_advantages[mb_inds],
                    b_returns[mb_inds],
                    b_values[mb_inds],
                    args,
                )
                clipfracs.append(stats["clipfrac"])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

            if args.target_kl is not None and stats["approx_kl"] > args.target_kl:
                break

        var_y = b_returns.var()
        explained_var = (1 - (b_returns - b_values).var() / var_y).item() if var_y > 0 else float("nan")

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

        # Read the flag once: a Ctrl-C arriving after this point is acted on one iteration later, so
        # a run never stops without the checkpoint it announces.
        stopping = stop_requested
        # A diverged run stops here, before any checkpoint could be overwritten with its state.
        if not (torch.isfinite(loss) and all(torch.isfinite(p).all() for p in agent.parameters())):
            writer.close()
            if live_progress:
                print()  # end the live line before the error message
            saved = (
                f"last good checkpoint: {checkpoint_path}" if os.path.exists(checkpoint_path) else "no checkpoint was written"
            )
            sys.exit(f"error: non-finite loss or parameters at iteration {iteration} (global step {global_step:,}); {saved}")
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

# PPO for Atari through EnvPool on several processes (torch.distributed), next-step autoreset done right.
# Launch: `torchrun --standalone --nproc_per_node P cleanrl/ppo_atari_envpool_distributed.py` (one host) or
# `torchrun --nnodes N --nproc_per_node P --rdzv-backend c10d --rdzv-endpoint HOST:PORT ...` on every host. Plain
# `python` runs one process that trains exactly as cleanrl/ppo_atari_envpool.py does. Each process steps its own
# --local-num-envs games; DistributedDataParallel averages the gradients (gloo on CPU, NCCL on CUDA), so every
# process holds the same weights. Process 0 writes tensorboard, checkpoints and videos.
# Ctrl-C or SIGTERM to torchrun: it passes the signal to every process, which finishes its iteration (all agree through
# an all-reduce), process 0 checkpoints, all exit 0. torchrun SIGKILLs them after --shutdown-timeout (30 s): raise it
# if one iteration takes longer. torchrun itself then exits 1 with its own traceback, as after any signal.
# Hyperparameters: CleanRL's Atari table (EnvPool paper, appendix F, Table 3).
# Autoreset semantics: "The Value of Autoresetting" (Gymnasium), next-step mode.
# Words: with episodic_life an *episode* ends at every life loss (GAE and the masks see those); a
# *game* is all lives, and charts/episodic_return reports whole games.
from cleanrl_utils.stop import StopAfterIteration, exit_at_once_on_signals, stopped_line

if __name__ == "__main__":
    exit_at_once_on_signals()  # Ctrl-C while the libraries below load: one line, no traceback

import os
import random
import sys
import time
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import tyro
from torch.distributions.categorical import Categorical
from torch.nn.parallel import DistributedDataParallel

import cleanrl_utils.checkpoint as checkpoint_utils
from cleanrl_utils.checkpoint import load_torch, restore_torch, resume_args, save_torch, torch_rng_states
from cleanrl_utils.checks import check_envpool_id, check_memory, check_positive, check_rollout_shape, check_run_args
from cleanrl_utils.distributed import (
    CommTimer,
    all_reduce_mean,
    broadcast_from_rank0,
    check_one_gpu_per_process,
    distributed,
    exit_on_lost_peer,
    gather_to_rank0,
    init_distributed,
    leave_the_group_and_exit,
    local_env_seed,
    only_first_local_rank_speaks,
    rank_seed,
    world_from_env,
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
    """continue from a checkpoint: same run folder, args, step counter, lr schedule, optimiser and RNG states"""
    capture_video: bool = False
    """film an evaluation game to `runs/{run_name}/videos/` every --video-every iterations and at the end, in a separate process (the training envs never render)"""
    video_every: int = 1000
    """iterations between evaluation videos with --capture-video"""

    # Algorithm specific arguments (EnvPool paper, Table 3)
    env_id: str = "Breakout-v5"
    """the id of the environment (any EnvPool Atari id, e.g. Pong-v5, Breakout-v5, BeamRider-v5)"""
    total_timesteps: int = 10_000_000
    """total timesteps of the experiments (agent steps, counting every env; frames = 4x)"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    local_num_envs: int = 8
    """the number of parallel game environments of each process (the global batch is processes x this)"""
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
    """Toggles advantages normalization (per minibatch, over valid rows only)"""
    clip_coef: float = 0.1
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
    max_episode_steps: int = 27_000
    """time limit per game in agent steps (27,000 = 108,000 frames); reaching it truncates"""

    # Speed levers: each keeps the learning curve (see README); auto picks what is fastest on this machine
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """the network trunk's precision (heads stay fp32). auto: bf16 autocast where the machine computes bf16 natively (a CPU with AVX512-BF16 or AMX, as oneDNN sees it; CUDA compute capability >= 8.0), else fp32. The run saves the resolved value"""
    channels_last: Literal["auto", "on", "off"] = "auto"
    """channels-last memory format for the convolutions. auto: on in fp32 and on CUDA, off for bf16 on CPU"""
    uint8_obs: bool = True
    """store rollout observations as uint8 and scale to [0, 1] inside the network (else float32)"""
    fused_adam: bool = True
    """Adam as one fused kernel over all parameters (on CPU 0.6 ms instead of 2.3 ms a minibatch for this network)"""
    torch_threads: int = 0
    """torch intra-op threads on CPU. 0 (auto): OMP_NUM_THREADS if set, else the cores no other process keeps busy, re-checked every 5 s. Set N for bit-identical reruns"""
    dist_timeout: float = 300.0
    """seconds a collective waits for the other processes before this one stops with an error (a dead or hung peer)"""

    # to be filled in runtime (not flags)
    num_envs: tyro.conf.Suppress[int] = 0  # over all processes
    batch_size: tyro.conf.Suppress[int] = 0  # over all processes
    local_batch_size: tyro.conf.Suppress[int] = 0
    minibatch_size: tyro.conf.Suppress[int] = 0  # per process
    num_iterations: tyro.conf.Suppress[int] = 0


def processes(count: int) -> str:
    return f"{count} process" if count == 1 else f"{count} processes"


def validate_args(args: Args, world_size: int) -> None:
    """Exit with one clear line (no traceback) on impossible settings, before anything is written."""
    check_run_args(args)
    check_positive(args, "local_num_envs", "dist_timeout")
    check_rollout_shape(
        args.local_num_envs, args.num_steps, args.num_minibatches, args.update_epochs, args.total_timesteps, "local_num_envs"
    )
    global_batch = world_size * args.local_num_envs * args.num_steps
    if global_batch > args.total_timesteps:
        sys.exit(
            f"error: --total-timesteps {args.total_timesteps} is smaller than one rollout of all {processes(world_size)} "
            f"({global_batch} steps = {world_size} x --local-num-envs {args.local_num_envs} x --num-steps {args.num_steps})"
        )
    check_positive(args, "max_episode_steps")
    check_envpool_id(args.env_id, "envpool.atari", num_envs=args.local_num_envs, flag="--local-num-envs")
    obs_bytes = 4 * 84 * 84 * (1 if args.uint8_obs else 4)
    check_memory(
        args.num_steps * args.local_num_envs * (obs_bytes + 40), "the rollout storage", "--local-num-envs/--num-steps"
    )


def make_env(
    env_id: str,
    num_envs: int,
    seed: int,
    max_episode_steps: int = 27_000,
    render_mode: str | None = None,
    num_threads: int = 0,
):
    """EnvPool Atari with the standard DeepMind preprocessing (84x84 grey, 4-frame stack,
    frame-skip 4, up to 30 no-ops, fire on reset), life loss as termination and clipped rewards.
    `info["reward"]` keeps the unclipped reward and `info["terminated"]` marks game over.
    `render_mode="rgb_array"` (evaluation videos only) makes `render()` return full RGB frames.
    `num_threads` 0 lets EnvPool choose (one thread per env, up to the cores)."""
    # The limit is exact: a game over on the limit step stays a termination (EnvPool alone says truncated).
    atari = dict(episodic_life=True, reward_clip=True, render_mode=render_mode, num_threads=num_threads)
    return make_envpool(env_id, max_episode_steps, env_type="gymnasium", num_envs=num_envs, seed=seed, **atari)


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """Nature CNN trunk shared by a categorical actor and a value head."""

    def __init__(self, num_actions: int, bf16: bool = False, channels_last: bool = False):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(512, num_actions), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1)
        self.bf16, self.channels_last = bf16, channels_last
        if channels_last:
            self.network.to(memory_format=torch.channels_last)

    def hidden(self, obs: torch.Tensor) -> torch.Tensor:
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
            # parameters and gradients, but no pass over the whole batch (about 5% of a CPU update).
            h = self.network[1:](nn.functional.conv2d(x, conv1.weight * (1.0 / 255.0), conv1.bias, stride=4))
        # The heads run in fp32: log-probs and values feed ratios and returns, where bf16's
        # 8-bit mantissa would add noise to importance ratios that should start at exactly 1.
        return h.float()

    def get_value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.hidden(obs)).squeeze(-1)

    def get_action_and_value(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        hidden = self.hidden(obs)
        probs = Categorical(logits=self.actor(hidden), validate_args=False)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(hidden).squeeze(-1)


def evaluation_player(
    saved: dict, *, num_envs: int, seed: int, device: torch.device, greedy: bool, epsilon: float, render: bool
) -> Player:
    """How `cleanrl_utils.evaluate` plays a model this script saved (and films it during training): whole games,
    every life, filmed by EnvPool's own renderer; actions sampled from the policy, or its most likely one with
    `greedy`. `epsilon` is DQN's, unused here."""
    train_args = saved["args"]
    render_mode = "rgb_array" if render else None
    envs = make_env(train_args["env_id"], num_envs, seed, train_args["max_episode_steps"], render_mode=render_mode)
    bf16, channels_last = play_in_bf16(train_args, device), train_args["channels_last"] == "on"
    agent = Agent(envs.single_action_space.n, bf16=bf16, channels_last=channels_last)
    agent.load_state_dict(saved["model_state_dict"])
    agent.to(device).eval()

    @torch.no_grad()
    def act(obs: np.ndarray) -> np.ndarray:
        obs = torch.as_tensor(obs, device=device)
        action = agent.actor(agent.hidden(obs)).argmax(dim=-1) if greedy else agent.get_action_and_value(obs)[0]
        return action.cpu().numpy()

    return Player(envs=envs, act=act, whole_games=True)


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


# ---- distribution: the DDP-wrapped loss (process group, seeds and collectives: cleanrl_utils/distributed.py) ----


class PPOLossModule(nn.Module):
    """DistributedDataParallel arms its gradient all-reduce in forward(), so the loss runs through a module's forward."""

    def __init__(self, agent: Agent, args: Args):
        super().__init__()
        self.agent, self.args = agent, args

    def forward(self, **minibatch):
        return ppo_loss(self.agent, **minibatch, args=self.args)


def loss_module(agent: Agent, args: Args, device: torch.device, timer: CommTimer | None = None) -> nn.Module:
    """The loss to differentiate: DDP-wrapped in a process group (its constructor broadcasts process 0's weights), plain
    otherwise. Keep the returned module alive until backward() has run: its reducer does the all-reduce."""
    module = PPOLossModule(agent, args)
    if not distributed():
        return module
    ddp = DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None)
    if timer is not None:
        ddp.register_comm_hook(None, timer.hook)
    return ddp


def kl_says_stop(approx_kl: torch.Tensor, target_kl: float | None, device: torch.device) -> bool:
    """--target-kl's early stop, decided on the mean KL over processes: every process stops at the same epoch, or
    DDP's all-reduces would pair one process's next minibatch with another's next iteration (a hang, or mixed-up
    gradients)."""
    return target_kl is not None and all_reduce_mean([approx_kl.item()], device)[0] > target_kl


if __name__ == "__main__":
    rank, world_size, local_rank, local_world_size = world_from_env()
    if rank != 0:  # process 0 prints the run's lines (folder, progress); the others only their own errors
        sys.stdout = open(os.devnull, "w")
    with only_first_local_rank_speaks(local_rank):  # every process checks the same flags and file
        args = tyro.cli(Args)
        checkpoint = load_torch(args.resume, SCRIPT, {"world_size": int}) if args.resume else None
        if checkpoint and checkpoint["world_size"] != world_size:  # the batch, env seeds and shapes depend on it
            saved = checkpoint["args"]
            sys.exit(
                f"error: --resume {args.resume!r} was written by {processes(checkpoint['world_size'])} x --local-num-envs "
                f"{saved.get('local_num_envs')}, this launch has {world_size}; relaunch with "
                f"{processes(checkpoint['world_size'])} in all (torchrun --nnodes x --nproc-per-node)"
            )
        if checkpoint:  # the saved args, with the flags of this command that may change on resume applied
            args = resume_args(Args, checkpoint, args.resume, checkpoint_utils.MAY_CHANGE_ON_RESUME + ("dist_timeout",))
        validate_args(args, world_size)
        check_one_gpu_per_process(args.cuda)
    args.num_envs = world_size * args.local_num_envs
    args.batch_size = int(args.num_envs * args.num_steps)
    args.local_batch_size = int(args.local_num_envs * args.num_steps)
    args.minibatch_size = int(args.local_batch_size // args.num_minibatches)
    args.num_iterations = args.total_timesteps // args.batch_size
    say_steps_run(args.total_timesteps, args.batch_size, "processes x --local-num-envs x --num-steps")
    device = init_distributed(args.dist_timeout, args.cuda)
    exit_on_lost_peer(rank, world_size, args.dist_timeout)
    # Every process resolves the same levers on a uniform cluster; under torchrun OMP_NUM_THREADS (torchrun sets 1)
    threads = choose_speed_levers(args, this_machine(device), checkpoint)
    # Process 0 makes (or, resumed, names: a resumed run continues in its checkpoint's folder) the run folder; the
    # others learn its name from it.
    run_name, run_dir = broadcast_from_rank0(run_folder(args, args.resume) if rank == 0 else None)
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")

    # TRY NOT TO MODIFY: seeding. Every process seeds torch alike, so the network starts identical everywhere.
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic

    # env setup. EnvPool cannot snapshot its games: a resumed run plays new ones (new seeds); unfinished ones go unlogged.
    # The processes of one host split its cores between their EnvPool threads.
    resumed_at = checkpoint["iteration"] if checkpoint else 0
    env_seed = local_env_seed(args.seed, rank, args.local_num_envs, resumed_at)
    env_threads = 0 if local_world_size == 1 else max(1, len(os.sched_getaffinity(0)) // local_world_size)
    envs = make_env(args.env_id, args.local_num_envs, env_seed, args.max_episode_steps, num_threads=env_threads)

    agent = Agent(envs.single_action_space.n, bf16=args.precision == "bf16", channels_last=args.channels_last == "on").to(
        device
    )
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=args.fused_adam)
    start_iteration, global_step = 1, 0
    if checkpoint:  # weights, Adam and RNG states (one line if they do not fit); prints where the run resumes
        start_iteration, global_step = restore_torch(args.resume, checkpoint, agent, optimizer, args)
    if rank > 0:  # after the weights: process r samples actions and minibatches from its own random stream
        torch.manual_seed(rank_seed(args.seed, rank, resumed_at))
    comm_timer = CommTimer()
    loss_fn = loss_module(agent, args, device, comm_timer)
    seeds = ", ".join(f"rank {r}: {s}..{s + args.local_num_envs - 1}" for r, s in gather_to_rank0((rank, env_seed), rank))
    backend = dist.get_backend() if distributed() else "no process group"
    print(f"{world_size} process(es) x {args.local_num_envs} envs ({backend}); env seeds {seeds}", flush=True)
    # after every check; process 0 alone writes events, checkpoints and videos
    writer = make_writer(args, run_name, run_dir, checkpoint["global_step"] if checkpoint else None) if rank == 0 else None

    def model_file(path: str) -> str:
        """The `.cleanrl_model` format `cleanrl_utils.evaluate` reads: script name, args, weights."""
        save_torch(path, {**WRITTEN_BY, "model_state_dict": agent.state_dict(), "args": vars(args)})
        return path

    def training_state(iteration: int) -> dict:
        counters = WRITTEN_BY | dict(run_name=run_name, args=vars(args), iteration=iteration, global_step=global_step)
        counters["world_size"] = world_size  # process 0's RNG states; the others reseed on resume (rank_seed)
        weights = dict(model_state_dict=agent.state_dict(), optimizer_state_dict=optimizer.state_dict())
        return counters | weights | {"rng": torch_rng_states()}

    # ALGO Logic: Storage setup. Observations stay uint8 (4x less memory traffic than float32).
    obs_dtype = torch.uint8 if args.uint8_obs else torch.float32
    rows = (args.num_steps, args.local_num_envs)
    # Observations are kept in the network's memory layout, so a minibatch converts dtype only, not layout.
    obs_shape = envs.single_observation_space.shape
    layout = torch.channels_last if agent.channels_last else torch.contiguous_format
    obs = torch.zeros((args.num_steps * args.local_num_envs,) + obs_shape, dtype=obs_dtype, device=device)
    obs = obs.contiguous(memory_format=layout).view(rows + obs_shape)
    actions = torch.zeros(rows, dtype=torch.long, device=device)
    logprobs = torch.zeros(rows, device=device)
    rewards = torch.zeros(rows, device=device)
    terminations = torch.zeros(rows, dtype=torch.bool, device=device)
    truncations = torch.zeros(rows, dtype=torch.bool, device=device)
    values = torch.zeros((args.num_steps + 1, args.local_num_envs), device=device)

    # Episode statistics per *game* (not per life), from the unclipped reward.
    episode_returns = np.zeros(args.local_num_envs, dtype=np.float64)
    recent_returns: list[float] = []
    timings, timed_iterations = np.zeros(4), 0  # seconds summed after the first iteration: rollout, update, all-reduce, stats

    progress = ProgressLine(global_step, args.num_iterations * args.batch_size, "games")  # and SPS from here
    videos = VideoJobs(run_dir, model_file) if rank == 0 else None
    stop = StopAfterIteration(quiet=rank != 0)  # from here on Ctrl-C/SIGTERM finish the iteration, checkpoint, exit 0
    next_obs_np, _ = envs.reset()
    next_obs = torch.from_numpy(next_obs_np).to(device, obs_dtype)
    # The step before the first one is not a boundary: row 0 of the first rollout is valid.
    prev_episode_over = torch.zeros(args.local_num_envs, dtype=torch.bool, device=device)

    for iteration in range(start_iteration, args.num_iterations + 1):
        threads.update()  # every process: fewer threads while another process computes on these cores
        if args.anneal_lr:  # linearly, from --learning-rate at iteration 1 towards 0 after the last one
            optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / args.num_iterations) * args.learning_rate

        games = []  # (global step, return, length) of the games this process finished in this iteration
        rollout_start = time.perf_counter()
        for step in range(0, args.num_steps):
            global_step += args.num_envs  # all processes' envs: every process counts the same global steps
            obs[step] = next_obs

            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value
            actions[step] = action
            logprobs[step] = logprob

            # TRY NOT TO MODIFY: execute the game and log data. On a stale step (the one after a boundary)
            # EnvPool ignores the action and returns the reset observation with reward 0; compute_gae masks that row.
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
                games.append((global_step, float(episode_returns[i]), int(info["elapsed_step"][i])))
            episode_returns[game_over] = 0.0

        # bootstrap value and GAE (see compute_gae for the autoreset rules)
        with torch.no_grad():
            values[args.num_steps] = agent.get_value(next_obs)
            advantages, valid_mask = compute_gae(
                values, rewards, terminations, truncations, prev_episode_over, args.gamma, args.gae_lambda
            )
            prev_episode_over = terminations[-1] | truncations[-1]  # carried into the next rollout's row 0
            returns = advantages + values[:-1]

        # flatten the batch: one named field per argument of the loss
        rollout = dict(obs=obs, actions=actions, old_logprobs=logprobs, advantages=advantages, returns=returns)
        rollout |= dict(old_values=values[:-1], valid=valid_mask)
        batch = {name: x.reshape((args.local_batch_size,) + x.shape[2:]) for name, x in rollout.items()}

        # Optimizing the policy and value network: each process draws minibatches from its own rollout (advantages
        # normalised per minibatch, as in the sync script); DDP averages the gradients in backward().
        update_start = time.perf_counter()
        clipfracs = []
        for epoch in range(args.update_epochs):
            b_inds = torch.randperm(args.local_batch_size, device=device)
            for start in range(0, args.local_batch_size, args.minibatch_size):
                mb_inds = b_inds[start : start + args.minibatch_size]
                loss, stats = loss_fn(**{name: x.index_select(0, mb_inds) for name, x in batch.items()})
                clipfracs.append(stats["clipfrac"])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

            if kl_says_stop(stats["approx_kl"], args.target_kl, device):
                break
        update_end = time.perf_counter()

        b_returns, b_values, b_valid = batch["returns"], batch["old_values"], batch["valid"]
        valid_values, valid_returns = b_values[b_valid], b_returns[b_valid]
        var_y = valid_returns.var() if len(valid_returns) > 1 else torch.tensor(0.0)  # one row: no variance, no warning
        explained_var = (1 - (valid_returns - valid_values).var() / var_y).item() if var_y > 0 else float("nan")

        # One collective for what every process must agree on: the logged statistics (means over processes), a stop
        # requested on any process (Ctrl-C reaches torchrun, which passes it on; on several hosts perhaps only one),
        # and divergence anywhere. Read the stop flag once: a signal landing between two reads must not skip the save.
        finite = torch_all_finite(agent, loss)
        names = ("value_loss", "policy_loss", "entropy", "old_approx_kl", "approx_kl")  # the last minibatch's
        local = [stats[name].item() for name in names] + [torch.stack(clipfracs).mean().item(), explained_var]
        *means, any_stop, any_diverged = all_reduce_mean(local + [float(stop.requested), float(not finite)], device)
        stopping, finite = any_stop > 0, any_diverged == 0
        gathered = gather_to_rank0(games, rank)  # every process's games reach process 0's charts
        stats_end = time.perf_counter()
        if iteration > start_iteration:  # the first iteration pays for warm-up
            timings += (update_start - rollout_start, update_end - update_start, comm_timer.take(), stats_end - update_end)
            timed_iterations += 1
        comm_timer.take()
        if rank != 0:
            if not finite:
                sys.exit(1)  # process 0 says why
            if stopping:
                break
            continue

        for step_, game_return, length in sorted((g for of_rank in gathered for g in of_rank), key=lambda g: g[0]):
            writer.add_scalar("charts/episodic_return", game_return, step_)
            writer.add_scalar("charts/episodic_length", length, step_)
            recent_returns.append(game_return)
        sps = progress.sps(global_step)
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        for name, value in zip(names + ("clipfrac", "explained_variance"), means):
            writer.add_scalar(f"losses/{name}", value, global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        writer.add_scalar("charts/torch_threads", threads.count, global_step)

        where = dict(iteration=iteration, global_step=global_step, checkpoint_path=checkpoint_path, writer=writer)
        exit_if_diverged(finite, **where, resumed_from=args.resume, progress=progress)
        if checkpoint_due(iteration, args.num_iterations, args.checkpoint_every, stopping):
            save_torch(checkpoint_path, training_state(iteration), keep=args.keep_checkpoints)
        last = iteration == args.num_iterations or stopping
        if args.capture_video and (iteration % args.video_every == 0 or last):
            videos.film(iteration, final=last)  # at most one evaluator at a time
        progress.show(global_step, sps, recent_returns, final=last)
        if stopping and iteration < args.num_iterations:  # in the last one, record_end_step says it finished
            print(f"{stopped_line(iteration, checkpoint_path)}; all {world_size} process(es) stopped")
            break

    if rank == 0 and timed_iterations:
        rollout_s, update_s, allreduce_s, stats_s = timings / timed_iterations
        print(
            f"time per iteration (process 0, mean after the first): rollout {rollout_s:.3f} s, update {update_s:.3f} s "
            f"(gradient all-reduce in flight {allreduce_s:.3f} s of it), stats and stop sync {stats_s:.3f} s"
        )
    if args.save_model and rank == 0:
        print(f"model saved to {model_file(os.path.join(run_dir, f'{args.exp_name}.cleanrl_model'))}")
    if rank == 0:
        videos.finish()
        record_end_step(writer, global_step)
        writer.close()
    envs.close()
    leave_the_group_and_exit()

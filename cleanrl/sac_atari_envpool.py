# SAC for discrete actions (Christodoulou, 2019, "Soft Actor-Critic for Discrete Action Settings") on Atari through
# EnvPool, with dqn_atari_envpool.py's replay buffer, which is right under next-step autoreset: a categorical policy,
# twin soft Q-networks over all actions, and an entropy coefficient tuned towards a target scaled by log(|A|).
# Hyperparameters: CleanRL's sac_atari defaults.
# Autoreset semantics: "The Value of Autoresetting" (Gymnasium), next-step mode.
# Words: with episodic_life an *episode* ends at every life loss (the TD targets see those); a *game* is
# all lives, and charts/episodic_return reports whole games.
from cleanrl_utils.stop import StopAfterIteration, exit_at_once_on_signals, stopped_line

if __name__ == "__main__":
    exit_at_once_on_signals()  # Ctrl-C while the libraries below load: one line, no traceback

import functools
import math
import os
import random
import sys
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import tyro

from cleanrl_utils.checkpoint import (
    MAY_CHANGE_ON_RESUME,
    load_ring_state,
    load_torch,
    restore_torch,
    resume_args,
    resumed_env_seed,
    ring_state,
    save_torch,
    torch_rng_states,
)
from cleanrl_utils.checks import (
    check_envpool_id,
    check_positive,
    check_replay_args,
    check_replay_memory,
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
    """whether to save the model weights and args to `runs/{run_name}/{exp_name}.cleanrl_model`"""
    log_dir: str = "runs"
    """the folder the run's tensorboard events (and saved model) go under"""
    checkpoint_every: int = 0
    """save a resumable checkpoint to `runs/{run_name}/checkpoint.pt` every N iterations (one iteration = one step
    of every env; 0: only at Ctrl-C and at the end)"""
    keep_checkpoints: bool = False
    """keep every checkpoint as `checkpoint-{global_step}.pt` too, to evaluate the run's best point afterwards:
    `python -m cleanrl_utils.evaluate --model-path runs/{run_name} --greedy` (with the replay buffer in each, a kept checkpoint is as large as the buffer: see --checkpoint-buffer)"""
    checkpoint_buffer: bool = True
    """put the replay buffer in the checkpoint (1M transitions: about 7 GB on disk); with --no-checkpoint-buffer a
    resumed run refills an empty buffer for --learning-starts steps before it trains again"""
    resume: str | None = None
    """continue from a checkpoint: same run folder, args, step counter, policy, Q-networks and their targets, the
    entropy coefficient, the optimisers, RNG states and replay buffer"""
    capture_video: bool = False
    """film an evaluation game to `runs/{run_name}/videos/` every --video-every iterations and at the end, in a
    separate process (the training envs never render)"""
    video_every: int = 250_000
    """iterations between evaluation videos with --capture-video"""

    # Algorithm specific arguments (CleanRL's sac_atari)
    env_id: str = "BeamRider-v5"
    """the id of the environment (any EnvPool Atari id, e.g. Pong-v5, Breakout-v5, BeamRider-v5)"""
    total_timesteps: int = 5_000_000
    """total timesteps of the experiments (agent steps, counting every env; frames = 4x)"""
    num_envs: int = 1
    """the number of parallel game environments (steps, update frequency and target updates count every env)"""
    buffer_size: int = 1_000_000
    """the replay memory buffer size (transitions, split evenly over the envs)"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 1.0
    """the target networks' update rate (1.0: hard copy)"""
    batch_size: int = 64
    """the batch size of sample from the replay memory"""
    learning_starts: int = 20_000
    """timestep to start learning (random actions before it)"""
    policy_lr: float = 3e-4
    """the learning rate of the policy network optimizer"""
    q_lr: float = 3e-4
    """the learning rate of the Q-network optimizer (and of the entropy coefficient with --autotune)"""
    update_frequency: int = 4
    """one update of the Q-networks, the policy and alpha every N timesteps"""
    target_network_frequency: int = 8000
    """the timesteps it takes to update the target networks"""
    alpha: float = 0.2
    """the entropy regularization coefficient (without --autotune)"""
    autotune: bool = True
    """automatic tuning of the entropy coefficient"""
    target_entropy_scale: float = 0.89
    """with --autotune, the target entropy is this fraction of the uniform policy's, log(|A|) (unused without it)"""
    max_episode_steps: int = 27_000
    """time limit per game in agent steps (27,000 = 108,000 frames); reaching it truncates"""

    # Speed levers: each keeps the learning curve (see README); auto picks what is fastest on this machine
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """the network trunk's precision (the Q-value head stays fp32). auto: bf16 autocast where the machine computes bf16 natively (a CPU with AVX512-BF16 or AMX, as oneDNN sees it), else fp32; fp32 on CUDA, where batch-32 updates are launch-bound and bf16 measured slower. The run saves the resolved value"""
    channels_last: Literal["auto", "on", "off"] = "auto"
    """channels-last memory format for the convolutions. auto: on in fp32 and on CUDA, off for bf16 on CPU"""
    uint8_obs: bool = True
    """hand sampled batches to the network as uint8, scaled to [0, 1] inside it (else as float32, CleanRL's way)"""
    fused_adam: bool = True
    """Adam as one fused kernel over all parameters (on CPU 0.7 ms instead of 5.4 ms a step for this network)"""
    torch_threads: int = 0
    """torch intra-op threads on CPU. 0 (auto): OMP_NUM_THREADS if set, else the cores no other process keeps busy, re-checked every 5 s. Set N for bit-identical reruns"""

    # to be filled in runtime (not flags)
    num_iterations: tyro.conf.Suppress[int] = 0


def validate_args(args: Args, checkpoint: dict | None = None) -> None:
    """Exit with one clear line (no traceback) on impossible settings, before anything is written. `checkpoint`: the
    run is resumed from it."""
    check_run_args(args)
    check_replay_args(args, min_per_env=16, resumed=checkpoint is not None)
    check_positive(args, "update_frequency", "target_network_frequency", "max_episode_steps", "policy_lr", "q_lr")
    if not 0 < args.alpha <= 1000:  # NaN fails both; 1e300 would be inf in float32
        sys.exit(f"error: --alpha must be in (0, 1000] (the entropy coefficient without --autotune), got {args.alpha}")
    if not 0 < args.target_entropy_scale <= 1:
        sys.exit(f"error: --target-entropy-scale must be in (0, 1] (a fraction of log |A|), got {args.target_entropy_scale}")
    check_envpool_id(args.env_id, "envpool.atari", num_envs=args.num_envs)
    saved = checkpoint["replay_buffer"] if checkpoint else {}  # a resumed run's full ring is taken over, not copied
    check_replay_memory(ReplayBuffer.bytes_needed(args.buffer_size), saved, args.buffer_size // args.num_envs)


def make_env(env_id: str, num_envs: int, seed: int, max_episode_steps: int = 27_000, render_mode: str | None = None):
    """EnvPool Atari with the standard DeepMind preprocessing (84x84 grey, 4-frame stack,
    frame-skip 4, up to 30 no-ops, fire on reset), life loss as termination and clipped rewards.
    `info["reward"]` keeps the unclipped reward and `info["terminated"]` marks game over.
    `render_mode="rgb_array"` (evaluation videos only) makes `render()` return full RGB frames."""
    # The limit is exact: a game over on the limit step stays a termination (EnvPool alone says truncated).
    atari = dict(episodic_life=True, reward_clip=True, render_mode=render_mode)
    return make_envpool(env_id, max_episode_steps, env_type="gymnasium", num_envs=num_envs, seed=seed, **atari)


class ReplayBuffer:
    """Transitions of next-step autoreset envs, each frame stored once.

    Memory: EnvPool returns 4-frame stacks, and storing obs and next obs whole costs 2 x 28 KB per transition
    (56 GB for 1M). Consecutive stacks of one env share three frames, so each env keeps a ring of single 84x84
    frames, one per env step, and a stack is rebuilt from the ring at sample time (7 KB per transition, 7 GB for
    1M). The stacking rule is EnvPool's: a game starts with its first frame repeated 4 times (`game_start`);
    after a life loss the frames run on, as the emulator does. The tests check the rebuilt stacks against
    EnvPool's own, bit for bit.

    Autoreset: the step after a boundary is stale (its action was ignored, its reward is 0, it leads to the reset
    observation), so its transition is never sampled (`valid` False); its frame is kept, as the real last
    observation of the transition before it. A termination (life loss included) stores done = 1; a truncation
    stores done = 0 and bootstraps from that real last observation.

    Ring slot `t % capacity` of env e holds the frame of the env's t-th observation and the transition that
    leaves from it. A transition t can be sampled while frames t-3 .. t+1 are all still in the ring."""

    STACK = 4

    def __init__(self, buffer_size: int, num_envs: int, frame_shape: tuple[int, int] = (84, 84)):
        self.capacity, self.num_envs = buffer_size // num_envs, num_envs
        shape = (self.capacity, num_envs)
        self.frames = np.zeros(shape + frame_shape, dtype=np.uint8)
        self.actions = np.zeros(shape, dtype=np.uint8)  # Atari has at most 18 actions
        self.rewards = np.zeros(shape, dtype=np.float32)
        self.dones = np.zeros(shape, dtype=bool)
        self.valid = np.zeros(shape, dtype=bool)
        self.game_start = np.zeros(shape, dtype=bool)
        self.num_obs = 0  # observations written per env (all envs step together)
        self.env_steps = 0  # transitions added, over all envs, stale ones included

    @staticmethod
    def bytes_needed(buffer_size: int, frame_bytes: int = 84 * 84) -> int:
        return buffer_size * (frame_bytes + 1 + 4 + 3)

    def start_games(self, obs: np.ndarray) -> None:
        """Observations that start new games: after `envs.reset()`, also in a resumed run (whose last saved
        observation keeps no transition)."""
        self._write_obs(obs, np.ones(self.num_envs, dtype=bool))

    def add(self, actions, rewards, terminations, stale, next_obs, next_starts_game) -> None:
        """The step from the last written observation: its transition (`stale` ones are kept out of sampling),
        then the observation the step returned (`next_starts_game`: a reset game, its frames repeat)."""
        slot = (self.num_obs - 1) % self.capacity
        self.actions[slot], self.rewards[slot], self.dones[slot] = actions, rewards, terminations
        self.valid[slot] = ~stale
        self.env_steps += self.num_envs
        self._write_obs(next_obs, next_starts_game)

    def _write_obs(self, obs: np.ndarray, starts_game: np.ndarray) -> None:
        slot = self.num_obs % self.capacity
        self.frames[slot] = obs[:, -1]  # the newest frame; the older three are in the ring already
        self.game_start[slot] = starts_game
        self.valid[slot] = False  # no transition leaves from it yet
        self.num_obs += 1

    def sample_indices(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """(t, env) of `batch_size` transitions drawn uniformly from the valid ones (numpy's global RNG)."""
        low = max(0, self.num_obs - self.capacity + self.STACK - 1)  # frames t-3.. not yet overwritten
        high = self.num_obs - 1  # the newest observation has no transition yet
        t = np.random.randint(low, high, batch_size)
        env = np.random.randint(0, self.num_envs, batch_size)
        redraw = ~self.valid[t % self.capacity, env]
        while redraw.any():  # stale rows are about one per life: a redraw is rare and cheap
            t[redraw] = np.random.randint(low, high, redraw.sum())
            env[redraw] = np.random.randint(0, self.num_envs, redraw.sum())
            redraw = ~self.valid[t % self.capacity, env]
        return t, env

    def stacks(self, t: np.ndarray, env: np.ndarray) -> np.ndarray:
        """(B, 4, 84, 84): the observations t of envs `env`, rebuilt from the frame rings."""
        index = t[:, None] + np.arange(1 - self.STACK, 1)  # oldest .. newest frame of each stack
        for k in range(self.STACK - 2, -1, -1):  # before a game's first frame, that frame repeats
            starts = self.game_start[index[:, k + 1] % self.capacity, env]
            index[:, k] = np.where(starts, index[:, k + 1], index[:, k])
        return self.frames[index % self.capacity, env[:, None]]

    def sample(self, batch_size: int, device: torch.device, obs_dtype=torch.uint8) -> tuple[torch.Tensor, ...]:
        """(obs, actions, rewards, next_obs, dones) of a uniform batch, on `device`, observations as `obs_dtype`."""
        t, env = self.sample_indices(batch_size)
        slot = t % self.capacity
        obs, next_obs = (torch.from_numpy(self.stacks(i, env)).to(device, obs_dtype) for i in (t, t + 1))
        actions, rewards, dones = (torch.from_numpy(x[slot, env]).to(device) for x in (self.actions, self.rewards, self.dones))
        return obs, actions, rewards, next_obs, dones

    ARRAYS = ("frames", "actions", "rewards", "dones", "valid", "game_start")

    def state_dict(self) -> dict:
        """The filled ring slots only (a 1M buffer saved early is MBs, not 7 GB), and the counters."""
        return ring_state(self, self.ARRAYS)

    def load_state_dict(self, state: dict) -> None:
        """A saved buffer back (a full ring taken over without a copy; an empty dict, --no-checkpoint-buffer's, leaves
        this one empty). ValueError if it does not fit this one."""
        load_ring_state(self, state, self.ARRAYS)


class AtariNetwork(nn.Module):
    """Nature CNN trunk and a linear head, one output per action: the policy's logits, or a soft Q-network's values.
    Each of the three networks has a trunk of its own, as in CleanRL."""

    def __init__(self, num_actions: int, bf16: bool = False, channels_last: bool = False):
        super().__init__()
        self.network = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten(),
            nn.Linear(64 * 7 * 7, 512), nn.ReLU(),
        )  # fmt: skip
        self.q_head = nn.Linear(512, num_actions)
        self.bf16, self.channels_last = bf16, channels_last
        if channels_last:
            self.network.to(memory_format=torch.channels_last)

    def forward(self, obs: torch.Tensor, bf16: bool | None = None) -> torch.Tensor:
        """The head's outputs, (B, num_actions) float32. `bf16` overrides the network's setting for one call: acting on a few
        observations is faster in fp32, because autocast casts every weight to bf16 again on each call."""
        bf16 = self.bf16 if bf16 is None else bf16
        # Observations arrive as uint8 0..255 (float32 with --no-uint8-obs). Integers up to 256 are exact in bf16,
        # so under --bf16 we cast once, straight to the compute dtype and layout.
        dtype = torch.bfloat16 if bf16 else torch.float32
        memory_format = torch.channels_last if self.channels_last else torch.contiguous_format
        # cast, then change the layout: one copy doing both is a slow strided loop (32 stacks: 0.72 against 0.39 ms, Zen 3)
        x = obs.to(dtype).contiguous(memory_format=memory_format)
        conv1 = self.network[0]
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
            # x / 255 folded into conv1's weight: conv(x, w / 255) = conv(x / 255, w), with the same parameters and
            # gradients, but no pass over the batch.
            hidden = self.network[1:](nn.functional.conv2d(x, conv1.weight * (1.0 / 255.0), conv1.bias, stride=4))
        # The head runs in fp32: TD errors are small differences of Q-values near 1 / (1 - gamma), and log-probs
        # of 18 actions feed the entropy terms; bf16's 8-bit mantissa would swamp both.
        return self.q_head(hidden.float())


def policy(actor: AtariNetwork, obs: torch.Tensor, bf16: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(probabilities, log-probabilities) of the categorical policy over every action, (B, num_actions) each."""
    log_probs = torch.log_softmax(actor(obs, bf16), dim=1)
    return log_probs.exp(), log_probs


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
    """How `cleanrl_utils.evaluate` plays a model this script saved (and films it during training): whole games,
    every life, filmed by EnvPool's own renderer; actions sampled from the policy (seeded with `seed`), or its most
    likely one with `greedy`. `epsilon` is DQN's, unused here."""
    train_args = saved["args"]
    render_mode = "rgb_array" if render else None
    envs = make_env(train_args["env_id"], num_envs, seed, train_args["max_episode_steps"], render_mode=render_mode)
    bf16, channels_last = play_in_bf16(train_args, device), train_args["channels_last"] == "on"
    actor = AtariNetwork(int(envs.single_action_space.n), bf16=bf16, channels_last=channels_last)
    actor.load_state_dict(saved["model_state_dict"])
    actor.to(device).eval()
    generator = torch.Generator(device=device).manual_seed(seed)

    @torch.no_grad()
    def act(obs: np.ndarray) -> np.ndarray:
        probs, _ = policy(actor, torch.as_tensor(obs, device=device))
        action = probs.argmax(dim=1) if greedy else torch.multinomial(probs, 1, generator=generator).squeeze(1)
        return action.cpu().numpy()

    return Player(envs=envs, act=act, whole_games=True)


def soft_q_target(
    actor: AtariNetwork,
    q1_target: AtariNetwork,
    q2_target: AtariNetwork,
    alpha: torch.Tensor,
    next_obs,
    rewards,
    dones,
    gamma: float,
) -> torch.Tensor:
    """r + gamma * (1 - done) * V(s'), with the soft value of s' summed over every action under the policy (the point
    of the discrete variant: no sampled next action):
        V(s') = sum_a pi(a|s') * (min(Q1'(s', a), Q2'(s', a)) - alpha * log pi(a|s')).
    done is a termination (a life loss included); a truncated transition keeps done = 0 and its real last frame."""
    probs, log_probs = policy(actor, next_obs)
    min_q = torch.min(q1_target(next_obs), q2_target(next_obs))
    next_value = (probs * (min_q - alpha * log_probs)).sum(dim=1)
    return rewards + gamma * (~dones).float() * next_value


def policy_and_alpha_losses(actor, q1, q2, entropy: EntropyCoefficient, obs, target_entropy: float) -> dict:
    """The policy loss sum_a pi(a|s) (alpha log pi(a|s) - min Q(s, a)) with the Q-values held fixed, and the entropy
    coefficient's loss sum_a pi(a|s) (-alpha (log pi(a|s) + target entropy)) with the policy held fixed: alpha
    grows while the policy's entropy is below the target, and shrinks while above. Means over the batch."""
    probs, log_probs = policy(actor, obs)
    with torch.no_grad():
        min_q = torch.min(q1(obs), q2(obs))
    alpha = entropy()
    policy_loss = (probs * (alpha.detach() * log_probs - min_q)).sum(dim=1).mean()
    alpha_loss = (probs.detach() * (-alpha * (log_probs.detach() + target_entropy))).sum(dim=1).mean()
    policy_entropy = -(probs.detach() * log_probs.detach()).sum(dim=1).mean()
    return dict(policy_loss=policy_loss, alpha_loss=alpha_loss, entropy=policy_entropy)


if __name__ == "__main__":
    args = tyro.cli(Args)
    keys = dict(critic_state_dict=dict, target_critic_state_dict=dict, entropy_state_dict=dict)  # besides the policy
    keys |= dict(q_optimizer_state_dict=dict, alpha_optimizer_state_dict=dict, replay_buffer=dict)
    checkpoint = load_torch(args.resume, SCRIPT, keys) if args.resume else None
    if checkpoint:  # the saved args, with the flags of this command that may change on resume applied
        args = resume_args(Args, checkpoint, args.resume, MAY_CHANGE_ON_RESUME + ("checkpoint_buffer",))
    validate_args(args, checkpoint)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    # prints them; args keep the resolved values. bf16 does not pay for batch-32 updates on a GPU: fp32 there
    threads = choose_speed_levers(args, this_machine(device), checkpoint, bf16_pays_on_cuda=False)
    args.num_iterations = args.total_timesteps // args.num_envs  # one iteration = one vector env step
    say_steps_run(args.total_timesteps, args.num_envs, "one step of each of --num-envs envs")
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
    num_actions = envs.single_action_space.n

    levers = dict(bf16=args.precision == "bf16", channels_last=args.channels_last == "on")
    actor = AtariNetwork(num_actions, **levers).to(device)
    critic = nn.ModuleDict(dict(q1=AtariNetwork(num_actions, **levers), q2=AtariNetwork(num_actions, **levers))).to(device)
    target_critic = nn.ModuleDict(dict(q1=AtariNetwork(num_actions, **levers), q2=AtariNetwork(num_actions, **levers))).to(
        device
    )
    target_critic.load_state_dict(critic.state_dict())
    entropy = EntropyCoefficient(args.alpha, args.autotune).to(device)
    target_entropy = args.target_entropy_scale * math.log(num_actions)  # the uniform policy's entropy is log |A|
    # Adam eps 1e-4, as CleanRL's sac_atari
    policy_optimizer = torch.optim.Adam(actor.parameters(), lr=args.policy_lr, eps=1e-4, fused=args.fused_adam)
    q_optimizer = torch.optim.Adam(critic.parameters(), lr=args.q_lr, eps=1e-4, fused=args.fused_adam)
    alpha_optimizer = torch.optim.Adam(entropy.parameters(), lr=args.q_lr, eps=1e-4)
    rb = ReplayBuffer(args.buffer_size, args.num_envs)
    start_iteration, global_step = 1, 0
    if checkpoint:  # every network, optimiser, RNG states and replay buffer (one line if they do not fit)
        extra = dict(critic_state_dict=critic, target_critic_state_dict=target_critic, entropy_state_dict=entropy)
        extra |= dict(q_optimizer_state_dict=q_optimizer, alpha_optimizer_state_dict=alpha_optimizer, replay_buffer=rb)
        start_iteration, global_step = restore_torch(args.resume, checkpoint, actor, policy_optimizer, args, extra=extra)
        print(f"replay buffer: {rb.env_steps:,} env steps restored" if rb.env_steps else "replay buffer: refilled from empty")
    writer = make_writer(args, run_name, run_dir, checkpoint["global_step"] if checkpoint else None)  # after every check

    def model_file(path: str) -> str:
        """The `.cleanrl_model` format `cleanrl_utils.evaluate` reads: script name, args, weights."""
        save_torch(path, {**WRITTEN_BY, "model_state_dict": actor.state_dict(), "args": vars(args)})
        return path

    def training_state(iteration: int) -> dict:
        counters = WRITTEN_BY | dict(run_name=run_name, args=vars(args), iteration=iteration, global_step=global_step)
        weights = dict(model_state_dict=actor.state_dict(), critic_state_dict=critic.state_dict())
        weights |= dict(target_critic_state_dict=target_critic.state_dict(), entropy_state_dict=entropy.state_dict())
        weights |= dict(optimizer_state_dict=policy_optimizer.state_dict(), q_optimizer_state_dict=q_optimizer.state_dict())
        weights |= dict(alpha_optimizer_state_dict=alpha_optimizer.state_dict())
        replay = dict(replay_buffer=rb.state_dict() if args.checkpoint_buffer else {})
        return counters | weights | {"rng": torch_rng_states()} | replay

    # Episode statistics per *game* (not per life), from the unclipped reward.
    episode_returns = np.zeros(args.num_envs, dtype=np.float64)
    recent_returns: list[float] = []

    progress = ProgressLine(global_step, args.num_iterations * args.num_envs, "games")  # and SPS from here
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
    rb.start_games(obs)
    # The step before the first one is not a boundary: the first transition of every env is valid.
    prev_episode_over = np.zeros(args.num_envs, dtype=bool)
    obs_dtype = torch.uint8 if args.uint8_obs else torch.float32
    # Acting on fewer than 16 observations is faster in fp32 (1 observation: 0.53 ms against 0.93 ms under bf16
    # autocast, which casts every weight again on each call; Xeon with AMX-bf16, 2 threads). Training batches use bf16.
    acting_bf16 = args.precision == "bf16" and args.num_envs >= 16
    q_loss = q_values = losses = None

    for iteration in range(start_iteration, args.num_iterations + 1):
        # ALGO LOGIC: random actions until learning starts, then samples of the policy. The random draw is made every
        # step, so numpy's RNG stream does not depend on which was used.
        actions = np.random.randint(num_actions, size=args.num_envs)
        if rb.env_steps > args.learning_starts:
            with torch.no_grad():
                probs, _ = policy(actor, torch.from_numpy(obs).to(device, obs_dtype), bf16=acting_bf16)
                # a policy that diverged since the last check stops here: multinomial would raise on NaN
                stop_if_diverged(bool(probs.isfinite().all()), iteration=iteration, global_step=global_step + args.num_envs)
                actions = torch.multinomial(probs, 1).squeeze(1).cpu().numpy()
        global_step += args.num_envs

        # TRY NOT TO MODIFY: execute the game and log data. On a stale step (the one after a boundary) EnvPool
        # ignores the action and returns the reset observation with reward 0: the buffer keeps it out of sampling.
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        # A reset game (game over or time limit) restarts EnvPool's step counter; a life loss does not.
        rb.add(actions, rewards, terminations, prev_episode_over, next_obs, infos["elapsed_step"] == 0)
        prev_episode_over = terminations | truncations
        obs = next_obs

        # A game ends at game over (info["terminated"]; `terminations` is also set on every life loss) or at
        # the time limit. Its length is EnvPool's elapsed_step, which does not count stale steps.
        episode_returns += infos["reward"]
        game_over = infos["terminated"].astype(bool) | truncations
        for i in np.flatnonzero(game_over):
            writer.add_scalar("charts/episodic_return", episode_returns[i], global_step)
            writer.add_scalar("charts/episodic_length", infos["elapsed_step"][i], global_step)
            recent_returns.append(float(episode_returns[i]))
        episode_returns[game_over] = 0.0

        # ALGO LOGIC: training. `rb.env_steps` equals global_step, except in a run resumed without its buffer,
        # which refills --learning-starts steps first. Every --update-frequency steps: the soft Q-networks, then the
        # policy and alpha.
        if rb.env_steps > args.learning_starts:
            for _ in range(updates_due(global_step, args.num_envs, args.update_frequency)):
                obs_b, actions_b, rewards_b, next_obs_b, dones_b = rb.sample(args.batch_size, device, obs_dtype)
                with torch.no_grad():
                    alpha = entropy()
                    target = soft_q_target(
                        actor, target_critic["q1"], target_critic["q2"], alpha, next_obs_b, rewards_b, dones_b, args.gamma
                    )
                taken = actions_b.long()[:, None]
                q1_values = critic["q1"](obs_b).gather(1, taken).squeeze(1)
                q2_values = critic["q2"](obs_b).gather(1, taken).squeeze(1)
                q_loss = F.mse_loss(q1_values, target) + F.mse_loss(q2_values, target)
                q_optimizer.zero_grad(set_to_none=True)
                q_loss.backward()
                q_optimizer.step()
                q_values = q1_values.detach()

                losses = policy_and_alpha_losses(actor, critic["q1"], critic["q2"], entropy, obs_b, target_entropy)
                policy_optimizer.zero_grad(set_to_none=True)
                losses["policy_loss"].backward()
                policy_optimizer.step()
                if args.autotune:
                    alpha_optimizer.zero_grad(set_to_none=True)
                    losses["alpha_loss"].backward()
                    alpha_optimizer.step()

            # update the target networks each time global_step passes a multiple of --target-network-frequency
            if updates_due(global_step, args.num_envs, args.target_network_frequency):
                with torch.no_grad():
                    for target_param, param in zip(target_critic.parameters(), critic.parameters()):
                        target_param.copy_(args.tau * param + (1.0 - args.tau) * target_param)  # tau = 1: exact copy

        # Read the stop flag once: a signal landing between two reads must not skip the save.
        stopping = stop.requested
        last = iteration == args.num_iterations or stopping
        saving = checkpoint_due(iteration, args.num_iterations, args.checkpoint_every, stopping)
        sps = progress.sps(global_step)
        logging = updates_due(global_step, args.num_envs, 1000)  # every 1,000 steps: no per-step host sync
        if logging and q_loss is not None:
            writer.add_scalar("losses/qf_loss", q_loss.item() / 2.0, global_step)  # the mean of the two, as CleanRL
            writer.add_scalar("losses/qf1_values", q_values.mean().item(), global_step)
            writer.add_scalar("losses/actor_loss", losses["policy_loss"].item(), global_step)
            writer.add_scalar("losses/alpha", entropy().item(), global_step)
            writer.add_scalar("losses/entropy", losses["entropy"].item(), global_step)
            if args.autotune:
                writer.add_scalar("losses/alpha_loss", losses["alpha_loss"].item(), global_step)
        if logging:
            writer.add_scalar("charts/SPS", sps, global_step)
            writer.add_scalar("charts/torch_threads", threads.count, global_step)
        threads.update()  # each iteration, not only when logging: 1,000 steps on crowded cores can take minutes
        if logging or saving:  # a diverged run must never be saved
            stop_if_diverged(
                torch_all_finite(actor, q_loss) and torch_all_finite(critic, q_loss),
                iteration=iteration,
                global_step=global_step,
            )
        if saving:  # with the buffer this is GBs: a slow save says what it cost
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

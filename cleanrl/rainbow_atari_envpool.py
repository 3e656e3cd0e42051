# Rainbow (Hessel et al., 2018) for Atari through EnvPool: C51's distributional loss with prioritised replay, n-step
# returns, double-Q action selection, a dueling head and noisy nets. Components and hyperparameters: CleanRL's
# rainbow_atari.py; run plumbing and the frame-deduplicating replay (right under next-step autoreset, "The Value of
# Autoresetting", Gymnasium): c51_atari_envpool.py's. Details and their reasons: docs/pqn_c51_rainbow.md.
# Words: with episodic_life an *episode* ends at every life loss (the TD targets see those); a *game* is all lives,
# and charts/episodic_return reports whole games.
from cleanrl_utils.stop import StopAfterIteration, exit_at_once_on_signals, stopped_line

if __name__ == "__main__":
    exit_at_once_on_signals()  # Ctrl-C while the libraries below load: one line, no traceback

import math
import os
import random
import sys
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn as nn
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
from cleanrl_utils.checks import check_envpool_id, check_positive, check_replay_args, check_replay_memory, check_run_args
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
    """save a resumable checkpoint to `runs/{run_name}/checkpoint.pt` every N iterations (0: at Ctrl-C and the end)"""
    keep_checkpoints: bool = False
    """keep every checkpoint as `checkpoint-{global_step}.pt` too, to evaluate the run's best point afterwards (each as large as the buffer: see --checkpoint-buffer)"""
    checkpoint_buffer: bool = True
    """put the replay buffer and its priorities in the checkpoint (1M transitions: about 7 GB); without, a resumed run refills it for --learning-starts steps"""
    resume: str | None = None
    """continue from a checkpoint: run folder, args, step counter, beta schedule, networks (noise included), Adam, RNG states, replay buffer with priorities"""
    capture_video: bool = False
    """film an evaluation game to `runs/{run_name}/videos/` every --video-every iterations and at the end (a separate process)"""
    video_every: int = 250_000
    """iterations between evaluation videos with --capture-video"""

    # Algorithm specific arguments (CleanRL's rainbow_atari.py defaults; no epsilon: the noisy nets explore)
    env_id: str = "Breakout-v5"
    """the id of the environment (any EnvPool Atari id, e.g. Pong-v5, Breakout-v5, BeamRider-v5)"""
    total_timesteps: int = 10_000_000
    """total timesteps of the experiments (agent steps, counting every env; frames = 4x)"""
    learning_rate: float = 6.25e-5
    """the learning rate of the optimizer (Adam with eps 1.5e-4, as CleanRL)"""
    num_envs: int = 1
    """the number of parallel game environments (steps, train frequency and target updates count every env)"""
    buffer_size: int = 1_000_000
    """the replay memory buffer size (transitions, split evenly over the envs)"""
    gamma: float = 0.99
    """the discount factor gamma"""
    n_step: int = 3
    """the number of steps of each return (CleanRL: 3); cut short at a boundary"""
    prioritized_replay_alpha: float = 0.5
    """how strongly priorities skew sampling, in [0, 1] (0: uniform; CleanRL: 0.5)"""
    prioritized_replay_beta: float = 0.4
    """the importance-sampling exponent at step 0, in [0, 1], linearly to 1 at --total-timesteps (CleanRL: 0.4)"""
    prioritized_replay_eps: float = 1e-6
    """added to each sample's loss to make its priority (CleanRL: 1e-6)"""
    noisy_std: float = 0.5
    """sigma_0 of the factorised Gaussian noisy layers (initial sigma = sigma_0 / sqrt(fan-in); CleanRL: 0.5)"""
    n_atoms: int = 51
    """the number of atoms of the return distribution's support"""
    v_min: float = -10.0
    """the return of the support's lowest atom (rewards are clipped to [-1, 1])"""
    v_max: float = 10.0
    """the return of the support's highest atom"""
    target_network_frequency: int = 8_000
    """the timesteps it takes to update the target network (CleanRL: 8,000)"""
    batch_size: int = 32
    """the batch size of sample from the reply memory"""
    learning_starts: int = 80_000
    """timestep to start learning"""
    train_frequency: int = 4
    """the frequency of training (one gradient step every N timesteps)"""
    max_episode_steps: int = 27_000
    """time limit per game in agent steps (27,000 = 108,000 frames); reaching it truncates"""

    # Speed levers: each keeps the learning curve (see README); auto picks what is fastest on this machine
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """the network trunk's precision (the heads' output layers stay fp32). auto: bf16 autocast where the machine computes bf16 natively (a CPU with AVX512-BF16 or AMX, as oneDNN sees it), else fp32; fp32 on CUDA, where batch-32 updates are launch-bound and bf16 measured slower. The run saves the resolved value"""
    channels_last: Literal["auto", "on", "off"] = "auto"
    """channels-last memory format for the convolutions. auto: on on CUDA, off on CPU (this script's fp32 step measured slower channels-last there, unlike the other Atari scripts'; bf16 runs faster without it)"""
    uint8_obs: bool = True
    """hand sampled batches to the network as uint8, scaled to [0, 1] inside it (else as float32, CleanRL's way)"""
    fused_adam: bool = True
    """Adam as one fused kernel over all parameters"""
    torch_threads: int = 0
    """torch intra-op threads on CPU. 0 (auto): OMP_NUM_THREADS if set, else the cores no other process keeps busy, re-checked every 5 s. Set N for bit-identical reruns"""

    # to be filled in runtime (not flags)
    num_iterations: tyro.conf.Suppress[int] = 0


def validate_args(args: Args, checkpoint: dict | None = None) -> None:
    """Exit with one clear line (no traceback) on impossible settings, before anything is written (`checkpoint`: resumed)."""
    check_run_args(args)  # every float flag finite (NaN, inf) first
    check_positive(args, "n_step", "prioritized_replay_eps")
    if args.n_step > 1_000:
        sys.exit(f"error: --n-step must be in [1, 1000], got {args.n_step}")
    # A window reads n rows past its transition while the 4 frames of its stack stay in the ring (see ReplayBuffer)
    per_env = dict(min_per_env=16 + args.n_step, per_env_why=f"16 + --n-step {args.n_step}")
    check_replay_args(args, **per_env, resumed=checkpoint is not None)
    for name in ("prioritized_replay_alpha", "prioritized_replay_beta"):
        if not 0 <= getattr(args, name) <= 1:
            sys.exit(f"error: --{name.replace('_', '-')} must be in [0, 1], got {getattr(args, name)}")
    if not 0 <= args.noisy_std <= 10:  # CleanRL's 0.5; past a few units the noise swamps every weight
        sys.exit(f"error: --noisy-std must be in [0, 10] (0: no noise), got {args.noisy_std}")
    check_positive(args, "train_frequency", "target_network_frequency", "max_episode_steps")
    check_envpool_id(args.env_id, "envpool.atari", num_envs=args.num_envs)
    saved = checkpoint["replay_buffer"] if checkpoint else {}  # a resumed run's full ring is taken over, not copied
    check_replay_memory(ReplayBuffer.bytes_needed(args.buffer_size), saved, args.buffer_size // args.num_envs)


def make_env(env_id: str, num_envs: int, seed: int, max_episode_steps: int = 27_000, render_mode: str | None = None):
    """EnvPool Atari with DeepMind's preprocessing (84x84 grey, 4-frame stack, frame-skip 4, up to 30 no-ops, fire on
    reset), life loss as termination, clipped rewards (`info["reward"]` unclipped, `info["terminated"]`: game over).
    The time limit is exact: a game over on the limit step stays a termination (EnvPool alone says truncated).
    `render_mode="rgb_array"` (evaluation videos only): `render()` returns full RGB frames."""
    atari = dict(episodic_life=True, reward_clip=True, render_mode=render_mode)
    return make_envpool(env_id, max_episode_steps, env_type="gymnasium", num_envs=num_envs, seed=seed, **atari)


class SumTree:
    """Proportional prioritisation (Schaul et al., 2016): leaf j holds p_j, node i the sum of children 2i and 2i + 1,
    the root (node 1) the total; a mass u in [0, total) walks down to the leaf whose cumulative range holds it, so
    leaf j is drawn with probability p_j / total. float64 sums, each node recomputed from its children: no drift."""

    def __init__(self, size: int):
        self.size, self.first_leaf = size, 1 << max(0, (size - 1).bit_length())
        self.nodes = np.zeros(2 * self.first_leaf)
        self.count = 0  # leaves with priority > 0: the N of the importance weights

    def set(self, leaves: np.ndarray, priorities: np.ndarray) -> None:
        leaves, priorities = np.asarray(leaves)[::-1], np.broadcast_to(priorities, np.shape(leaves))[::-1]
        leaves, last = np.unique(leaves, return_index=True)  # a leaf given twice keeps its last value
        node = leaves + self.first_leaf
        self.count += int(np.count_nonzero(priorities[last]) - np.count_nonzero(self.nodes[node]))
        self.nodes[node] = priorities[last]
        node = np.unique(node // 2)
        while node.size and node[0] >= 1:
            self.nodes[node] = self.nodes[2 * node] + self.nodes[2 * node + 1]
            node = np.unique(node // 2)

    def priorities(self, leaves: np.ndarray) -> np.ndarray:
        return self.nodes[self.first_leaf + np.asarray(leaves)]

    def total(self) -> float:
        return float(self.nodes[1])

    def find(self, mass: np.ndarray) -> np.ndarray:
        """The leaf of each mass in [0, total)."""
        node = np.ones(len(mass), dtype=np.int64)
        while node[0] < self.first_leaf:
            left = self.nodes[2 * node]
            right = mass >= left
            mass = np.where(right, mass - left, mass)
            node = 2 * node + right
        return node - self.first_leaf

    def load(self, leaf_priorities: np.ndarray) -> None:
        """The first leaves set to these priorities, all others to 0 (a resumed buffer's)."""
        self.nodes[:], self.count = 0.0, 0
        self.set(np.arange(len(leaf_priorities)), leaf_priorities)


class ReplayBuffer:
    """Prioritised n-step replay of next-step autoreset envs, each frame stored once (dqn_atari_envpool.py's storage).

    Each env keeps a ring of 84x84 frames: slot `t % capacity` holds the frame of observation t and the transition
    that leaves from it; 4-frame stacks are rebuilt at sample time (EnvPool's rule: a new game repeats its first
    frame, `game_start`; after a life loss the frames run on). The stale step after a boundary (action ignored,
    reward 0) is `valid` False: never sampled, never in a window; its frame stays, the real last observation of the
    transition before. A termination (life loss included) stores done = 1.
    n-step windows are built at sample time from the one-step rows (`n_step_window`; why: the docs page). A window from t
    adds gamma^k r_{t+k} and stops at a termination (discount 0), before a row that is not a valid transition (a
    truncation's stale step, the end of the stored stream: bootstrap from observation t+k+1 with gamma^(k+1)), or
    after n rows (observation t+n, gamma^n).
    Priorities: transition t enters the sum tree once observation t+n is written (its window whole or cut), at the
    largest priority so far, and leaves it when the ring overwrites a frame of its stack. Leaf = slot * num_envs + env."""

    STACK, MAX_REDRAWS = 4, 100

    def __init__(self, buffer_size: int, num_envs: int, n_step: int = 3, gamma: float = 0.99, alpha: float = 0.5,
                 frame_shape: tuple[int, int] = (84, 84)):  # fmt: skip
        self.capacity, self.num_envs = buffer_size // num_envs, num_envs
        self.n_step, self.gamma, self.alpha = n_step, gamma, alpha
        shape = (self.capacity, num_envs)
        self.frames = np.zeros(shape + frame_shape, dtype=np.uint8)
        self.actions = np.zeros(shape, dtype=np.uint8)  # Atari has at most 18 actions
        self.rewards = np.zeros(shape, dtype=np.float32)
        self.dones, self.valid, self.game_start = (np.zeros(shape, dtype=bool) for _ in range(3))
        self.tree = SumTree(self.capacity * num_envs)
        self.max_priority = 1.0  # the largest |loss| + eps so far (CleanRL's start: 1); stored as its alpha power
        self.num_obs = 0  # observations written per env (all envs step together)
        self.env_steps = 0  # transitions added, over all envs, stale ones included

    @staticmethod
    def bytes_needed(buffer_size: int, frame_bytes: int = 84 * 84) -> int:
        return buffer_size * (frame_bytes + 1 + 4 + 3) + 2 * (1 << max(0, (buffer_size - 1).bit_length())) * 8

    def start_games(self, obs: np.ndarray) -> None:
        """Observations that start new games: after `envs.reset()`, also in a resumed run (whose last saved
        observation keeps no transition: a window reaching it ends there, the end of the stored stream)."""
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
        m, envs = self.num_obs, np.arange(self.num_envs)
        slot = m % self.capacity
        self.frames[slot] = obs[:, -1]  # the newest frame; the older three are in the ring already
        self.game_start[slot] = starts_game
        self.valid[slot] = False  # no transition leaves from it yet
        # Transitions m - capacity .. m - capacity + 3 lose a frame of their stack: out of the tree.
        gone = ((m + np.arange(self.STACK)) % self.capacity)[:, None] * self.num_envs + envs
        leaves, priorities = [gone.ravel()], [np.zeros(gone.size)]
        if (t := m - self.n_step) >= 0:  # its window's rows are all written now
            row = t % self.capacity
            leaves.append(row * self.num_envs + envs)
            priorities.append(np.where(self.valid[row], self.max_priority**self.alpha, 0.0))
        self.tree.set(np.concatenate(leaves), np.concatenate(priorities))
        self.num_obs += 1

    def n_step_window(self, t: np.ndarray, env: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(return, bootstrap discount, bootstrap observation index) of the windows from valid transitions t of `env`."""
        returns, discounts = np.zeros(len(t), dtype=np.float64), np.ones(len(t), dtype=np.float64)
        end, running = t + 1, np.ones(len(t), dtype=bool)
        for k in range(self.n_step):
            row = (t + k) % self.capacity
            returns += np.where(running, discounts * self.rewards[row, env], 0.0)
            discounts = np.where(running, discounts * self.gamma, discounts)
            end = np.where(running, t + k + 1, end)
            terminated = running & self.dones[row, env]
            discounts[terminated] = 0.0
            running &= ~terminated & self.valid[(t + k + 1) % self.capacity, env]
        return returns.astype(np.float32), discounts.astype(np.float32), end

    def stacks(self, t: np.ndarray, env: np.ndarray) -> np.ndarray:
        """(B, 4, 84, 84): the observations t of envs `env`, rebuilt from the frame rings."""
        index = t[:, None] + np.arange(1 - self.STACK, 1)  # oldest .. newest frame of each stack
        for k in range(self.STACK - 2, -1, -1):  # before a game's first frame, that frame repeats
            starts = self.game_start[index[:, k + 1] % self.capacity, env]
            index[:, k] = np.where(starts, index[:, k + 1], index[:, k])
        return self.frames[index % self.capacity, env[:, None]]

    def leaf_transitions(self, leaves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(t, env) of tree leaves: t is the one observation index of the slot still in the ring."""
        slot, env = np.divmod(leaves, self.num_envs)
        return self.num_obs - 1 - (self.num_obs - 1 - slot) % self.capacity, env

    def sample_leaves(self, batch_size: int, beta: float) -> tuple[np.ndarray, np.ndarray]:
        """Leaves drawn in proportion to their priorities, stratified as CleanRL (one draw in each of `batch_size` equal
        slices of the total; numpy's global RNG), and their importance weights (N P(i))^-beta divided by the batch's
        largest, N = the leaves with a priority. RuntimeError if the tree is corrupt (zero leaves under a nonzero sum)."""
        total = self.tree.total()
        mass = (np.arange(batch_size) + np.random.random(batch_size)) * (total / batch_size)
        leaves = self.tree.find(np.minimum(mass, np.nextafter(total, 0)))
        redraws = 0
        while (empty := self.tree.priorities(leaves) == 0).any():  # float rounding at a slice edge: rare
            if (redraws := redraws + 1) > self.MAX_REDRAWS:  # a correct tree: rarely one redraw, never 100 in a row
                raise RuntimeError(f"internal error: the sum tree kept drawing zero-priority leaves (total {total})")
            leaves[empty] = self.tree.find(np.random.random(empty.sum()) * total)
        weights = (self.tree.count * self.tree.priorities(leaves) / total) ** -beta
        return leaves, (weights / weights.max()).astype(np.float32)

    def sample(self, batch_size: int, beta: float, device: torch.device, obs_dtype=torch.uint8):
        """(obs, actions, n-step returns, bootstrap obs, discounts, importance weights) on `device`; the leaves drawn."""
        leaves, weights = self.sample_leaves(batch_size, beta)
        t, env = self.leaf_transitions(leaves)
        returns, discounts, end = self.n_step_window(t, env)
        obs, next_obs = (torch.from_numpy(self.stacks(i, env)).to(device, obs_dtype) for i in (t, end))
        rest = (self.actions[t % self.capacity, env], returns, discounts, weights)
        actions, returns, discounts, weights = (torch.from_numpy(x).to(device) for x in rest)
        return (obs, actions, returns, next_obs, discounts, weights), leaves

    def update_priorities(self, leaves: np.ndarray, losses: np.ndarray, eps: float) -> None:
        """Priority (loss + eps)^alpha, as CleanRL's rainbow_atari (the loss: each sample's cross-entropy)."""
        priorities = np.abs(losses.astype(np.float64)) + eps
        self.max_priority = max(self.max_priority, float(priorities.max()))
        self.tree.set(leaves, priorities**self.alpha)

    ARRAYS = ("frames", "actions", "rewards", "dones", "valid", "game_start")

    def state_dict(self) -> dict:
        """The filled ring slots only (a 1M buffer saved early is MBs, not 7 GB), the counters and the priorities."""
        rows = min(self.num_obs, self.capacity) * self.num_envs
        priorities = torch.from_numpy(self.tree.nodes[self.tree.first_leaf :][:rows].copy())
        return ring_state(self, self.ARRAYS) | dict(priorities=priorities, max_priority=self.max_priority)

    def load_state_dict(self, state: dict) -> None:
        """A saved buffer back (a full ring taken over without a copy; an empty dict, --no-checkpoint-buffer's, leaves
        this one empty), its priorities into the tree. ValueError if it does not fit this one."""
        if state and len(state["priorities"]) != len(state["frames"]) * self.num_envs:
            raise ValueError(f"saved {len(state['priorities'])} priorities for {len(state['frames'])} rows")
        if load_ring_state(self, state, self.ARRAYS):
            self.tree.load(state["priorities"].numpy())
            self.max_priority = float(state["max_priority"])


class NoisyLinear(nn.Module):
    """Linear with learned factorised Gaussian noise (Fortunato et al., 2018): w = mu_w + sigma_w * f(eps_out) f(eps_in)^T,
    b = mu_b + sigma_b * f(eps_out), f(x) = sign(x) sqrt(|x|); CleanRL's init: mu ~ U(+-1/sqrt(in)), sigma_w =
    sigma_0/sqrt(in), sigma_b = sigma_0/sqrt(out). `eval()` uses the means: a deterministic greedy evaluation."""

    def __init__(self, in_features: int, out_features: int, std_init: float = 0.5):
        super().__init__()
        bound = 1 / math.sqrt(in_features)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), std_init / math.sqrt(in_features)))
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), std_init / math.sqrt(out_features)))
        # The noise is a buffer: saved with the weights, so a resumed run acts on the same sample. Its two factors
        # f(eps_in), f(eps_out) are all there is: the (out, in) noise matrix is never formed (see forward).
        self.register_buffer("epsilon_in", torch.zeros(in_features))
        self.register_buffer("epsilon_out", torch.zeros(out_features))
        self.register_load_state_dict_pre_hook(factor_the_saved_noise)
        self.reset_noise()

    def reset_noise(self) -> None:
        out_features, in_features = self.weight_mu.shape
        eps_in, eps_out = (torch.randn(size, device=self.weight_mu.device) for size in (in_features, out_features))
        self.epsilon_in.copy_(eps_in.sign() * eps_in.abs().sqrt())  # f(x), the class docstring
        self.epsilon_out.copy_(eps_out.sign() * eps_out.abs().sqrt())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return nn.functional.linear(x, self.weight_mu, self.bias_mu)
        # x w^T = x mu_w^T + f(eps_out) * ((x * f(eps_in)) sigma_w^T): the same product, without forming the noisy
        # 3136 x 512 weight (CleanRL forms it, 1.6M elements, at every call): two products of the layer's size and no
        # elementwise pass over it. Acting on one observation: 2.27 ms a layer before, 0.73 ms now (AVX2, fp32, 1 thread).
        bias = self.bias_mu + self.bias_sigma * self.epsilon_out
        noise = nn.functional.linear(x * self.epsilon_in.to(x.dtype), self.weight_sigma)
        return nn.functional.linear(x, self.weight_mu, bias) + noise * self.epsilon_out.to(noise.dtype)


def factor_the_saved_noise(layer, state_dict, prefix, *_) -> None:
    """A checkpoint or model file from before the factored layer saved the noise matrix f(eps_out) f(eps_in)^T and
    f(eps_out): its factors are read back from it (a row with the largest |f(eps_out)| divided by that entry)."""
    matrix, eps_out = state_dict.pop(prefix + "weight_epsilon", None), state_dict.pop(prefix + "bias_epsilon", None)
    if matrix is not None and eps_out is not None:
        row = eps_out.abs().argmax()
        state_dict[prefix + "epsilon_in"], state_dict[prefix + "epsilon_out"] = matrix[row] / eps_out[row], eps_out


class QNetwork(nn.Module):
    """CleanRL's NoisyDuelingDistributionalNetwork: the Nature CNN, then a value and an advantage stream, each a noisy
    512-unit layer and a noisy output of `n_atoms` logits (per action for the advantage); V + A - mean_a A (dueling
    on the logits, as CleanRL), softmaxed over each action's atoms, is its return distribution on `atoms`."""

    def __init__(self, num_actions: int, n_atoms: int, v_min: float, v_max: float, std_init: float = 0.5,
                 bf16: bool = False, channels_last: bool = False):  # fmt: skip
        super().__init__()
        self.network = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten(),
        )  # fmt: skip
        self.num_actions, self.n_atoms = num_actions, n_atoms
        self.register_buffer("atoms", torch.linspace(v_min, v_max, steps=n_atoms))
        self.value_hidden, self.value_out = NoisyLinear(3136, 512, std_init), NoisyLinear(512, n_atoms, std_init)
        self.advantage_hidden = NoisyLinear(3136, 512, std_init)
        self.advantage_out = NoisyLinear(512, num_actions * n_atoms, std_init)
        self.bf16, self.channels_last = bf16, channels_last
        if channels_last:
            self.network.to(memory_format=torch.channels_last)

    def reset_noise(self) -> None:
        for layer in self.modules():
            if isinstance(layer, NoisyLinear):
                layer.reset_noise()

    def pmfs(self, obs: torch.Tensor, bf16: bool | None = None) -> torch.Tensor:
        """(B, actions, atoms) float32: each action's probabilities. `bf16`: the network's setting, overridden."""
        bf16 = self.bf16 if bf16 is None else bf16
        # uint8 0..255 (float32 with --no-uint8-obs): integers up to 256 are exact in bf16, so one cast goes straight there
        dtype = torch.bfloat16 if bf16 else torch.float32
        memory_format = torch.channels_last if self.channels_last else torch.contiguous_format
        # cast, then change the layout: one copy doing both is a slow strided loop (32 stacks: 0.72 against 0.39 ms, Zen 3)
        x = obs.to(dtype).contiguous(memory_format=memory_format)
        conv1 = self.network[0]
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
            # x / 255 folded into conv1's weight: conv(x, w / 255) = conv(x / 255, w), no pass over the batch.
            hidden = self.network[1:](nn.functional.conv2d(x, conv1.weight * (1.0 / 255.0), conv1.bias, stride=4))
            value_hidden = nn.functional.relu(self.value_hidden(hidden))
            advantage_hidden = nn.functional.relu(self.advantage_hidden(hidden))
        # Output layers and softmax in fp32: 51 probabilities, some near 1e-3, and their logs are beyond bf16's mantissa.
        value = self.value_out(value_hidden.float()).view(len(obs), 1, self.n_atoms)
        advantage = self.advantage_out(advantage_hidden.float()).view(len(obs), self.num_actions, self.n_atoms)
        return torch.softmax(value + advantage - advantage.mean(dim=1, keepdim=True), dim=2)

    def forward(self, obs: torch.Tensor, bf16: bool | None = None) -> torch.Tensor:
        """Q-values, (B, num_actions) float32: the mean of each action's distribution."""
        return (self.pmfs(obs, bf16) * self.atoms).sum(dim=2)


def evaluation_player(
    saved: dict, *, num_envs: int, seed: int, device: torch.device, greedy: bool, epsilon: float, render: bool
) -> Player:
    """How `cleanrl_utils.evaluate` plays a model this script saved (and films it during training): whole games, filmed
    by EnvPool's renderer, the noisy layers on their means (`eval()`: a greedy evaluation is deterministic),
    epsilon-greedy as CleanRL evaluates DQN (`epsilon`, 0 with `greedy`; coin flips seeded with `seed`)."""
    train_args = saved["args"]
    envs = make_env(train_args["env_id"], num_envs, seed, train_args["max_episode_steps"], "rgb_array" if render else None)
    num_actions = int(envs.single_action_space.n)
    bf16, channels_last = play_in_bf16(train_args, device), train_args["channels_last"] == "on"
    support = (train_args["n_atoms"], train_args["v_min"], train_args["v_max"], train_args["noisy_std"])
    q_network = QNetwork(num_actions, *support, bf16=bf16, channels_last=channels_last)
    q_network.load_state_dict(saved["model_state_dict"])
    q_network.to(device).eval()
    rng, epsilon = np.random.default_rng(seed), 0.0 if greedy else epsilon

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            q_values = q_network(torch.as_tensor(obs, device=device))  # uint8 frames: the network casts them
        explore = rng.random(len(obs)) < epsilon
        return np.where(explore, rng.integers(0, num_actions, len(obs)), q_values.argmax(dim=1).cpu().numpy())

    return Player(envs=envs, act=act, whole_games=True)


def project_distribution(next_pmfs: torch.Tensor, returns: torch.Tensor, discounts: torch.Tensor, atoms: torch.Tensor):
    """The C51 target (Bellemare et al., Algorithm 1), (batch, atoms), with a discount per sample: atom z_j of the
    bootstrap distribution moves to R + d z_j (n-step return R, d = gamma^k or 0 after a termination), clipped into
    [v_min, v_max]; its probability splits between the two atoms around it by closeness (all to one it hits)."""
    v_min, v_max, n_atoms = atoms[0], atoms[-1], len(atoms)
    delta_z = (v_max - v_min) / (n_atoms - 1)
    moved = (returns[:, None] + discounts[:, None] * atoms[None]).clamp(v_min, v_max)
    position = (moved - v_min) / delta_z  # in atom units, in [0, n_atoms - 1]
    lower = position.floor().clamp(0, n_atoms - 1)
    upper = position.ceil().clamp(0, n_atoms - 1)
    lower_share = torch.where(upper == lower, torch.ones_like(position), upper - position)
    target = torch.zeros_like(next_pmfs)
    target.scatter_add_(1, lower.long(), lower_share * next_pmfs)
    target.scatter_add_(1, upper.long(), (1 - lower_share) * next_pmfs)
    return target


def td_loss(q_network: QNetwork, target_network: QNetwork, obs, actions, returns, next_obs, discounts, weights):
    """Double-Q distributional loss: the online network picks the bootstrap action, the target network's distribution
    of it is projected, and each sample's cross-entropy with Q's distribution of the action taken is weighted by its
    importance weight. (loss, per-sample cross-entropy: the new priorities, Q(s, a))."""
    rows = torch.arange(len(obs), device=obs.device)
    with torch.no_grad():
        next_action = q_network(next_obs).argmax(dim=1)
        next_pmfs = target_network.pmfs(next_obs)[rows, next_action]
        target = project_distribution(next_pmfs, returns, discounts, target_network.atoms)
    pmfs = q_network.pmfs(obs)[rows, actions.long()]
    cross_entropy = -(target * pmfs.clamp(min=1e-5, max=1 - 1e-5).log()).sum(dim=1)
    loss = (cross_entropy * weights).mean()
    return loss, cross_entropy.detach(), (pmfs.detach() * q_network.atoms).sum(dim=1)


if __name__ == "__main__":
    args = tyro.cli(Args)
    keys = dict(target_state_dict=dict, replay_buffer=dict)  # besides weights, Adam, counters
    checkpoint = load_torch(args.resume, SCRIPT, keys) if args.resume else None
    if checkpoint:  # the saved args, with the flags of this command that may change on resume applied
        args = resume_args(Args, checkpoint, args.resume, MAY_CHANGE_ON_RESUME + ("checkpoint_buffer",))
    validate_args(args, checkpoint)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    # prints them; args keep the resolved values. bf16 does not pay for batch-32 updates on a GPU: fp32 there
    # channels-last slowed Rainbow's fp32 CPU step (0.96x, benchmark/lever_ab.py): auto keeps the default layout there
    threads = choose_speed_levers(
        args, this_machine(device), checkpoint, bf16_pays_on_cuda=False, channels_last_pays_on_cpu=False
    )
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

    support = (args.n_atoms, args.v_min, args.v_max, args.noisy_std)
    levers = dict(bf16=args.precision == "bf16", channels_last=args.channels_last == "on")
    q_network = QNetwork(num_actions, *support, **levers).to(device)
    optimizer = torch.optim.Adam(q_network.parameters(), lr=args.learning_rate, eps=1.5e-4, fused=args.fused_adam)
    target_network = QNetwork(num_actions, *support, **levers).to(device)
    target_network.load_state_dict(q_network.state_dict())
    rb = ReplayBuffer(args.buffer_size, args.num_envs, args.n_step, args.gamma, args.prioritized_replay_alpha)
    start_iteration, global_step = 1, 0
    if checkpoint:  # weights, Adam, RNG states and replay buffer (one line if they do not fit); says where it resumes
        extra = {"target_state_dict": target_network, "replay_buffer": rb}
        start_iteration, global_step = restore_torch(args.resume, checkpoint, q_network, optimizer, args, extra=extra)
        print(f"replay buffer: {rb.env_steps:,} env steps restored" if rb.env_steps else "replay buffer: refilled from empty")
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
        return counters | weights | {"rng": torch_rng_states()} | replay

    # Episode statistics per *game* (not per life), from the unclipped reward.
    episode_returns = np.zeros(args.num_envs, dtype=np.float64)
    recent_returns: list[float] = []

    progress = ProgressLine(global_step, args.num_iterations * args.num_envs, "games")  # and SPS from here
    videos = VideoJobs(run_dir, model_file)
    stop = StopAfterIteration()  # from here on Ctrl-C/SIGTERM finish the iteration, checkpoint, exit 0
    obs, _ = envs.reset()
    rb.start_games(obs)
    # The step before the first one is not a boundary: the first transition of every env is valid.
    prev_episode_over = np.zeros(args.num_envs, dtype=bool)
    obs_dtype = torch.uint8 if args.uint8_obs else torch.float32
    # Acting on fewer than 16 observations is faster in fp32 (autocast casts every weight again on each call).
    acting_bf16 = args.precision == "bf16" and args.num_envs >= 16
    loss = q_values = None

    for iteration in range(start_iteration, args.num_iterations + 1):
        # ALGO LOGIC: greedy on the noisy network, its noise as last resampled (before the last gradient step, as
        # CleanRL): the noise explores, there is no epsilon. Beta: linearly to 1 at the run's --total-timesteps.
        beta0 = args.prioritized_replay_beta
        beta = min(1.0, beta0 + global_step * (1.0 - beta0) / args.total_timesteps)
        with torch.no_grad():
            actions = q_network(torch.from_numpy(obs).to(device, obs_dtype), bf16=acting_bf16).argmax(dim=1).cpu().numpy()
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
        # which refills --learning-starts steps first. A transition enters the tree n steps after it is taken.
        if rb.env_steps > args.learning_starts and rb.tree.count:
            for _ in range(updates_due(global_step, args.num_envs, args.train_frequency)):
                q_network.reset_noise()  # both networks draw new noise before each gradient step (CleanRL)
                target_network.reset_noise()
                batch, leaves = rb.sample(args.batch_size, beta, device, obs_dtype)
                loss, cross_entropy, q_values = td_loss(q_network, target_network, *batch)
                rb.update_priorities(leaves, cross_entropy.cpu().numpy(), args.prioritized_replay_eps)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

            # the target network copies Q each time global_step passes a multiple of --target-network-frequency
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
            writer.add_scalar("charts/beta", beta, global_step)
            writer.add_scalar("charts/SPS", sps, global_step)
            writer.add_scalar("charts/torch_threads", threads.count, global_step)
        threads.update()  # each iteration, not only when logging: 1,000 steps on crowded cores can take minutes
        if logging or saving:  # a diverged run must never be saved
            where = dict(iteration=iteration, global_step=global_step, checkpoint_path=checkpoint_path, writer=writer)
            exit_if_diverged(torch_all_finite(q_network, loss), **where, resumed_from=args.resume, progress=progress)
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

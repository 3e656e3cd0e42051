# PPO with an LSTM core for Atari through EnvPool, next-step autoreset done right (CleanRL's ppo_atari_lstm.py).
# Hyperparameters: CleanRL's Atari table (EnvPool paper, appendix F, Table 3); one frame per observation, the LSTM
# remembers the rest. Autoreset semantics: "The Value of Autoresetting" (Gymnasium), next-step mode.
# The recurrent state restarts at every episode boundary, life losses included: see collect_rollout.
# Words: with episodic_life an *episode* ends at every life loss (GAE and the masks see those); a
# *game* is all lives, and charts/episodic_return reports whole games.
from cleanrl_utils.stop import StopAfterIteration, exit_at_once_on_signals, stopped_line

if __name__ == "__main__":
    exit_at_once_on_signals()  # Ctrl-C while the libraries below load: one line, no traceback

import os
import random
import sys
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
import torch
import torch.nn as nn
import tyro
from torch.distributions.categorical import Categorical

from cleanrl_utils.checkpoint import load_torch, restore_torch, resume_args, resumed_env_seed, save_torch, torch_rng_states
from cleanrl_utils.checks import check_envpool_id, check_memory, check_positive, check_rollout_shape, check_run_args
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
    num_envs: int = 8
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
    """the number of mini-batches; each holds whole env sequences, so it must divide --num-envs"""
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
    lstm_size: int = 128
    """the LSTM's hidden size (CleanRL's ppo_atari_lstm.py: 512 CNN features in, 128 out)"""
    actor_init_std: float = 0.01
    """the gain of the actor's orthogonal init (CleanRL: 0.01, a near-uniform first policy). On a one-step memory
    task 0.01 stalls at the memoryless bound while 1.0 learns it: see docs/ppo.md"""

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

    # to be filled in runtime (not flags)
    batch_size: tyro.conf.Suppress[int] = 0
    minibatch_size: tyro.conf.Suppress[int] = 0
    num_iterations: tyro.conf.Suppress[int] = 0


def validate_args(args: Args) -> None:
    """Exit with one clear line (no traceback) on impossible settings, before anything is written."""
    check_run_args(args)
    check_rollout_shape(args.num_envs, args.num_steps, args.num_minibatches, args.update_epochs, args.total_timesteps)
    check_positive(args, "max_episode_steps")
    if not 0 < args.actor_init_std <= 10:  # CleanRL's 0.01; a gain of 10 already makes the first policy deterministic
        sys.exit(f"error: --actor-init-std must be in (0, 10], got {args.actor_init_std}")
    if not 1 <= args.lstm_size <= 8192:  # CleanRL's 128; 8192 is already 400M LSTM weights
        sys.exit(f"error: --lstm-size must be in [1, 8192], got {args.lstm_size}")
    if args.num_envs % args.num_minibatches != 0:
        # A minibatch is whole env sequences, unrolled from the rollout's stored initial state.
        sys.exit(
            f"error: --num-minibatches {args.num_minibatches} does not divide --num-envs {args.num_envs}; "
            "a minibatch holds whole env sequences"
        )
    check_envpool_id(args.env_id, "envpool.atari", num_envs=args.num_envs)
    obs_bytes = 84 * 84 * (1 if args.uint8_obs else 4)
    check_memory(args.num_steps * args.num_envs * (obs_bytes + 40), "the rollout storage", "--num-envs or --num-steps")


def make_env(env_id: str, num_envs: int, seed: int, max_episode_steps: int = 27_000, render_mode: str | None = None):
    """EnvPool Atari with the standard DeepMind preprocessing (84x84 grey, frame-skip 4, up to 30 no-ops, fire on
    reset) but ONE frame per observation (stack_num=1, as CleanRL's ppo_atari_lstm.py): motion is the LSTM's to
    remember. Life loss as termination and clipped rewards. `info["reward"]` keeps the unclipped reward and
    `info["terminated"]` marks game over. `render_mode="rgb_array"` (evaluation videos only) makes `render()` return
    full RGB frames."""
    # The limit is exact: a game over on the limit step stays a termination (EnvPool alone says truncated).
    atari = dict(stack_num=1, episodic_life=True, reward_clip=True, render_mode=render_mode)
    return make_envpool(env_id, max_episode_steps, env_type="gymnasium", num_envs=num_envs, seed=seed, **atari)


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class RecurrentState(NamedTuple):
    """The LSTM's state, each (1, num_envs, lstm_size): a NamedTuple so nn.LSTM takes it as its (h, c) pair."""

    h: torch.Tensor
    c: torch.Tensor


class PolicyOutput(NamedTuple):
    action: torch.Tensor
    logprob: torch.Tensor
    entropy: torch.Tensor
    value: torch.Tensor
    state: RecurrentState  # after the last step of the sequence


class Agent(nn.Module):
    """Nature CNN trunk on one frame, an LSTM, and a categorical actor and a value head on the LSTM's output."""

    def __init__(self, num_actions: int, lstm_size: int = 128, actor_init_std: float = 0.01, bf16: bool = False,
                 channels_last: bool = False):  # fmt: skip
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(1, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.lstm = nn.LSTM(512, lstm_size)
        for name, param in self.lstm.named_parameters():  # CleanRL's init: orthogonal weights, zero biases
            nn.init.constant_(param, 0) if "bias" in name else nn.init.orthogonal_(param, 1.0)
        self.actor = layer_init(nn.Linear(lstm_size, num_actions), std=actor_init_std)
        self.critic = layer_init(nn.Linear(lstm_size, 1), std=1)
        self.bf16, self.channels_last = bf16, channels_last
        if channels_last:
            self.network.to(memory_format=torch.channels_last)

    def initial_state(self, num_envs: int, device: torch.device) -> RecurrentState:
        zeros = torch.zeros(1, num_envs, self.lstm.hidden_size, device=device)
        return RecurrentState(zeros, zeros.clone())

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        # As ppo_atari_envpool.py's trunk: uint8 cast once to the compute dtype, x / 255 folded into conv1's weight.
        dtype = torch.bfloat16 if self.bf16 else torch.float32
        memory_format = torch.channels_last if self.channels_last else torch.contiguous_format
        # cast, then change the layout: one copy doing both is a slow strided loop (32 stacks: 0.72 against 0.39 ms, Zen 3)
        x = obs.to(dtype).contiguous(memory_format=memory_format)
        conv1 = self.network[0]
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            h = self.network[1:](nn.functional.conv2d(x, conv1.weight * (1.0 / 255.0), conv1.bias, stride=4))
        return h.float()  # the LSTM and the heads run in fp32: their outputs feed ratios and returns

    def unroll(self, obs: torch.Tensor, state: RecurrentState, reset: torch.Tensor) -> tuple[torch.Tensor, RecurrentState]:
        """LSTM outputs (T, N, lstm_size) for observations (T, N, 1, 84, 84) from `state`, the state entering row 0.
        Where reset[t] (T, N) is True the state is zeroed before row t: that row starts an episode. The rollout
        (T = 1, a step at a time) and the update (T = the rollout, whole sequences) both run through here."""
        num_steps, num_envs = reset.shape
        x = self.features(obs.flatten(0, 1)).view(num_steps, num_envs, -1)
        # One nn.LSTM call per stretch of rows in which no env starts an episode after the stretch's first row: the
        # same as stepping row by row (the state is zeroed only before a row that starts an episode), in a handful
        # of calls instead of T. The update's LSTM fwd + bwd over 128 x 2 rows: 93 ms row by row, 7 ms so (CPU).
        starts = (torch.nonzero(reset[1:].any(dim=1)).flatten() + 1).tolist() if num_steps > 1 else []  # rollout: 1
        bounds = [0, *starts, num_steps]
        outputs = []
        for first, end in zip(bounds[:-1], bounds[1:]):
            keep = (~reset[first]).to(x.dtype).view(1, -1, 1)
            output, (h, c) = self.lstm(x[first:end], RecurrentState(state.h * keep, state.c * keep))
            state = RecurrentState(h, c)
            outputs.append(output)
        return torch.cat(outputs), state

    def get_value(self, obs: torch.Tensor, state: RecurrentState, reset: torch.Tensor) -> torch.Tensor:
        return self.critic(self.unroll(obs, state, reset)[0]).squeeze(-1)

    def get_action_and_value(
        self, obs: torch.Tensor, state: RecurrentState, reset: torch.Tensor, action: torch.Tensor | None = None
    ) -> PolicyOutput:
        """Over sequences: obs (T, N, ...), reset (T, N); action, log-prob, entropy and value are (T, N)."""
        hidden, state = self.unroll(obs, state, reset)
        probs = Categorical(logits=self.actor(hidden), validate_args=False)
        if action is None:
            action = probs.sample()
        return PolicyOutput(action, probs.log_prob(action), probs.entropy(), self.critic(hidden).squeeze(-1), state)


class StateResets:
    """When the recurrent state restarts, from the boundary flags of the steps so far (next-step autoreset). A step
    that ends an episode (termination, life loss, truncation) makes the next step stale: that step still sees the
    episode's real last observation, with the episode's state (its value is a truncation's bootstrap), and its action
    is ignored. The step after the stale one is the new episode's first real step: the state is zeroed entering it.
    So reset[k] = stale[k-1] = episode_over[k-2]. Training and evaluation both keep the flags with this class."""

    def __init__(self, num_envs: int, device: torch.device):
        self.stale = torch.zeros(num_envs, dtype=torch.bool, device=device)  # the next step is stale
        self.reset = torch.ones(num_envs, dtype=torch.bool, device=device)  # the next step starts with a zero state

    def restart(self) -> None:
        """The envs were reset: no step is stale, and every state starts from zero."""
        self.stale[:], self.reset[:] = False, True

    def after_step(self, episode_over: torch.Tensor) -> None:
        self.reset, self.stale = self.stale, episode_over


def evaluation_player(
    saved: dict, *, num_envs: int, seed: int, device: torch.device, greedy: bool, epsilon: float, render: bool
) -> Player:
    """How `cleanrl_utils.evaluate` plays a model this script saved (and films it during training): whole games,
    every life, filmed by EnvPool's own renderer; actions sampled from the policy, or its most likely one with
    `greedy`. The envs are wrapped so the state restarts at the same boundaries as in training. `epsilon` is DQN's,
    unused here."""
    train_args = saved["args"]
    render_mode = "rgb_array" if render else None
    envs = make_env(train_args["env_id"], num_envs, seed, train_args["max_episode_steps"], render_mode=render_mode)
    bf16, channels_last = play_in_bf16(train_args, device), train_args["channels_last"] == "on"
    agent = Agent(envs.single_action_space.n, train_args["lstm_size"], bf16=bf16, channels_last=channels_last)
    agent.load_state_dict(saved["model_state_dict"])
    agent.to(device).eval()
    playing = PlayingEnvs(envs, StateResets(num_envs, device))
    state = agent.initial_state(num_envs, device)

    @torch.no_grad()
    def act(obs: np.ndarray) -> np.ndarray:
        nonlocal state
        obs, reset = torch.as_tensor(obs, device=device)[None], playing.resets.reset[None]
        hidden, state = agent.unroll(obs, state, reset)
        logits = agent.actor(hidden[0])
        action = logits.argmax(dim=-1) if greedy else Categorical(logits=logits).sample()
        return action.cpu().numpy()

    return Player(envs=playing, act=act, whole_games=True)


class PlayingEnvs:
    """Evaluation envs that keep StateResets up to date: a reset restarts every env's state, a step's boundaries
    restart it two steps later. Anything else is the envs' own."""

    def __init__(self, envs, resets: StateResets):
        self.envs, self.resets = envs, resets

    def __getattr__(self, name: str):
        return getattr(self.envs, name)

    def reset(self, *args, **kwargs):
        self.resets.restart()
        return self.envs.reset(*args, **kwargs)

    def step(self, actions: np.ndarray):
        obs, reward, terminated, truncated, info = self.envs.step(actions)
        self.resets.after_step(torch.as_tensor(terminated | truncated, device=self.resets.stale.device))
        return obs, reward, terminated, truncated, info


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


@dataclass
class Rollout:
    """One rollout's storage, (T, N) per row unless said. Rows are as the agent saw them: obs[t] and the state
    entering row t, zeroed first where reset[t]."""

    obs: torch.Tensor  # (T, N, 1, 84, 84)
    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor  # (T + 1, N): the last row is V(obs after the rollout), the bootstrap
    rewards: torch.Tensor
    terminations: torch.Tensor
    truncations: torch.Tensor
    resets: torch.Tensor
    initial_state: RecurrentState  # entering row 0, before its reset: the update unrolls each sequence from it
    prev_episode_over: torch.Tensor  # (N,): row 0 is stale

    @classmethod
    def zeros(cls, num_steps: int, agent: Agent, envs, obs_dtype: torch.dtype, device: torch.device) -> "Rollout":
        """Empty storage. Observations are kept in the network's memory layout: a minibatch converts dtype only."""
        num_envs, obs_shape = envs.config["num_envs"], envs.single_observation_space.shape
        layout = torch.channels_last if agent.channels_last else torch.contiguous_format
        obs = torch.zeros((num_steps * num_envs,) + obs_shape, dtype=obs_dtype, device=device)
        rows = (num_steps, num_envs)
        return cls(
            obs=obs.contiguous(memory_format=layout).view(rows + obs_shape),
            actions=torch.zeros(rows, dtype=torch.long, device=device),
            logprobs=torch.zeros(rows, device=device),
            values=torch.zeros((num_steps + 1, num_envs), device=device),
            rewards=torch.zeros(rows, device=device),
            terminations=torch.zeros(rows, dtype=torch.bool, device=device),
            truncations=torch.zeros(rows, dtype=torch.bool, device=device),
            resets=torch.zeros(rows, dtype=torch.bool, device=device),
            initial_state=agent.initial_state(num_envs, device),
            prev_episode_over=torch.zeros(num_envs, dtype=torch.bool, device=device),
        )


@dataclass
class Carry:
    """What runs on from one rollout into the next."""

    obs: torch.Tensor  # the next observation
    state: RecurrentState  # the LSTM state after the last row
    resets: StateResets
    game_returns: np.ndarray  # per env, the unclipped return of the game so far


class FinishedGame(NamedTuple):
    global_step: int
    game_return: float
    length: int


@torch.no_grad()
def collect_rollout(agent: Agent, envs, carry: Carry, storage: Rollout, global_step: int) -> list[FinishedGame]:
    """Fill `storage` with the next rollout and advance `carry`; returns the games that ended (whole games, all
    lives, unclipped rewards). A step at a time through Agent.unroll, with StateResets' flags stored as `resets`,
    so the update can unroll the same sequences from `storage.initial_state` and see what the rollout saw."""
    num_envs = carry.obs.shape[0]
    storage.initial_state = RecurrentState(carry.state.h.clone(), carry.state.c.clone())
    storage.prev_episode_over = carry.resets.stale.clone()
    games = []
    for step in range(storage.rewards.shape[0]):
        global_step += num_envs
        storage.obs[step] = carry.obs
        storage.resets[step] = carry.resets.reset
        out = agent.get_action_and_value(carry.obs[None], carry.state, carry.resets.reset[None])
        carry.state = out.state
        storage.actions[step], storage.logprobs[step], storage.values[step] = out.action[0], out.logprob[0], out.value[0]

        # On a stale step EnvPool ignores the action and returns the reset observation with reward 0; compute_gae
        # masks that row, and StateResets zeroes the state entering the row after it.
        next_obs, reward, term, trunc, info = envs.step(out.action[0].cpu().numpy())
        device = carry.obs.device
        storage.rewards[step] = torch.from_numpy(reward).to(device)
        storage.terminations[step] = torch.from_numpy(term).to(device)
        storage.truncations[step] = torch.from_numpy(trunc).to(device)
        carry.obs = torch.from_numpy(next_obs).to(device, storage.obs.dtype)
        carry.resets.after_step(storage.terminations[step] | storage.truncations[step])

        # A game ends at game over (info["terminated"]; `term` is also set on every life loss) or at the time limit.
        # Its length is EnvPool's elapsed_step, which does not count stale steps.
        carry.game_returns += info["reward"]
        game_over = info["terminated"].astype(bool) | trunc
        for i in np.flatnonzero(game_over):
            games.append(FinishedGame(global_step, float(carry.game_returns[i]), int(info["elapsed_step"][i])))
        carry.game_returns[game_over] = 0.0
    # The bootstrap row: the value the next rollout's row 0 will see (its state is not kept: row 0 recomputes it).
    storage.values[-1] = agent.get_value(carry.obs[None], carry.state, carry.resets.reset[None])[0]
    return games


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp_min(1)


def ppo_loss(
    agent: Agent, obs, initial_state, resets, actions, old_logprobs, advantages, returns, old_values, valid, args: Args
) -> tuple[torch.Tensor, dict]:
    """Clipped PPO loss on one minibatch of whole env sequences, (T, n) each: the log-probs and values are
    recomputed by unrolling the LSTM from the rollout's initial state with the rollout's resets. Stale rows (valid ==
    False) contribute nothing: every mean, including the advantage normalisation statistics, runs over valid rows."""
    mask = valid.to(torch.float32)
    out = agent.get_action_and_value(obs, initial_state, resets, actions)
    logratio = out.logprob - old_logprobs
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
        v_loss_unclipped = (out.value - returns) ** 2
        v_clipped = old_values + torch.clamp(out.value - old_values, -args.clip_coef, args.clip_coef)
        v_loss_clipped = (v_clipped - returns) ** 2
        v_loss = 0.5 * masked_mean(torch.max(v_loss_unclipped, v_loss_clipped), mask)
    else:
        v_loss = 0.5 * masked_mean((out.value - returns) ** 2, mask)

    entropy_loss = masked_mean(out.entropy, mask)
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
    stats = dict(policy_loss=pg_loss, value_loss=v_loss, entropy=entropy_loss, old_approx_kl=old_approx_kl)
    stats |= dict(approx_kl=approx_kl, clipfrac=clipfrac)
    return loss, {name: value.detach() for name, value in stats.items()}  # logged, not differentiated


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

    levers = dict(bf16=args.precision == "bf16", channels_last=args.channels_last == "on")
    agent = Agent(envs.single_action_space.n, args.lstm_size, args.actor_init_std, **levers).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=args.fused_adam)
    start_iteration, global_step = 1, 0
    if checkpoint:  # weights, Adam and RNG states (one line if they do not fit); prints where the run resumes
        start_iteration, global_step = restore_torch(args.resume, checkpoint, agent, optimizer, args)
    writer = make_writer(args, run_name, run_dir, checkpoint["global_step"] if checkpoint else None)  # after every check

    def model_file(path: str) -> str:
        """The `.cleanrl_model` format `cleanrl_utils.evaluate` reads: script name, args, weights."""
        save_torch(path, {**WRITTEN_BY, "model_state_dict": agent.state_dict(), "args": vars(args)})
        return path

    def training_state(iteration: int) -> dict:
        counters = WRITTEN_BY | dict(run_name=run_name, args=vars(args), iteration=iteration, global_step=global_step)
        weights = dict(model_state_dict=agent.state_dict(), optimizer_state_dict=optimizer.state_dict())
        return counters | weights | {"rng": torch_rng_states()}

    # ALGO Logic: Storage setup. Observations stay uint8 (4x less memory traffic than float32).
    obs_dtype = torch.uint8 if args.uint8_obs else torch.float32
    storage = Rollout.zeros(args.num_steps, agent, envs, obs_dtype, device)
    recent_returns: list[float] = []  # whole games (all lives), unclipped

    progress = ProgressLine(global_step, args.num_iterations * args.batch_size, "games")  # and SPS from here
    videos = VideoJobs(run_dir, model_file)
    stop = StopAfterIteration()  # from here on Ctrl-C/SIGTERM finish the iteration, checkpoint, exit 0
    next_obs_np, _ = envs.reset()
    # A fresh start (a resume plays new games too): zero states, no stale step before row 0.
    carry = Carry(
        obs=torch.from_numpy(next_obs_np).to(device, obs_dtype),
        state=agent.initial_state(args.num_envs, device),
        resets=StateResets(args.num_envs, device),
        game_returns=np.zeros(args.num_envs, dtype=np.float64),
    )
    envs_per_minibatch = args.num_envs // args.num_minibatches

    for iteration in range(start_iteration, args.num_iterations + 1):
        if args.anneal_lr:  # linearly, from --learning-rate at iteration 1 towards 0 after the last one
            optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / args.num_iterations) * args.learning_rate

        for game in collect_rollout(agent, envs, carry, storage, global_step):
            writer.add_scalar("charts/episodic_return", game.game_return, game.global_step)
            writer.add_scalar("charts/episodic_length", game.length, game.global_step)
            recent_returns.append(game.game_return)
        global_step += args.batch_size

        # GAE (see compute_gae for the autoreset rules)
        with torch.no_grad():
            advantages, valid_mask = compute_gae(
                storage.values,
                storage.rewards,
                storage.terminations,
                storage.truncations,
                storage.prev_episode_over,
                args.gamma,
                args.gae_lambda,
            )
            returns = advantages + storage.values[:-1]

        # The batch as whole env sequences: one named field per argument of the loss, env on dim 1
        sequences = dict(obs=storage.obs, resets=storage.resets, actions=storage.actions, old_logprobs=storage.logprobs)
        sequences |= dict(advantages=advantages, returns=returns, old_values=storage.values[:-1], valid=valid_mask)

        # Optimizing the policy and value network: each minibatch is whole env sequences, unrolled from the state
        # they started the rollout with (CleanRL's ppo_atari_lstm.py splits the batch the same way)
        clipfracs = []
        for epoch in range(args.update_epochs):
            env_order = torch.randperm(args.num_envs, device=device)
            for start in range(0, args.num_envs, envs_per_minibatch):
                mb_envs = env_order[start : start + envs_per_minibatch]
                minibatch = {name: x.index_select(1, mb_envs) for name, x in sequences.items()}
                initial_state = RecurrentState(*(x.index_select(1, mb_envs) for x in storage.initial_state))
                loss, stats = ppo_loss(agent, initial_state=initial_state, **minibatch, args=args)
                clipfracs.append(stats["clipfrac"])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

            if args.target_kl is not None and stats["approx_kl"] > args.target_kl:
                break

        valid_values, valid_returns = storage.values[:-1][valid_mask], returns[valid_mask]
        var_y = valid_returns.var() if len(valid_returns) > 1 else torch.tensor(0.0)  # one row: no variance, no warning
        explained_var = (1 - (valid_returns - valid_values).var() / var_y).item() if var_y > 0 else float("nan")

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

"""PPO for Atari through EnvPool's asynchronous interface (EnvPool paper, appendix A.3): send/recv.

`envpool.make(num_envs=N, batch_size=B)` with B < N: each `recv()` returns the B envs that finished first, in
any order, with `info["env_id"]`; `send(actions, env_id)` steps exactly those. EnvPool's threads simulate the
other N - B envs while Python runs the policy on these B.

Storage: row r of a rollout is the r-th `recv()`, stored as delivered: its env ids, observations, and the
reward, termination and truncation that came with them, which are the result of each env's *previous* action;
plus the action, log-prob and value computed for that row. A transition pairs the action sent for env e at
row r with what env e's *next appearance* delivers (some later row, not r + 1). `compute_gae_async` does that
pairing while it scans each env's own subsequence of rows.

Next-step autoreset, per env ("The Value of Autoresetting", Gymnasium): a row that arrives with a boundary of
its env (termination, truncation, or an episodic_life life loss) holds the episode's last observation; the
action sent for it is ignored and the env's next appearance is the reset observation with reward 0. So that
row is stale and masked. Terminations bootstrap 0; truncations bootstrap V(last obs), the stale row's value.

Rollout edge: an env's last appearance in a rollout has no result yet. It is masked, not carried into the next
rollout: its value is the bootstrap of the env's previous row (as V(next obs) is in the sync script), so no
advantage is biased, and the batch keeps a fixed shape (every minibatch the same size). Carrying would save one
row per env per rollout (16 of 1,024 with the defaults) for a variable-size batch and state held across the
update. Its result arrives as the env's first row of the next rollout, which carries its own stale flag, so only
the running game returns cross the edge. An env seen once in a rollout has no valid row; rarer envs have fewer.

Hyperparameters: CleanRL's Atari table (EnvPool paper, appendix F, Table 3), with the EnvPool example's 16
envs in batches of 8; the rollout keeps Table 3's 1,024 env steps per iteration (16 x 64).
Words: with episodic_life an *episode* ends at every life loss (GAE and the masks see those); a *game* is all
lives, and charts/episodic_return reports whole games.

Determinism: the recv order depends on EnvPool's thread timing, so a seeded run repeats exactly only with
`--num-threads 1`: one simulation thread serves the envs first-in first-out, so the order is fixed (with
16 envs in batches of 8: envs 0-7, then 8-15, and so on).

`--overlap` runs the actor (the rollout) in a thread on the next rollout while the learner updates on this
one (Cleanba, Huang et al.): the rollout uses parameters one update old, and PPO's ratio is taken against the
behaviour policy's stored log-probs, as always.
"""

from cleanrl_utils.stop import StopAfterIteration, exit_at_once_on_signals, stopped_line

if __name__ == "__main__":
    exit_at_once_on_signals()  # Ctrl-C while the libraries below load: one line, no traceback

import copy
import os
import random
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

import envpool
import numpy as np
import torch
import torch.nn as nn
import tyro
from torch.distributions.categorical import Categorical

from cleanrl_utils.checkpoint import (
    MAY_CHANGE_ON_RESUME,
    load_torch,
    restore_torch,
    resume_args,
    resumed_env_seed,
    save_torch,
    torch_rng_states,
)
from cleanrl_utils.checks import check_envpool_id, check_memory, check_positive, check_rollout_shape, check_run_args
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
    num_envs: int = 16
    """the number of parallel game environments"""
    async_batch_size: int = 8
    """EnvPool's batch_size: each recv() returns this many envs, those that finished first (= --num-envs: sync order)"""
    num_threads: int = 0
    """EnvPool's simulation threads, at most --num-envs (0: EnvPool's choice); 1 gives a fixed recv order, so a seeded run repeats exactly"""
    overlap: bool = False
    """collect the next rollout in a thread while the learner updates on this one (the actor is one update behind)"""
    num_steps: int = 64
    """env steps per env per rollout, on average: a rollout is --num-envs x --num-steps steps, in rows of --async-batch-size"""
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

    # to be filled in runtime (not flags)
    batch_size: tyro.conf.Suppress[int] = 0
    minibatch_size: tyro.conf.Suppress[int] = 0
    num_iterations: tyro.conf.Suppress[int] = 0


def validate_args(args: Args) -> None:
    """Exit with one clear line (no traceback) on impossible settings, before anything is written."""
    check_run_args(args)
    check_rollout_shape(args.num_envs, args.num_steps, args.num_minibatches, args.update_epochs, args.total_timesteps)
    check_positive(args, "max_episode_steps")
    check_envpool_id(args.env_id, "envpool.atari", num_envs=args.num_envs)
    check_async_shape(args.num_envs, args.num_steps, args.async_batch_size)
    if args.num_steps < 2:  # an env's last row in a rollout has no result yet (compute_gae_async): it is not learned from
        sys.exit(
            f"error: --num-steps must be >= 2 here (with 1, almost no row has a result to learn from), got {args.num_steps}"
        )
    if not 0 <= args.num_threads <= args.num_envs:  # more threads than envs idle; 100,000 aborted in C++ (trial 19)
        sys.exit(
            f"error: --num-threads must be in 0..--num-envs ({args.num_envs}) (0 = EnvPool's choice), got {args.num_threads}"
        )
    obs_bytes = 4 * 84 * 84 * (1 if args.uint8_obs else 4)
    check_memory(args.num_steps * args.num_envs * (obs_bytes + 40), "the rollout storage", "--num-envs or --num-steps")


def check_async_shape(num_envs: int, num_steps: int, async_batch_size: int) -> None:
    """One recv returns at most --num-envs envs, and the rollout is a whole number of recv rows."""
    if not 0 < async_batch_size <= num_envs:
        sys.exit(
            f"error: --async-batch-size must be in 1..--num-envs ({num_envs}), got {async_batch_size} (its default is 8: "
            f"with --num-envs {num_envs} pass e.g. --async-batch-size {max(1, num_envs // 2)})"
        )
    if (num_envs * num_steps) % async_batch_size != 0:
        sys.exit(
            f"error: --async-batch-size {async_batch_size} does not divide the rollout of {num_envs * num_steps} steps "
            f"(= --num-envs {num_envs} x --num-steps {num_steps})"
        )


def make_env(
    env_id: str,
    num_envs: int,
    seed: int,
    max_episode_steps: int = 27_000,
    render_mode: str | None = None,
    batch_size: int | None = None,
    num_threads: int = 0,
):
    """EnvPool Atari with the standard DeepMind preprocessing (84x84 grey, 4-frame stack,
    frame-skip 4, up to 30 no-ops, fire on reset), life loss as termination and clipped rewards.
    `info["reward"]` keeps the unclipped reward and `info["terminated"]` marks game over.
    `render_mode="rgb_array"` (evaluation videos only) makes `render()` return full RGB frames.
    `batch_size` < num_envs makes the pool asynchronous (async_reset, recv, send); None: synchronous, for
    evaluation."""
    # Not exact at the limit step: EnvPool reports a game over on it as truncated. The sync scripts' fix
    # (cleanrl_utils.envpool_time_limit) wraps step() only; this pool's recv() returns whichever envs finished first.
    return envpool.make(
        env_id,
        env_type="gymnasium",
        num_envs=num_envs,
        batch_size=batch_size or num_envs,
        num_threads=num_threads,
        seed=seed,
        episodic_life=True,
        reward_clip=True,
        max_episode_steps=max_episode_steps,
        render_mode=render_mode,
    )


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


def compute_gae_async(
    env_ids: torch.Tensor,  # (R, B) long: the envs recv r returned
    values: torch.Tensor,  # (R, B): V(obs) of each row
    rewards: torch.Tensor,  # (R, B): delivered with the row, the result of the env's previous action
    terminations: torch.Tensor,  # (R, B) bool: delivered with the row
    truncations: torch.Tensor,  # (R, B) bool: delivered with the row
    num_envs: int,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE for an async next-step rollout, per env. Returns (advantages, valid_mask), both (R, B).

    The rows are scanned backwards once, keeping per env what its *next* appearance delivered (reward,
    termination, truncation, value): that is the result of the action sent at the env's current row. So each
    env's own subsequence is scanned as the sync GAE scans a column, with the same rules ("The Value of
    Autoresetting", "How does Autoreset-Mode Affect GAE"):
      - a termination bootstraps 0; a truncation bootstraps V(next appearance), the episode's real last obs;
      - the accumulation stops at every boundary;
      - a row delivered with a boundary of its env is stale: invalid, advantage 0;
      - an env's last row in the rollout has no result: invalid, advantage 0, and its value is the bootstrap
        of the env's previous row.
    Relies on an env appearing at most once per row, which EnvPool guarantees (an env is either in flight or
    returned, never both)."""
    num_rows = env_ids.shape[0]
    dtype = values.dtype
    advantages = torch.zeros_like(values)
    valid_mask = torch.zeros_like(terminations)
    # per env, its next appearance (seen: the env has a later row in this rollout)
    next_value, next_reward, next_gae = (torch.zeros(num_envs, dtype=dtype, device=values.device) for _ in range(3))
    seen, next_termination, next_episode_over = (
        torch.zeros(num_envs, dtype=torch.bool, device=values.device) for _ in range(3)
    )
    for row in reversed(range(num_rows)):
        ids = env_ids[row]
        has_result = seen[ids]
        bootstrap = (~next_termination[ids]).to(dtype)
        keep_accumulating = (~next_episode_over[ids]).to(dtype)
        delta = next_reward[ids] + gamma * bootstrap * next_value[ids] - values[row]
        gae = (delta + gamma * gae_lambda * keep_accumulating * next_gae[ids]) * has_result
        stale = terminations[row] | truncations[row]
        valid_mask[row] = has_result & ~stale
        advantages[row] = gae * valid_mask[row]
        # this row becomes the next appearance of its envs for the rows before it
        next_gae[ids], next_value[ids], next_reward[ids] = gae, values[row], rewards[row].to(dtype)
        next_termination[ids], next_episode_over[ids], seen[ids] = terminations[row], stale, True
    return advantages, valid_mask


def new_storage(
    num_rows: int, batch: int, obs_shape: tuple, *, obs_dtype: torch.dtype, device, obs_layout=torch.contiguous_format
) -> dict[str, torch.Tensor]:
    """One rollout: row r is the r-th recv, as delivered (see the module docstring), and what was sent back.
    Observations are kept in the network's memory layout, so a minibatch converts dtype only, not layout."""
    obs = torch.zeros((num_rows * batch,) + obs_shape, dtype=obs_dtype, device=device).contiguous(memory_format=obs_layout)
    return dict(
        obs=obs.view((num_rows, batch) + obs_shape),
        env_ids=torch.zeros((num_rows, batch), dtype=torch.long, device=device),
        actions=torch.zeros((num_rows, batch), dtype=torch.long, device=device),
        logprobs=torch.zeros((num_rows, batch), device=device),
        values=torch.zeros((num_rows, batch), device=device),
        rewards=torch.zeros((num_rows, batch), device=device),
        terminations=torch.zeros((num_rows, batch), dtype=torch.bool, device=device),
        truncations=torch.zeros((num_rows, batch), dtype=torch.bool, device=device),
    )


def collect_rollout(envs, agent: Agent, storage: dict[str, torch.Tensor], episode_returns: np.ndarray) -> list:
    """Fill `storage` with one rollout from an async pool that has been reset (or has a send pending for every
    env). Returns the games that ended, as (env steps into this rollout, game return, game length).
    `episode_returns` (per env, unclipped) carries the running games across rollouts."""
    games = []
    num_rows, batch = storage["env_ids"].shape
    device, obs_dtype = storage["obs"].device, storage["obs"].dtype
    for row in range(num_rows):
        next_obs_np, reward, term, trunc, info = envs.recv()
        env_id = info["env_id"]
        next_obs = torch.from_numpy(next_obs_np).to(device, obs_dtype)
        with torch.no_grad():
            action, logprob, _, value = agent.get_action_and_value(next_obs)
        # Sent first, stored after: EnvPool steps these envs while Python does the bookkeeping. On a stale row
        # (delivered with a boundary) EnvPool ignores the action and returns the reset observation with reward 0.
        envs.send(action.cpu().numpy(), env_id)
        storage["obs"][row] = next_obs
        storage["env_ids"][row] = torch.from_numpy(env_id.astype(np.int64)).to(device)
        storage["actions"][row] = action
        storage["logprobs"][row] = logprob
        storage["values"][row] = value
        storage["rewards"][row] = torch.from_numpy(reward).to(device)
        storage["terminations"][row] = torch.from_numpy(term).to(device)
        storage["truncations"][row] = torch.from_numpy(trunc).to(device)

        # A game ends at game over (info["terminated"]; `term` is also set on every life loss) or at
        # the time limit. Its length is EnvPool's elapsed_step, which does not count stale steps.
        episode_returns[env_id] += info["reward"]
        game_over = info["terminated"].astype(bool) | trunc
        for i in np.flatnonzero(game_over):
            games.append(((row + 1) * batch, float(episode_returns[env_id[i]]), int(info["elapsed_step"][i])))
        episode_returns[env_id[game_over]] = 0.0
    return games


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


def ppo_update(agent: Agent, optimizer, batch: dict[str, torch.Tensor], args: Args, generator: torch.Generator):
    """The update epochs on one flattened rollout, minibatch order drawn from `generator` (the actor thread
    of --overlap samples actions from torch's global RNG at the same time). Returns (last loss, last
    minibatch's stats, every minibatch's clipfrac)."""
    clipfracs = []
    for epoch in range(args.update_epochs):
        b_inds = torch.randperm(args.batch_size, device=generator.device, generator=generator)
        for start in range(0, args.batch_size, args.minibatch_size):
            mb_inds = b_inds[start : start + args.minibatch_size]
            loss, stats = ppo_loss(agent, **{name: x.index_select(0, mb_inds) for name, x in batch.items()}, args=args)
            clipfracs.append(stats["clipfrac"])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()

        if args.target_kl is not None and stats["approx_kl"] > args.target_kl:
            break
    return loss, stats, clipfracs


if __name__ == "__main__":
    args = tyro.cli(Args)
    checkpoint = load_torch(args.resume, SCRIPT) if args.resume else None
    if checkpoint:  # the saved args, with the flags of this command that may change on resume applied
        args = resume_args(Args, checkpoint, args.resume, MAY_CHANGE_ON_RESUME + ("num_threads", "overlap"))  # speed only
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
    envs = make_env(
        args.env_id, args.num_envs, env_seed, args.max_episode_steps, None, args.async_batch_size, args.num_threads
    )

    agent = Agent(envs.single_action_space.n, bf16=args.precision == "bf16", channels_last=args.channels_last == "on").to(
        device
    )
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

    # ALGO Logic: Storage setup. Observations stay uint8 (4x less memory traffic than float32). With --overlap
    # the actor fills one storage while the learner reads the other.
    obs_dtype = torch.uint8 if args.uint8_obs else torch.float32
    num_rows, obs_shape = args.batch_size // args.async_batch_size, envs.single_observation_space.shape
    layout = torch.channels_last if agent.channels_last else torch.contiguous_format
    storages = [
        new_storage(num_rows, args.async_batch_size, obs_shape, obs_dtype=obs_dtype, device=device, obs_layout=layout)
        for _ in range(1 + args.overlap)
    ]

    # Episode statistics per *game* (not per life), from the unclipped reward.
    episode_returns = np.zeros(args.num_envs, dtype=np.float64)
    recent_returns: list[float] = []

    # The minibatch order has its own generator: with --overlap the actor draws actions from the global one at
    # the same time. Seeded from the first iteration run, so a resumed run is as reproducible as a fresh one.
    update_rng = torch.Generator(device=device).manual_seed(args.seed + start_iteration - 1)
    # --overlap: the actor plays with its own copy of the weights, refreshed before each update; rollout k + 1
    # is collected with the weights update k starts from, so the behaviour policy is one update old.
    actor = copy.deepcopy(agent) if args.overlap else agent
    actor_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="actor") if args.overlap else None
    next_rollout = None  # with --overlap: the rollout the actor thread is collecting

    progress = ProgressLine(global_step, args.num_iterations * args.batch_size, "games")  # and SPS from here
    videos = VideoJobs(run_dir, model_file)
    stop = StopAfterIteration()  # from here on Ctrl-C/SIGTERM finish the iteration, checkpoint, exit 0
    envs.async_reset()  # every env starts; the first recv delivers reset observations, no boundary

    for iteration in range(start_iteration, args.num_iterations + 1):
        if args.anneal_lr:  # linearly, from --learning-rate at iteration 1 towards 0 after the last one
            optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / args.num_iterations) * args.learning_rate

        storage = storages[iteration % len(storages)]
        if next_rollout is None:
            games = collect_rollout(envs, actor, storage, episode_returns)
        else:
            games = next_rollout.result()
            next_rollout = None
        for steps_into_rollout, game_return, game_length in games:
            writer.add_scalar("charts/episodic_return", game_return, global_step + steps_into_rollout)
            writer.add_scalar("charts/episodic_length", game_length, global_step + steps_into_rollout)
            recent_returns.append(game_return)
        global_step += args.batch_size
        if args.overlap and iteration < args.num_iterations and not stop.requested:
            actor.load_state_dict(agent.state_dict())
            next_storage = storages[(iteration + 1) % len(storages)]
            next_rollout = actor_thread.submit(collect_rollout, envs, actor, next_storage, episode_returns)

        # GAE per env (see compute_gae_async for the pairing of rows and the autoreset rules)
        with torch.no_grad():
            rollout_values = storage["values"]
            advantages, valid_mask = compute_gae_async(
                storage["env_ids"],
                rollout_values,
                storage["rewards"],
                storage["terminations"],
                storage["truncations"],
                args.num_envs,
                args.gamma,
                args.gae_lambda,
            )
            returns = advantages + rollout_values

        # flatten the batch: one named field per argument of the loss
        rollout = dict(obs=storage["obs"], actions=storage["actions"], old_logprobs=storage["logprobs"])
        rollout |= dict(advantages=advantages, returns=returns, old_values=rollout_values, valid=valid_mask)
        batch = {name: x.reshape((args.batch_size,) + x.shape[2:]) for name, x in rollout.items()}

        # Optimizing the policy and value network
        loss, stats, clipfracs = ppo_update(agent, optimizer, batch, args, update_rng)

        b_returns, b_values, b_valid = batch["returns"], batch["old_values"], batch["valid"]
        valid_values, valid_returns = b_values[b_valid], b_returns[b_valid]
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

    if next_rollout is not None:  # a stop during the update: the rollout under way is finished and dropped
        next_rollout.result()
    if args.save_model:
        print(f"model saved to {model_file(os.path.join(run_dir, f'{args.exp_name}.cleanrl_model'))}")
    videos.finish()
    envs.close()
    record_end_step(writer, global_step)
    writer.close()

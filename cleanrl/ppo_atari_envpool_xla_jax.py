# PPO for Atari through EnvPool's XLA interface, in JAX: the JAX twin of ppo_atari_envpool.py.
# Hyperparameters: CleanRL's Atari table (EnvPool paper, appendix F, Table 3).
# Autoreset semantics: "The Value of Autoresetting" (Gymnasium), next-step mode.
# Jitting: "Jitting for JAX" (EnvPool paper): env.xla() gives send/recv/step usable inside jax.jit,
# so one collect-and-update iteration is a single compiled call and Python only logs.
# Words: with episodic_life an *episode* ends at every life loss (GAE and the masks see those); a
# *game* is all lives, and charts/episodic_return reports whole games.
from cleanrl_utils.stop import StopAfterIteration, exit_at_once_on_signals, stopped_line

if __name__ == "__main__":
    exit_at_once_on_signals()  # Ctrl-C while the libraries below load: one line, no traceback

import itertools
import os
import random
from dataclasses import dataclass
from functools import partial
from typing import Literal, NamedTuple

import envpool
import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
from flax.training.train_state import TrainState

from cleanrl_utils.checkpoint import (
    load_msgpack,
    msgpack_rng_states,
    restore_msgpack,
    resume_args,
    resumed_env_seed,
    save_msgpack,
)
from cleanrl_utils.checks import check_envpool_id, check_memory, check_positive, check_rollout_shape, check_run_args
from cleanrl_utils.evaluate import Player, written_by
from cleanrl_utils.hardware import choose_speed_levers, jax_machine
from cleanrl_utils.run import (
    ProgressLine,
    XlaCompilations,
    checkpoint_due,
    exit_if_diverged,
    make_writer,
    record_end_step,
    run_folder,
)
from cleanrl_utils.steps import say_steps_run
from cleanrl_utils.video import VideoJobs

# Every saved model and checkpoint records which script wrote it, and where: evaluate plays that file's player.
WRITTEN_BY = written_by(__file__)
SCRIPT = WRITTEN_BY["script"]  # a copy under a new name is a new script
# The divergence check reads these (explained_variance is no loss: NaN when the returns do not vary).
LOSSES = ("value_loss", "policy_loss", "entropy", "old_approx_kl", "approx_kl", "clipfrac")


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment (jax, numpy, python and the EnvPool simulators)"""
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
    """save a resumable checkpoint to `runs/{run_name}/checkpoint.msgpack` every N iterations (0: only at Ctrl-C and at the end)"""
    keep_checkpoints: bool = False
    """keep every checkpoint as `checkpoint-{global_step}.msgpack` too, to evaluate the run's best point afterwards:
    `python -m cleanrl_utils.evaluate --model-path runs/{run_name} --greedy`"""
    resume: str | None = None
    """continue from a checkpoint: same run folder, args, step counter, lr schedule, optimiser, RNG key and RNG states"""
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
    """the network trunk's precision (heads stay fp32). auto: fp32 on CPU (XLA's CPU backend has no native bf16 convolutions: measured slower than fp32), bf16 on a GPU of compute capability >= 8.0. The run saves the resolved value"""
    xla_conv: bool = False
    """use XLA's convolution op for the trunk instead of space-to-depth + matmul (same weights, same function)"""
    uint8_obs: bool = True
    """store rollout observations as uint8 and scale to [0, 1] inside the network (else float32)"""

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
    obs_bytes = 4 * 84 * 84 * (1 if args.uint8_obs else 4)
    check_memory(args.num_steps * args.num_envs * (obs_bytes + 40), "the rollout storage", "--num-envs or --num-steps")


def make_env(env_id: str, num_envs: int, seed: int, max_episode_steps: int = 27_000, render_mode: str | None = None):
    """EnvPool Atari with the standard DeepMind preprocessing (84x84 grey, 4-frame stack, frame-skip 4, up to 30
    no-ops, fire on reset), life loss as termination and clipped rewards. `info["reward"]` keeps the unclipped
    reward, `info["terminated"]` marks game over. `render_mode="rgb_array"` (evaluation videos only) makes
    `render()` return full RGB frames."""
    # Not exact at the limit step: EnvPool reports a game over on it as truncated, and the fix the torch scripts
    # use (cleanrl_utils.envpool_time_limit: a limit one step longer, truncation and reset in Python) cannot work
    # here, because EnvPool's XLA step runs inside jax.jit and its XLA interface has no reset.
    return envpool.make(
        env_id,
        env_type="gymnasium",
        num_envs=num_envs,
        seed=seed,
        episodic_life=True,
        reward_clip=True,
        max_episode_steps=max_episode_steps,
        render_mode=render_mode,
    )


class Conv(nn.Module):
    """A VALID convolution with stride s and a kernel of size k = r * s, with nn.Conv's parameters (kernel (k, k, in, out)).

    XLA's CPU convolutions (and above all their gradients: strided convs transpose into input-dilated and
    window-dilated convs) are far slower than its matmuls, so by default the conv is computed as
    space-to-depth(s) -- a reshape -- followed by an r x r stride-1 patch gather and one matmul; its gradient is
    slices, pads and matmuls. That path works channels first, batch second, (C, B, H, W) -> (features, B, out,
    out): the patch matrix is (r*r*s*s*C, B*out*out), the matmul kernel^T @ patches, and the weight gradient then
    contracts the long B*out*out axis as the last axis of both operands, which XLA's CPU dot runs ~2-3x faster
    than contracting it as the first axis (what an (B*out*out, K) patch matrix gives), and the gather itself is
    cheaper than the channels-last one. `xla_conv=True` uses `lax.conv_general_dilated` on the same parameters
    instead, NHWC -> NHWC."""

    features: int
    kernel_size: int
    stride: int
    dtype: jnp.dtype = jnp.float32
    xla_conv: bool = False

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:  # see the docstring for the layouts
        k, s = self.kernel_size, self.stride
        channels = x.shape[-1] if self.xla_conv else x.shape[0]
        kernel = self.param("kernel", nn.initializers.orthogonal(np.sqrt(2)), (k, k, channels, self.features))
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        kernel, x, bias = kernel.astype(self.dtype), x.astype(self.dtype), bias.astype(self.dtype)
        if self.xla_conv:
            y = jax.lax.conv_general_dilated(x, kernel, (s, s), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
            return y + bias
        _, batch, height, _ = x.shape
        r, out = k // s, (height - k) // s + 1
        blocks = out + r - 1  # input rows/cols actually read, in blocks of s
        x = x[:, :, : blocks * s, : blocks * s].reshape(channels, batch, blocks, s, blocks, s)
        x = x.transpose(0, 3, 5, 1, 2, 4)  # (channel, p, q, batch, row block, col block)
        patches = jnp.stack([x[..., i : i + out, j : j + out] for i in range(r) for j in range(r)])
        # kernel row a = i * s + p, column b = j * s + q  ->  (i, j, channel, p, q) matches `patches`
        kernel = kernel.reshape(r, s, r, s, channels, self.features).transpose(0, 2, 4, 1, 3, 5)
        y = kernel.reshape(-1, self.features).T @ patches.reshape(-1, batch * out * out)
        return (y + bias[:, None]).reshape(self.features, batch, out, out)


class Agent(nn.Module):
    """Nature CNN trunk shared by a categorical actor and a value head."""

    num_actions: int
    bf16: bool = False
    xla_conv: bool = False

    def setup(self):
        dtype = jnp.bfloat16 if self.bf16 else jnp.float32
        # (features, kernel size, stride) of the Nature CNN's three convolutions
        self.convs = [Conv(f, k, s, dtype, self.xla_conv) for f, k, s in ((32, 8, 4), (64, 4, 2), (64, 3, 1))]
        self.dense = nn.Dense(512, dtype=dtype, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))
        self.actor = nn.Dense(self.num_actions, kernel_init=nn.initializers.orthogonal(0.01))
        self.critic = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))

    def hidden(self, obs: jnp.ndarray) -> jnp.ndarray:
        # Observations arrive as uint8 0..255 (or float32 with --no-uint8-obs), NCHW from EnvPool. The matmul convs
        # work in (C, B, H, W), lax.conv in NHWC; either way the dense layer sees (B, H, W, C) flattened, as nn.Conv would.
        layout = (0, 2, 3, 1) if self.xla_conv else (1, 0, 2, 3)
        x = jnp.transpose(obs, layout).astype(jnp.bfloat16 if self.bf16 else jnp.float32) * (1.0 / 255.0)
        for conv in self.convs:
            x = nn.relu(conv(x))
        if not self.xla_conv:
            x = jnp.transpose(x, (1, 2, 3, 0))
        # The heads run in fp32: log-probs and values feed ratios and returns.
        return nn.relu(self.dense(x.reshape(x.shape[0], -1))).astype(jnp.float32)

    def __call__(self, obs: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
        """(action logits, value)"""
        hidden = self.hidden(obs)
        return self.actor(hidden), self.critic(hidden).squeeze(-1)


def evaluation_player(saved: dict, *, num_envs: int, seed: int, device, greedy: bool, epsilon: float, render: bool) -> Player:
    """How `cleanrl_utils.evaluate` plays a model this script saved (and films it during training), on JAX's device:
    whole games, every life, filmed by EnvPool's own renderer; actions sampled from the policy, or its most likely
    one with `greedy`. `device` (torch's) and `epsilon` (DQN's) are unused here."""
    train_args = saved["args"]
    render_mode = "rgb_array" if render else None
    envs = make_env(train_args["env_id"], num_envs, seed, train_args["max_episode_steps"], render_mode=render_mode)
    bf16 = train_args.get("precision") == "bf16"
    agent = Agent(envs.single_action_space.n, bf16=bf16, xla_conv=train_args["xla_conv"])
    params, base_key = saved["model_state_dict"], jax.random.PRNGKey(seed)
    calls = itertools.count()  # call n samples with fold_in(key, n): a stream without end, however long the games

    @jax.jit
    def policy(obs, call):
        logits, _ = agent.apply(params, obs)
        return logits.argmax(-1) if greedy else jax.random.categorical(jax.random.fold_in(base_key, call), logits)

    space = envs.single_observation_space
    jax.eval_shape(policy, np.zeros((1, *space.shape), space.dtype), 0)  # parameters that do not fit fail here, at set-up

    return Player(envs=envs, act=lambda obs: np.asarray(policy(obs, next(calls))), whole_games=True)


def compute_gae(
    values: jnp.ndarray,  # (T+1, N): V(obs_t), last row V(obs after the rollout)
    rewards: jnp.ndarray,  # (T, N)
    terminations: jnp.ndarray,  # (T, N) bool
    truncations: jnp.ndarray,  # (T, N) bool
    prev_episode_over: jnp.ndarray,  # (N,) bool: the step before row 0 ended an episode
    gamma: float,
    gae_lambda: float,
) -> tuple[jnp.ndarray, jnp.ndarray]:
    """GAE for next-step autoreset rollouts, as a reverse `lax.scan`. Returns (advantages, valid_mask), both (T, N);
    the same rules as the torch twin's compute_gae:
      - a termination bootstraps 0; a truncation bootstraps V(next obs) = values[t + 1];
      - the accumulation stops at every boundary, so nothing flows back across episodes;
      - the row after a boundary is stale: valid_mask is False there and its advantage is 0."""
    episode_over = terminations | truncations
    bootstrap = (~terminations).astype(values.dtype)
    keep_accumulating = (~episode_over).astype(values.dtype)

    def step(last_gae, row):
        reward, value, next_value, bootstrap_t, keep_t = row
        delta = reward + gamma * bootstrap_t * next_value - value
        last_gae = delta + gamma * gae_lambda * keep_t * last_gae
        return last_gae, last_gae

    rows = (rewards.astype(values.dtype), values[:-1], values[1:], bootstrap, keep_accumulating)
    _, advantages = jax.lax.scan(step, jnp.zeros_like(values[0]), rows, reverse=True)
    valid_mask = jnp.concatenate([~prev_episode_over[None], ~episode_over[:-1]], axis=0)
    return advantages * valid_mask, valid_mask


def masked_mean(x: jnp.ndarray, mask: jnp.ndarray) -> jnp.ndarray:
    return (x * mask).sum() / jnp.maximum(mask.sum(), 1)


def ppo_loss(params, agent: Agent, obs, actions, old_logprobs, advantages, returns, old_values, valid, args: Args):
    """Clipped PPO loss on one minibatch. Stale rows (valid == False) contribute nothing: every
    mean, including the advantage normalisation statistics, runs over valid rows only."""
    mask = valid.astype(jnp.float32)
    logits, newvalue = agent.apply(params, obs)
    logits = jax.nn.log_softmax(logits)
    newlogprob = jnp.take_along_axis(logits, actions[:, None], axis=-1).squeeze(-1)
    entropy = -(jnp.exp(logits) * logits).sum(-1)
    logratio = newlogprob - old_logprobs
    ratio = jnp.exp(logratio)

    # http://joschu.net/blog/kl-approx.html
    old_approx_kl = jax.lax.stop_gradient(masked_mean(-logratio, mask))
    approx_kl = jax.lax.stop_gradient(masked_mean((ratio - 1) - logratio, mask))
    clipfrac = jax.lax.stop_gradient(masked_mean((jnp.abs(ratio - 1.0) > args.clip_coef).astype(jnp.float32), mask))

    if args.norm_adv:
        count = jnp.maximum(mask.sum(), 2)
        mean = masked_mean(advantages, mask)
        std = jnp.sqrt(((advantages - mean) ** 2 * mask).sum() / (count - 1))
        advantages = (advantages - mean) / (std + 1e-8)

    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * jnp.clip(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
    pg_loss = masked_mean(jnp.maximum(pg_loss1, pg_loss2), mask)

    if args.clip_vloss:
        v_loss_unclipped = (newvalue - returns) ** 2
        v_clipped = old_values + jnp.clip(newvalue - old_values, -args.clip_coef, args.clip_coef)
        v_loss_clipped = (v_clipped - returns) ** 2
        v_loss = 0.5 * masked_mean(jnp.maximum(v_loss_unclipped, v_loss_clipped), mask)
    else:
        v_loss = 0.5 * masked_mean((newvalue - returns) ** 2, mask)

    entropy_loss = masked_mean(entropy, mask)
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
    stats = dict(policy_loss=pg_loss, value_loss=v_loss, entropy=entropy_loss, old_approx_kl=old_approx_kl)
    stats |= dict(approx_kl=approx_kl, clipfrac=clipfrac)
    return loss, jax.tree.map(jax.lax.stop_gradient, stats)  # logged, not differentiated


class Runner(NamedTuple):
    """What one jitted iteration hands to the next: arrays only, so the iteration compiles once."""

    train_state: TrainState  # params, optimiser state (its injected learning rate too), step count
    handle: jax.Array  # EnvPool's XLA env handle
    next_obs: jax.Array  # (N, 4, 84, 84): what the next step acts on
    prev_episode_over: jax.Array  # (N,) bool: the last step ended an episode, so the next row 0 is stale
    game_returns: jax.Array  # (N,) the unclipped return of each env's current game so far
    key: jax.Array  # the JAX PRNG key


def make_train_iteration(args: Args, agent: Agent, step_env):
    """One jitted PPO iteration, `train_iteration(runner, iteration) -> (runner, logs)`: rollout (lax.scan over
    EnvPool's XLA step), GAE, update_epochs x num_minibatches gradient steps. Its arguments are arrays (a Runner), so
    it compiles once; `args` is read at trace time, in each process's first call, so a resumed run uses its new flags."""
    obs_dtype = jnp.uint8 if args.uint8_obs else jnp.float32

    def rollout_step(carry, _):
        params, handle, obs, game_returns, key = carry
        key, action_key = jax.random.split(key)
        logits, value = agent.apply(params, obs)
        action = jax.random.categorical(action_key, logits)
        logprob = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], axis=-1).squeeze(-1)
        # On a stale step (after a boundary) EnvPool ignores the action and returns the reset obs, reward 0; GAE masks it.
        handle, (next_obs, reward, term, trunc, info) = step_env(handle, action)
        # A game ends at game over (info["terminated"]; `term` is also set on every life loss) or
        # at the time limit. Its length is EnvPool's elapsed_step, which skips stale steps.
        game_returns = game_returns + info["reward"]
        game_over = info["terminated"].astype(bool) | trunc
        row = dict(obs=obs.astype(obs_dtype), actions=action, logprobs=logprob, values=value, rewards=reward)
        row |= dict(terminations=term, truncations=trunc, game_over=game_over, game_return=game_returns)
        row |= dict(game_length=info["elapsed_step"])
        return (params, handle, next_obs, jnp.where(game_over, 0.0, game_returns), key), row

    def update_minibatch(train_state, minibatch):
        grad_fn = jax.value_and_grad(ppo_loss, has_aux=True)
        (_, stats), grads = grad_fn(train_state.params, agent, **minibatch, args=args)
        return train_state.apply_gradients(grads=grads), stats

    def update_epoch(carry, _):
        train_state, batch, key, stop = carry
        key, perm_key = jax.random.split(key)
        perm = jax.random.permutation(perm_key, args.batch_size)
        minibatches = jax.tree.map(lambda x: x[perm].reshape((args.num_minibatches, -1) + x.shape[1:]), batch)
        new_state, stats = jax.lax.scan(update_minibatch, train_state, minibatches)
        if args.target_kl is None:
            return (new_state, batch, key, stop), (stats, ~stop)
        # early stop: once an epoch ends above target_kl, the later epochs change nothing
        new_state = jax.tree.map(lambda old, new: jnp.where(stop, old, new), train_state, new_state)
        done = stop | (stats["approx_kl"][-1] > args.target_kl)
        return (new_state, batch, key, done), (stats, ~stop)

    @partial(jax.jit, donate_argnums=(0,))
    def train_iteration(runner: Runner, iteration):
        train_state = runner.train_state
        # annealed linearly, from --learning-rate at iteration 1 towards 0 after the last one
        lrnow = (1.0 - (iteration - 1.0) / args.num_iterations if args.anneal_lr else 1.0) * args.learning_rate
        train_state.opt_state.hyperparams["learning_rate"] = lrnow  # optax.inject_hyperparams

        carry = (train_state.params, runner.handle, runner.next_obs, runner.game_returns, runner.key)
        (_, handle, next_obs, game_returns, key), rollout = jax.lax.scan(rollout_step, carry, length=args.num_steps)

        # bootstrap value and GAE (see compute_gae for the autoreset rules)
        _, next_value = agent.apply(train_state.params, next_obs)
        values = jnp.concatenate([rollout["values"], next_value[None]], axis=0)
        terminations, truncations = rollout["terminations"], rollout["truncations"]
        advantages, valid_mask = compute_gae(
            values, rollout["rewards"], terminations, truncations, runner.prev_episode_over, args.gamma, args.gae_lambda
        )
        returns = advantages + values[:-1]
        prev_episode_over = terminations[-1] | truncations[-1]

        # flatten the batch: one named field per argument of the loss
        flat = dict(obs=rollout["obs"], actions=rollout["actions"], old_logprobs=rollout["logprobs"])
        flat |= dict(advantages=advantages, returns=returns, old_values=values[:-1], valid=valid_mask)
        batch = jax.tree.map(lambda x: x.reshape((args.batch_size,) + x.shape[2:]), flat)

        # Optimizing the policy and value network
        key, epoch_key = jax.random.split(key)
        (train_state, _, _, _), (stats, ran) = jax.lax.scan(
            update_epoch, (train_state, batch, epoch_key, jnp.array(False)), length=args.update_epochs
        )
        # as in the torch twin: the last minibatch's statistics, clipfrac over every minibatch run
        last_epoch = jnp.maximum(ran.sum() - 1, 0)
        logs = {name: value[last_epoch, -1] for name, value in stats.items()}
        logs["clipfrac"] = (stats["clipfrac"] * ran[:, None]).sum() / (ran.sum() * args.num_minibatches)

        b_returns, b_values, b_valid = batch["returns"], batch["old_values"], batch["valid"]
        var_y = masked_mean((b_returns - masked_mean(b_returns, b_valid)) ** 2, b_valid)
        residual = b_returns - b_values
        var_res = masked_mean((residual - masked_mean(residual, b_valid)) ** 2, b_valid)
        logs["explained_variance"] = jnp.where(var_y > 0, 1 - var_res / var_y, jnp.nan)
        logs["learning_rate"] = lrnow
        # for the divergence check: one flag comes back to the host, not a copy of every parameter
        logs["params_finite"] = jnp.stack([jnp.isfinite(p).all() for p in jax.tree.leaves(train_state.params)]).all()
        logs |= {name: rollout[name] for name in ("game_over", "game_return", "game_length")}
        return Runner(train_state, handle, next_obs, prev_episode_over, game_returns, key), logs

    return train_iteration


if __name__ == "__main__":
    args = tyro.cli(Args)
    checkpoint = load_msgpack(args.resume, SCRIPT, {"train_state": dict, "key": np.ndarray}) if args.resume else None
    if checkpoint:  # the saved args, with the flags of this command that may change on resume applied
        args = resume_args(Args, checkpoint, args.resume)
    validate_args(args)
    choose_speed_levers(args, jax_machine(), checkpoint, backend="xla")  # prints it; args keep the resolved value
    args.batch_size = int(args.num_envs * args.num_steps)
    args.minibatch_size = int(args.batch_size // args.num_minibatches)
    args.num_iterations = args.total_timesteps // args.batch_size
    say_steps_run(args.total_timesteps, args.batch_size, "--num-envs x --num-steps")
    run_name, run_dir = run_folder(args, args.resume)  # a resumed run continues in its checkpoint's folder
    checkpoint_path = os.path.join(run_dir, "checkpoint.msgpack")

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    key = jax.random.PRNGKey(args.seed)
    key, agent_key = jax.random.split(key)

    # env setup (stepped inside the jitted iteration). EnvPool cannot snapshot games: a resumed run plays new ones (new seeds).
    env_seed = resumed_env_seed(args.seed, checkpoint["iteration"] if checkpoint else 0)
    envs = make_env(args.env_id, args.num_envs, env_seed, args.max_episode_steps)
    handle, _, _, step_env = envs.xla()

    agent = Agent(envs.single_action_space.n, bf16=args.precision == "bf16", xla_conv=args.xla_conv)
    tx = optax.inject_hyperparams(
        lambda learning_rate: optax.chain(optax.clip_by_global_norm(args.max_grad_norm), optax.adam(learning_rate, eps=1e-5))
    )(learning_rate=args.learning_rate)
    next_obs, _ = envs.reset()
    # One compiled call: op by op, initialising the network and Adam compiles every op, seconds of
    # start-up on a CPU (same values, same types: a weakly typed step, as from the Python int 0)
    create_train_state = jax.jit(lambda key, obs: TrainState.create(apply_fn=None, params=agent.init(key, obs), tx=tx))
    # On the device, a fresh state is also the template a checkpoint is restored into, leaf for leaf.
    state = jax.device_put({"train_state": create_train_state(agent_key, next_obs), "key": key})
    start_iteration, global_step = 1, 0
    if checkpoint:  # train state, PRNG key and RNG states (one line if they do not fit); prints where the run resumes
        state, start_iteration, global_step = restore_msgpack(args.resume, checkpoint, state, args.num_iterations)
    writer = make_writer(args, run_name, run_dir, checkpoint["global_step"] if checkpoint else None)  # after every check
    # The step before the first one is not a boundary: row 0 of the first rollout is valid.
    no_env, no_return = np.zeros(args.num_envs, bool), np.zeros(args.num_envs, np.float32)
    runner = jax.device_put(Runner(state["train_state"], handle, next_obs, no_env, no_return, state["key"]))
    train_iteration = make_train_iteration(args, agent, step_env)

    def model_file(path: str) -> str:
        """The `.cleanrl_model` evaluate reads, in flax msgpack: the torch twin's keys, flax params as "model_state_dict"."""
        save_msgpack(
            path,
            {**WRITTEN_BY, "model_state_dict": runner.train_state.params, "args": vars(args)},
        )
        return path

    def training_state(iteration: int) -> dict:
        counters = WRITTEN_BY | dict(run_name=run_name, args=vars(args), iteration=iteration, global_step=global_step)
        # flax TrainState: params, optax state (Adam moments, inject_hyperparams learning rate), step
        weights = dict(train_state=flax.serialization.to_state_dict(runner.train_state), key=runner.key)
        return counters | weights | {"rng": msgpack_rng_states()}

    progress = ProgressLine(global_step, args.num_iterations * args.batch_size, "games")  # and SPS from here
    # JAX_PLATFORMS=cpu, the evaluator's --no-cuda for JAX: on a GPU this process holds most device memory already.
    videos = VideoJobs(run_dir, model_file, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    stop = StopAfterIteration()  # from here on Ctrl-C/SIGTERM finish the iteration, checkpoint, exit 0
    compilations = XlaCompilations()  # the first iteration compiles, no later one may (see the last print)
    recent_returns: list[float] = []

    for iteration in range(start_iteration, args.num_iterations + 1):
        # One compiled call; a signal during it is acted on once it returns.
        runner, logs = train_iteration(runner, np.int32(iteration))
        logs = jax.device_get(logs)  # waits for the iteration; Python only logs from here on
        compilations.first_iteration_done()

        # Episode statistics per *game*, gathered inside the scan, written with their own step.
        for step, env in zip(*np.nonzero(logs["game_over"])):
            step_of_game = global_step + (step + 1) * args.num_envs
            writer.add_scalar("charts/episodic_return", logs["game_return"][step, env], step_of_game)
            writer.add_scalar("charts/episodic_length", logs["game_length"][step, env], step_of_game)
            recent_returns.append(float(logs["game_return"][step, env]))
        global_step += args.batch_size

        sps = progress.sps(global_step)
        writer.add_scalar("charts/learning_rate", logs["learning_rate"].item(), global_step)
        for name in LOSSES + ("explained_variance",):  # the last minibatch's (clipfrac: every minibatch's)
            writer.add_scalar(f"losses/{name}", logs[name].item(), global_step)
        writer.add_scalar("charts/SPS", sps, global_step)

        # Read the stop flag once: a signal landing between two reads must not skip the save.
        stopping = stop.requested
        finite = all(np.isfinite(logs[name]) for name in LOSSES) and bool(logs["params_finite"])
        where = dict(iteration=iteration, global_step=global_step, checkpoint_path=checkpoint_path, writer=writer)
        exit_if_diverged(finite, **where, resumed_from=args.resume, progress=progress)
        if checkpoint_due(iteration, args.num_iterations, args.checkpoint_every, stopping):
            save_msgpack(checkpoint_path, training_state(iteration), keep=args.keep_checkpoints)
        last = iteration == args.num_iterations or stopping
        if args.capture_video and (iteration % args.video_every == 0 or last):
            videos.film(iteration, final=last)  # at most one evaluator at a time
        progress.show(global_step, sps, recent_returns, final=last)
        if stopping and iteration < args.num_iterations:  # in the last one, record_end_step says it finished
            print(stopped_line(iteration, checkpoint_path))
            break
    if start_iteration <= args.num_iterations:  # a resumed finished run runs no iteration
        print(compilations.summary(start_iteration, iteration))

    if args.save_model:
        print(f"model saved to {model_file(os.path.join(run_dir, f'{args.exp_name}.cleanrl_model'))}")
    videos.finish()
    envs.close()
    record_end_step(writer, global_step)
    writer.close()

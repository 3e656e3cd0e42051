# PPO for Atari through EnvPool's XLA interface, in JAX: the JAX twin of ppo_atari_envpool.py.
# Hyperparameters: CleanRL's Atari table (EnvPool paper, appendix F, Table 3).
# Autoreset semantics: "The Value of Autoresetting" (Gymnasium), next-step mode.
# Jitting: "Jitting for JAX" (EnvPool paper): env.xla() gives send/recv/step usable inside jax.jit,
# so one collect-and-update iteration is a single compiled call and Python only logs.
import difflib
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import partial

import envpool
import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
from flax.training.train_state import TrainState

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # jax.monitoring event name


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

    # Speed levers: each keeps the learning curve (see README); `--no-<flag>` turns one off
    bf16: bool = False
    """run the network trunk in bfloat16 (heads stay fp32); off by default: slower than fp32 in XLA on CPU"""
    xla_conv: bool = False
    """use XLA's convolution op for the trunk instead of space-to-depth + matmul (same weights, same function)"""
    uint8_obs: bool = True
    """store rollout observations as uint8 and scale to [0, 1] inside the network (else float32)"""

    # to be filled in runtime
    batch_size: int = 0
    """the batch size (computed in runtime)"""
    minibatch_size: int = 0
    """the mini-batch size (computed in runtime)"""
    num_iterations: int = 0
    """the number of iterations (computed in runtime)"""


def validate_args(args: Args) -> None:
    """Exit with one clear line (no traceback) on impossible settings."""
    for name in ("total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs", "max_episode_steps"):
        if getattr(args, name) <= 0:
            sys.exit(f"error: --{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    if args.learning_rate <= 0:
        sys.exit(f"error: --learning-rate must be positive, got {args.learning_rate}")
    if not (0 < args.gamma <= 1 and 0 <= args.gae_lambda <= 1):
        sys.exit(f"error: need 0 < --gamma <= 1 and 0 <= --gae-lambda <= 1, got {args.gamma} and {args.gae_lambda}")
    if args.video_every <= 0:
        sys.exit(f"error: --video-every must be a positive integer, got {args.video_every}")
    if args.checkpoint_every < 0:
        sys.exit(f"error: --checkpoint-every must be >= 0 (0 = only at Ctrl-C and at the end), got {args.checkpoint_every}")
    batch_size = args.num_envs * args.num_steps
    if batch_size % args.num_minibatches != 0:
        sys.exit(
            f"error: --num-minibatches {args.num_minibatches} does not divide the batch size "
            f"{batch_size} (= --num-envs {args.num_envs} x --num-steps {args.num_steps})"
        )
    if batch_size > args.total_timesteps:
        sys.exit(f"error: --total-timesteps {args.total_timesteps} is smaller than one rollout ({batch_size} steps)")
    atari_ids = [env_id for env_id, spec in envpool.registration.registry.specs.items() if spec[0] == "envpool.atari"]
    if args.env_id not in atari_ids:
        close = difflib.get_close_matches(args.env_id, atari_ids, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; e.g. Pong-v5, Breakout-v5, BeamRider-v5"
        sys.exit(f"error: --env-id {args.env_id!r} is not an EnvPool Atari environment{hint}")


def make_env(env_id: str, num_envs: int, seed: int, max_episode_steps: int = 27_000, render_mode: str | None = None):
    """EnvPool Atari with the standard DeepMind preprocessing (84x84 grey, 4-frame stack,
    frame-skip 4, up to 30 no-ops, fire on reset), life loss as termination and clipped rewards.
    `info["reward"]` keeps the unclipped reward and `info["terminated"]` marks game over.
    `render_mode="rgb_array"` (evaluation videos only) makes `render()` return full RGB frames."""
    envs = envpool.make(
        env_id,
        env_type="gymnasium",
        num_envs=num_envs,
        seed=seed,
        episodic_life=True,
        reward_clip=True,
        max_episode_steps=max_episode_steps,
        render_mode=render_mode,
    )
    return envs


class Conv(nn.Module):
    """A VALID convolution with stride s and a kernel of size k = r * s, holding the same
    parameters as `nn.Conv` (kernel (k, k, in, out), bias (out,)).

    XLA's CPU convolutions (and above all their gradients: strided convs transpose into
    input-dilated and window-dilated convs) are far slower than its matmuls, so by default the
    conv is computed as space-to-depth(s) -- a reshape -- followed by an r x r stride-1 patch
    gather and one matmul; its gradient is slices, pads and matmuls. That path works channels
    first, batch second, (C, B, H, W) -> (features, B, out, out): the patch matrix is
    (r*r*s*s*C, B*out*out), the matmul kernel^T @ patches, and the weight gradient then contracts
    the long B*out*out axis as the last axis of both operands, which XLA's CPU dot runs ~2-3x faster
    than contracting it as the first axis (what an (B*out*out, K) patch matrix gives), and the
    gather itself is cheaper than the channels-last one. `xla_conv=True` uses
    `lax.conv_general_dilated` on the same parameters instead, NHWC -> NHWC."""

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
        self.convs = [
            Conv(32, 8, 4, dtype, self.xla_conv),
            Conv(64, 4, 2, dtype, self.xla_conv),
            Conv(64, 3, 1, dtype, self.xla_conv),
        ]
        self.dense = nn.Dense(512, dtype=dtype, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))
        self.actor = nn.Dense(self.num_actions, kernel_init=nn.initializers.orthogonal(0.01))
        self.critic = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))

    def hidden(self, obs: jnp.ndarray) -> jnp.ndarray:
        # Observations arrive as uint8 0..255 (or float32 with --no-uint8-obs), NCHW from EnvPool.
        # The matmul convs work in (C, B, H, W), lax.conv in NHWC; either way the dense layer sees
        # (B, H, W, C) flattened, as nn.Conv + nn.Dense would.
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


def compute_gae(
    values: jnp.ndarray,  # (T+1, N): V(obs_t), last row V(obs after the rollout)
    rewards: jnp.ndarray,  # (T, N)
    terminations: jnp.ndarray,  # (T, N) bool
    truncations: jnp.ndarray,  # (T, N) bool
    prev_episode_over: jnp.ndarray,  # (N,) bool: the step before row 0 ended an episode
    gamma: float,
    gae_lambda: float,
) -> tuple[jnp.ndarray, jnp.ndarray]:
    """GAE for next-step autoreset rollouts, as a reverse `lax.scan`. Returns (advantages,
    valid_mask), both (T, N); same rules as the torch twin's compute_gae:
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


def save_checkpoint(path: str, state: dict) -> None:
    """Write, then rename: a crash or Ctrl-C mid-write never leaves a torn checkpoint behind.
    flax msgpack, no pickle: arrays keep their dtypes and shapes, the rest is plain data."""
    tmp_path = path + ".tmp"
    with open(tmp_path, "wb") as f:
        f.write(flax.serialization.msgpack_serialize(state))
    os.replace(tmp_path, path)


def rng_states() -> dict:
    """Python's and numpy's global RNG states as msgpack-friendly data (the JAX key is in the runner)."""
    py_version, py_internal, py_gauss_next = random.getstate()
    np_name, np_keys, np_pos, np_has_gauss, np_cached = np.random.get_state()
    return {
        "python": {"version": py_version, "internal": np.asarray(py_internal, np.int64), "gauss_next": py_gauss_next},
        "numpy": {"name": np_name, "keys": np_keys, "pos": np_pos, "has_gauss": np_has_gauss, "cached": np_cached},
    }


def set_rng_states(states: dict) -> None:
    python, numpy = states["python"], states["numpy"]
    random.setstate((int(python["version"]), tuple(int(x) for x in python["internal"]), python["gauss_next"]))
    np_state = (numpy["name"], np.asarray(numpy["keys"], np.uint32), int(numpy["pos"]), int(numpy["has_gauss"]))
    np.random.set_state(np_state + (float(numpy["cached"]),))


def load_checkpoint(path: str, script: str) -> dict:
    """A checkpoint of this script, or one clear line and exit."""
    if not os.path.isfile(path):
        sys.exit(f"error: --resume {path!r} does not exist")
    try:
        with open(path, "rb") as f:
            checkpoint = flax.serialization.msgpack_restore(f.read())
    except Exception as error:
        sys.exit(f"error: --resume {path!r} is not a readable checkpoint ({type(error).__name__})")
    train_state = checkpoint.get("train_state") if isinstance(checkpoint, dict) else None
    if not isinstance(train_state, dict) or "opt_state" not in train_state:
        sys.exit(f"error: --resume {path!r} is not a resumable checkpoint (no optimiser state)")
    if checkpoint.get("script") != script:
        sys.exit(f"error: --resume {path!r} is a checkpoint of {checkpoint.get('script')!r}, not of {script!r}")
    return checkpoint


def restore_like(template, state):
    """`template` (a pytree of jax arrays: a fresh TrainState, PRNG key, ...) holding the values saved
    in `state` (its flax state dict, as read back from a checkpoint). Structure, shapes, dtypes and
    weak types are the template's, so the jitted iteration sees exactly the input types of a fresh
    run: a resumed run compiles once, in its first iteration, like a fresh one. ValueError if
    `state` does not fit the template."""
    restored = flax.serialization.from_state_dict(template, state)

    def leaf(fresh: jax.Array, saved) -> jax.Array:
        saved = np.asarray(saved)
        if saved.shape != fresh.shape or saved.dtype != fresh.dtype:
            raise ValueError(f"saved {saved.dtype}{list(saved.shape)} where this run has {fresh.dtype}{list(fresh.shape)}")
        # A weakly typed leaf (TrainState.step starts as the Python int 0) must stay weak: jit's
        # cache tells weak from strong types, so a strong one would compile the iteration again.
        value = jnp.asarray(saved.item()) if fresh.weak_type else jnp.asarray(saved)
        if value.dtype != fresh.dtype:
            raise ValueError(f"weakly typed {fresh.dtype} leaf restores as {value.dtype}")
        return value

    return jax.tree.map(leaf, template, restored)


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
    stats = {
        "policy_loss": pg_loss,
        "value_loss": v_loss,
        "entropy": entropy_loss,
        "old_approx_kl": old_approx_kl,
        "approx_kl": approx_kl,
        "clipfrac": clipfrac,
    }
    return loss, jax.tree.map(jax.lax.stop_gradient, stats)


def make_train_iteration(args: Args, agent: Agent, step_env):
    """One jitted PPO iteration: rollout (lax.scan over EnvPool's XLA step), GAE, then
    update_epochs x num_minibatches gradient steps. Every argument is an array, so it compiles once.

    runner = (train_state, env handle, next_obs, prev_episode_over, game_returns, key)."""
    obs_dtype = jnp.uint8 if args.uint8_obs else jnp.float32

    def rollout_step(carry, _):
        params, handle, obs, game_returns, key = carry
        key, action_key = jax.random.split(key)
        logits, value = agent.apply(params, obs)
        action = jax.random.categorical(action_key, logits)
        logprob = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], axis=-1).squeeze(-1)
        # On a stale step (the one after a boundary) EnvPool ignores the action and returns the
        # reset observation with reward 0; compute_gae masks that row.
        handle, (next_obs, reward, term, trunc, info) = step_env(handle, action)
        # A game ends at game over (info["terminated"]; `term` is also set on every life loss) or
        # at the time limit. Its length is EnvPool's elapsed_step, which skips stale steps.
        game_returns = game_returns + info["reward"]
        game_over = info["terminated"].astype(bool) | trunc
        row = {
            "obs": obs.astype(obs_dtype),
            "actions": action,
            "logprobs": logprob,
            "values": value,
            "rewards": reward,
            "terminations": term,
            "truncations": trunc,
            "game_over": game_over,
            "game_return": game_returns,
            "game_length": info["elapsed_step"],
        }
        return (params, handle, next_obs, jnp.where(game_over, 0.0, game_returns), key), row

    def update_minibatch(train_state, minibatch):
        grad_fn = jax.value_and_grad(ppo_loss, has_aux=True)
        (_, stats), grads = grad_fn(train_state.params, agent, *minibatch, args)
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
    def train_iteration(runner, iteration):
        train_state, handle, next_obs, prev_episode_over, game_returns, key = runner
        # Annealing the rate if instructed to do so.
        frac = 1.0 - (iteration - 1.0) / args.num_iterations if args.anneal_lr else 1.0
        lrnow = frac * args.learning_rate
        train_state.opt_state.hyperparams["learning_rate"] = lrnow  # optax.inject_hyperparams

        carry = (train_state.params, handle, next_obs, game_returns, key)
        (_, handle, next_obs, game_returns, key), rollout = jax.lax.scan(rollout_step, carry, length=args.num_steps)

        # bootstrap value and GAE (see compute_gae for the autoreset rules)
        _, next_value = agent.apply(train_state.params, next_obs)
        values = jnp.concatenate([rollout["values"], next_value[None]], axis=0)
        advantages, valid_mask = compute_gae(
            values,
            rollout["rewards"],
            rollout["terminations"],
            rollout["truncations"],
            prev_episode_over,
            args.gamma,
            args.gae_lambda,
        )
        returns = advantages + values[:-1]
        prev_episode_over = rollout["terminations"][-1] | rollout["truncations"][-1]

        # flatten the batch: (obs, actions, old logprobs, advantages, returns, old values, valid)
        flat = (rollout["obs"], rollout["actions"], rollout["logprobs"], advantages, returns, values[:-1], valid_mask)
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

        _, b_returns, b_values, b_valid = batch[3], batch[4], batch[5], batch[6]
        var_y = masked_mean((b_returns - masked_mean(b_returns, b_valid)) ** 2, b_valid)
        residual = b_returns - b_values
        var_res = masked_mean((residual - masked_mean(residual, b_valid)) ** 2, b_valid)
        logs["explained_variance"] = jnp.where(var_y > 0, 1 - var_res / var_y, jnp.nan)
        logs["learning_rate"] = lrnow
        # for the divergence check: one flag comes back to the host, not a copy of every parameter
        logs["params_finite"] = jnp.stack([jnp.isfinite(p).all() for p in jax.tree.leaves(train_state.params)]).all()
        for name in ("game_over", "game_return", "game_length"):
            logs[name] = rollout[name]
        return (train_state, handle, next_obs, prev_episode_over, game_returns, key), logs

    return train_iteration


if __name__ == "__main__":
    args = tyro.cli(Args)
    checkpoint = None
    if args.resume:
        # The run continues with the hyperparameters it started with (they define the batch shapes
        # and the lr schedule); only where to resume from, how often to checkpoint and film are new.
        checkpoint = load_checkpoint(args.resume, "ppo_atari_envpool_xla_jax")
        new_flags = {name: getattr(args, name) for name in ("resume", "checkpoint_every", "capture_video", "video_every")}
        args = Args(**{**checkpoint["args"], **new_flags})
    validate_args(args)
    args.batch_size = int(args.num_envs * args.num_steps)
    args.minibatch_size = int(args.batch_size // args.num_minibatches)
    args.num_iterations = args.total_timesteps // args.batch_size
    run_name = checkpoint["run_name"] if checkpoint else f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    run_dir = os.path.join(args.log_dir, run_name)
    checkpoint_path = os.path.join(run_dir, "checkpoint.msgpack")

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
    key = jax.random.PRNGKey(args.seed)
    key, agent_key = jax.random.split(key)

    # env setup: EnvPool's XLA step runs inside the jitted iteration. EnvPool's simulators cannot be
    # snapshotted: a resumed run starts fresh games (seeded from the seed and the iteration) and the
    # unfinished games are never logged.
    env_seed = args.seed if checkpoint is None else args.seed + 7919 * checkpoint["iteration"]
    envs = make_env(args.env_id, args.num_envs, env_seed, args.max_episode_steps)
    handle, _, _, step_env = envs.xla()

    agent = Agent(envs.single_action_space.n, bf16=args.bf16, xla_conv=args.xla_conv)
    next_obs, _ = envs.reset()
    tx = optax.inject_hyperparams(
        lambda learning_rate: optax.chain(optax.clip_by_global_norm(args.max_grad_norm), optax.adam(learning_rate, eps=1e-5))
    )(learning_rate=args.learning_rate)
    # One compiled call: op by op, initialising the network and Adam compiles every op, seconds of
    # start-up on a CPU (same values, same types: a weakly typed step, as from the Python int 0)
    create_train_state = jax.jit(lambda key, obs: TrainState.create(apply_fn=None, params=agent.init(key, obs), tx=tx))
    train_state = create_train_state(agent_key, next_obs)
    train_iteration = make_train_iteration(args, agent, step_env)
    # On the device, a fresh state is also the template a checkpoint is restored into, leaf for leaf.
    train_state, key = jax.device_put((train_state, key))
    start_iteration, global_step = 1, 0
    if checkpoint:
        try:
            train_state = restore_like(train_state, checkpoint["train_state"])
            key = restore_like(key, checkpoint["key"])
            set_rng_states(checkpoint["rng"])
        except Exception as error:  # a checkpoint of this script whose contents do not fit its args
            reason = " ".join(str(error).split())  # one line
            sys.exit(f"error: --resume {args.resume!r} does not fit this script's training state ({reason})")
        start_iteration, global_step = checkpoint["iteration"] + 1, checkpoint["global_step"]
        print(f"resumed {run_name} at iteration {checkpoint['iteration']} (global step {global_step:,})", flush=True)

    def model_file(path: str) -> str:
        """The `.cleanrl_model` format `cleanrl_utils.evaluate` reads: script name, args, weights, as
        flax msgpack ("model_state_dict" holds the flax params: same keys as the torch twin's file)."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        model = {"script": "ppo_atari_envpool_xla_jax", "model_state_dict": runner[0].params, "args": vars(args)}
        with open(path, "wb") as f:
            f.write(flax.serialization.msgpack_serialize(model))
        return path

    def film(iteration: int) -> subprocess.Popen:
        """Evaluation video of the current policy, played by the evaluator in its own process."""
        video_dir = os.path.join(run_dir, "videos", f"iteration-{iteration}")
        model_path = model_file(os.path.join(video_dir, "model.cleanrl_model"))
        command = [sys.executable, "-m", "cleanrl_utils.evaluate", "--model-path", model_path, "--episodes", "1"]
        log = open(os.path.join(video_dir, "evaluate.log"), "w")
        # JAX_PLATFORMS=cpu is the JAX side of --no-cuda: on a GPU, JAX in this process has already
        # preallocated most of the device memory, and one game plays fine on the CPU.
        cpu_only = {**os.environ, "JAX_PLATFORMS": "cpu"}
        command += ["--capture-video", "--video-dir", video_dir, "--no-cuda"]
        return subprocess.Popen(command, stdout=log, stderr=log, env=cpu_only)

    video_jobs: list[subprocess.Popen] = []

    def training_state(iteration: int) -> dict:
        return {
            "script": "ppo_atari_envpool_xla_jax",
            "run_name": run_name,
            "args": vars(args),
            "iteration": iteration,
            "global_step": global_step,
            # flax TrainState: params, optax state (Adam moments, inject_hyperparams learning rate), step
            "train_state": flax.serialization.to_state_dict(runner[0]),
            "key": runner[-1],  # the JAX PRNG key the jitted iteration carries
            "rng": rng_states(),
        }

    # Ctrl-C finishes the current iteration (one compiled call: the handler runs once it returns),
    # writes a checkpoint and exits 0; a second one aborts.
    stop_requested = False

    def request_stop(signum, frame):
        global stop_requested
        stop_requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)
        print("\nCtrl-C: stopping after this iteration (press again to abort without saving)", flush=True)

    signal.signal(signal.SIGINT, request_stop)

    # TRY NOT TO MODIFY: start the game
    # The step before the first one is not a boundary: row 0 of the first rollout is valid.
    runner = jax.device_put(
        (train_state, handle, next_obs, np.zeros(args.num_envs, bool), np.zeros(args.num_envs, np.float32), key)
    )
    # Count XLA compilations: the first iteration compiles, no later one may (see the last print).
    compilations = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, duration, **_: compilations.append(duration) if event == BACKEND_COMPILE_EVENT else None
    )
    first_iteration_compilations = None
    recent_returns: list[float] = []
    start_global_step = global_step
    start_time = time.time()
    # Progress: on a terminal, one live line rewritten in place every second; otherwise (CI, log
    # files, pipes) a plain line every 10 s.
    live_progress = sys.stdout.isatty()
    last_print = 0.0
    for iteration in range(start_iteration, args.num_iterations + 1):
        runner, logs = train_iteration(runner, np.int32(iteration))
        logs = jax.device_get(logs)  # waits for the iteration; Python only logs from here on
        if iteration == start_iteration:
            first_iteration_compilations = len(compilations)

        # Episode statistics per *game*, gathered inside the scan, written with their own step.
        for step, env in zip(*np.nonzero(logs["game_over"])):
            step_of_game = global_step + (step + 1) * args.num_envs
            writer.add_scalar("charts/episodic_return", logs["game_return"][step, env], step_of_game)
            writer.add_scalar("charts/episodic_length", logs["game_length"][step, env], step_of_game)
            recent_returns.append(float(logs["game_return"][step, env]))
        global_step += args.batch_size

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        sps = int((global_step - start_global_step) / (time.time() - start_time))
        writer.add_scalar("charts/learning_rate", logs["learning_rate"].item(), global_step)
        writer.add_scalar("losses/value_loss", logs["value_loss"].item(), global_step)
        writer.add_scalar("losses/policy_loss", logs["policy_loss"].item(), global_step)
        writer.add_scalar("losses/entropy", logs["entropy"].item(), global_step)
        writer.add_scalar("losses/old_approx_kl", logs["old_approx_kl"].item(), global_step)
        writer.add_scalar("losses/approx_kl", logs["approx_kl"].item(), global_step)
        writer.add_scalar("losses/clipfrac", logs["clipfrac"].item(), global_step)
        writer.add_scalar("losses/explained_variance", logs["explained_variance"].item(), global_step)
        writer.add_scalar("charts/SPS", sps, global_step)

        # A diverged run stops here, before any checkpoint could be overwritten with its state.
        # (explained_variance is not a loss: it is NaN by definition when the returns do not vary.)
        losses = ("value_loss", "policy_loss", "entropy", "old_approx_kl", "approx_kl", "clipfrac")
        if not (all(np.isfinite(logs[name]) for name in losses) and logs["params_finite"]):
            writer.close()
            if live_progress:
                print()  # end the live line before the error message
            saved = (
                f"last good checkpoint: {checkpoint_path}" if os.path.exists(checkpoint_path) else "no checkpoint was written"
            )
            sys.exit(f"error: non-finite loss or parameters at iteration {iteration} (global step {global_step:,}); {saved}")
        # Read the Ctrl-C flag once: a signal landing between two reads must not skip the save.
        stopping = stop_requested
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
                f"return(last {len(recent)}) {mean_return}  games {len(recent_returns):,}  ETA {eta / 60:.1f} min"
            )
            if live_progress:  # "\r\x1b[K": back to column 0 and clear the line, so it is rewritten in place
                line = f"\r\x1b[K{line}"
            print(line, end="\n" if final_line or not live_progress else "", flush=True)
        if stopping:
            print(
                f"stopped at iteration {iteration}; checkpoint: {checkpoint_path} (continue with --resume {checkpoint_path})"
            )
            break
    # The iteration's inputs keep their shapes and dtypes (a resumed run's too: restore_like), so
    # nothing compiles after this process's first iteration. A resumed finished run runs none.
    if first_iteration_compilations is not None:
        print(
            f"XLA compilations: {first_iteration_compilations} in iteration {start_iteration} "
            f"({sum(compilations[:first_iteration_compilations]):.1f} s), "
            f"{len(compilations) - first_iteration_compilations} in the {iteration - start_iteration} later iterations"
        )

    if args.save_model:
        print(f"model saved to {model_file(os.path.join(run_dir, f'{args.exp_name}.cleanrl_model'))}")
    for job in video_jobs:
        video_dir = os.path.dirname(job.args[job.args.index("--model-path") + 1])
        status = "written" if job.wait() == 0 else f"FAILED (exit {job.returncode}, see {video_dir}/evaluate.log)"
        print(f"evaluation video {status}: {video_dir}")

    envs.close()
    writer.close()

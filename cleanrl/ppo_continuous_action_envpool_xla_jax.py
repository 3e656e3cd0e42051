# PPO for MuJoCo through EnvPool's XLA interface, in JAX: the JAX twin of ppo_continuous_action_envpool.py.
# Hyperparameters: CleanRL's MuJoCo table (EnvPool paper, appendix F, Table 5).
# Autoreset semantics: "The Value of Autoresetting" (Gymnasium), next-step mode.
# Jitting: "Jitting for JAX" (EnvPool paper): env.xla() gives send/recv/step usable inside jax.jit,
# so one collect-and-update iteration -- normalisers included -- is a single compiled call.
from cleanrl_utils.stop import StopAfterIteration, exit_at_once_on_signals, stopped_line

if __name__ == "__main__":
    exit_at_once_on_signals()  # Ctrl-C while the libraries below load: one line, no traceback

import itertools
import os
import random
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

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
    """whether to save the model weights, normaliser state and args to `runs/{run_name}/{exp_name}.cleanrl_model`"""
    log_dir: str = "runs"
    """the folder the run's tensorboard events (and saved model) go under"""
    checkpoint_every: int = 0
    """save a resumable checkpoint to `runs/{run_name}/checkpoint.msgpack` every N iterations (0: only at Ctrl-C and at the end)"""
    keep_checkpoints: bool = False
    """keep every checkpoint as `checkpoint-{global_step}.msgpack` too, to evaluate the run's best point afterwards:
    `python -m cleanrl_utils.evaluate --model-path runs/{run_name} --greedy`"""
    resume: str | None = None
    """continue from a checkpoint: same run folder, args, step counter, lr schedule, optimiser, RNG key, normaliser and RNG states"""
    capture_video: bool = False
    """film an evaluation episode to `runs/{run_name}/videos/` every --video-every iterations and at the end, in a separate process (the training envs never render)"""
    video_every: int = 100
    """iterations between evaluation videos with --capture-video"""

    # Algorithm specific arguments (EnvPool paper, Table 5)
    env_id: str = "HalfCheetah-v4"
    """the id of the environment (any EnvPool MuJoCo id, e.g. HalfCheetah-v4, Hopper-v4, Walker2d-v4, Ant-v4, Humanoid-v5)"""
    total_timesteps: int = 10_000_000
    """total timesteps of the experiments (agent steps, counting every env)"""
    learning_rate: float = 0.00295
    """the learning rate of the optimizer"""
    num_envs: int = 64
    """the number of parallel game environments"""
    num_steps: int = 64
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 4
    """the number of mini-batches"""
    update_epochs: int = 2
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization (per minibatch, over valid rows only)"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = False
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 0.0
    """coefficient of the entropy"""
    vf_coef: float = 1.3
    """coefficient of the value function"""
    max_grad_norm: float = 3.5
    """the maximum norm for the gradient clipping"""
    target_kl: float | None = None
    """the target KL divergence threshold (early stop of the update epochs)"""
    max_episode_steps: int | None = None
    """time limit per episode in agent steps (default: the env's own, 1000 for the locomotion tasks); reaching it truncates"""
    obs_clip: float = 10.0
    """normalised observations are clipped to [-obs_clip, obs_clip]"""
    reward_clip: float = 10.0
    """scaled rewards are clipped to [-reward_clip, reward_clip]"""

    # Levers from the rl_games column of the EnvPool paper (off by default: the defaults are Table 5)
    norm_value: bool = False
    """the critic predicts returns standardised by their running mean/std (values are de-standardised for GAE)"""
    kl_adaptive_lr: float | None = None
    """target KL of an adaptive learning rate replacing --anneal-lr: after each epoch, lr / 1.5 if approx KL > 2x target, lr x 1.5 if < target / 2"""

    # to be filled in runtime (not flags)
    batch_size: tyro.conf.Suppress[int] = 0
    minibatch_size: tyro.conf.Suppress[int] = 0
    num_iterations: tyro.conf.Suppress[int] = 0


def validate_args(args: Args) -> None:
    """Exit with one clear line (no traceback) on impossible settings, before anything is written."""
    check_run_args(args)
    check_rollout_shape(args.num_envs, args.num_steps, args.num_minibatches, args.update_epochs, args.total_timesteps)
    check_positive(args, "max_episode_steps", "obs_clip", "reward_clip", "kl_adaptive_lr")
    check_envpool_id(args.env_id, "envpool.mujoco.gym", num_envs=args.num_envs)
    spec = envpool.make_spec(args.env_id)
    row_bytes = 4 * (np.prod(spec.observation_space.shape) + 2 * np.prod(spec.action_space.shape) + 10)
    check_memory(args.num_steps * args.num_envs * int(row_bytes), "the rollout storage", "--num-envs or --num-steps")


def make_env(env_id: str, num_envs: int, seed: int, max_episode_steps: int | None = None):
    """EnvPool MuJoCo (gymnasium API). No wrappers exist in EnvPool: normalisation is done by the
    caller (RunningMeanStd below). `info["elapsed_step"]` counts the steps of the current episode."""
    kwargs = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
    # Not exact at the limit step: EnvPool reports a termination on it as truncated, and the fix the torch scripts
    # use (cleanrl_utils.envpool_time_limit: a limit one step longer, truncation and reset in Python) cannot work
    # here, because EnvPool's XLA step runs inside jax.jit and its XLA interface has no reset.
    return envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, seed=seed, **kwargs)


class RunningMeanStd(flax.struct.PyTreeNode):
    """Mean and population variance (ddof=0) of everything passed to `update`, merged batch by batch (Chan et al.'s
    parallel algorithm). Starts empty (count 0). Float32 (JAX's default) where the torch twin keeps float64; `mask`
    selects the rows that count."""

    mean: jnp.ndarray
    var: jnp.ndarray
    count: jnp.ndarray

    @classmethod
    def create(cls, shape: tuple[int, ...] = ()) -> "RunningMeanStd":
        return cls(jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32), jnp.zeros((), jnp.float32))

    def update(self, batch: jnp.ndarray, mask: jnp.ndarray | None = None) -> "RunningMeanStd":
        batch = batch.reshape((-1,) + self.mean.shape).astype(jnp.float32)
        weights = jnp.ones(batch.shape[0], jnp.float32) if mask is None else mask.reshape(-1).astype(jnp.float32)
        weights = weights.reshape((-1,) + (1,) * self.mean.ndim)
        batch_count = weights.sum()
        safe_count = jnp.maximum(batch_count, 1.0)
        batch_mean = (batch * weights).sum(0) / safe_count
        batch_var = ((batch - batch_mean) ** 2 * weights).sum(0) / safe_count
        total = self.count + batch_count
        safe_total = jnp.maximum(total, 1.0)
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / safe_total
        updated = self.replace(mean=self.mean + delta * batch_count / safe_total, var=m2 / safe_total, count=total)
        # an empty batch changes nothing
        return jax.tree.map(lambda new, old: jnp.where(batch_count > 0, new, old), updated, self)


def normalize_obs(obs: jnp.ndarray, obs_rms: RunningMeanStd, clip: float) -> jnp.ndarray:
    """(obs - mean) / std, clipped to [-clip, clip]."""
    return jnp.clip((obs - obs_rms.mean) / jnp.sqrt(obs_rms.var + 1e-8), -clip, clip).astype(jnp.float32)


class RewardScaler(flax.struct.PyTreeNode):
    """Reward divided by the running std of the discounted return, clipped to [-clip, clip].

    Each env keeps its discounted-return accumulator R <- gamma * R + r, reset to 0 after every boundary (termination
    or truncation). Stale steps (the one after a boundary: EnvPool ignores the action and returns reward 0) do not
    update the statistics. Their scaled reward is 0 and their row is masked. A pure function: `scale` returns the
    new scaler with the scaled reward."""

    return_rms: RunningMeanStd
    returns: jnp.ndarray

    @classmethod
    def create(cls, num_envs: int) -> "RewardScaler":
        return cls(RunningMeanStd.create(()), jnp.zeros(num_envs, jnp.float32))

    def scale(self, reward, episode_over, stale, gamma: float, clip: float) -> tuple["RewardScaler", jnp.ndarray]:
        returns = self.returns * gamma + reward
        return_rms = self.return_rms.update(returns, ~stale)
        scaled = jnp.clip(reward / jnp.sqrt(return_rms.var + 1e-8), -clip, clip)
        return self.replace(return_rms=return_rms, returns=jnp.where(episode_over, 0.0, returns)), scaled


class Agent(nn.Module):
    """Separate 64-64 tanh MLPs for the value and the Gaussian mean; state-independent log-std.
    Inputs are normalised observations; sampled actions are unbounded (clipped only in the env)."""

    action_dim: int

    @nn.compact
    def __call__(self, obs: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
        """(action mean, action log-std, value)"""

        def mlp(x, last_features, last_std):
            for _ in range(2):
                x = nn.tanh(nn.Dense(64, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
            return nn.Dense(last_features, kernel_init=nn.initializers.orthogonal(last_std))(x)

        value = mlp(obs, 1, 1.0).squeeze(-1)
        action_mean = mlp(obs, self.action_dim, 0.01)
        actor_logstd = self.param("actor_logstd", nn.initializers.zeros, (1, self.action_dim))
        return action_mean, jnp.broadcast_to(actor_logstd, action_mean.shape), value


def gaussian_logprob_entropy(mean, logstd, action):
    """Diagonal Gaussian: summed log-prob of `action` and summed entropy."""
    logprob = -0.5 * ((action - mean) / jnp.exp(logstd)) ** 2 - logstd - 0.5 * jnp.log(2 * jnp.pi)
    entropy = 0.5 + 0.5 * jnp.log(2 * jnp.pi) + logstd
    return logprob.sum(-1), entropy.sum(-1)


def evaluation_player(saved: dict, *, num_envs: int, seed: int, device, greedy: bool, epsilon: float, render: bool) -> Player:
    """How `cleanrl_utils.evaluate` plays a model this script saved (and films it during training), on JAX's device:
    observations normalised with the saved statistics, frozen; actions sampled from the Gaussian, or its mean with
    `greedy`, clipped to the bounds. EnvPool's MuJoCo cannot render headless, so videos are extra episodes in
    Gymnasium's env of the same id. `device` (torch's) and `epsilon` (DQN's) are unused here."""
    train_args = saved["args"]
    envs = make_env(train_args["env_id"], num_envs, seed, train_args["max_episode_steps"])
    action_space = envs.single_action_space
    agent = Agent(int(np.prod(action_space.shape)))
    params, base_key = saved["model_state_dict"], jax.random.PRNGKey(seed)
    obs_rms = RunningMeanStd(**{name: np.asarray(saved["obs_rms"][name]) for name in ("mean", "var", "count")})
    calls = itertools.count()  # call n samples with fold_in(key, n): a stream without end, however long the episodes

    @jax.jit
    def policy(obs, call):
        action_mean, action_logstd, _ = agent.apply(params, normalize_obs(obs, obs_rms, train_args["obs_clip"]))
        if greedy:
            return action_mean
        return action_mean + jnp.exp(action_logstd) * jax.random.normal(jax.random.fold_in(base_key, call), action_mean.shape)

    space = envs.single_observation_space
    jax.eval_shape(policy, np.zeros((1, *space.shape), np.float32), 0)  # parameters that do not fit fail here, at set-up

    def act(obs: np.ndarray) -> np.ndarray:
        action = np.asarray(policy(obs.astype(np.float32), next(calls)), dtype=np.float64)
        return np.clip(action, action_space.low, action_space.high)

    return Player(envs=envs, act=act, film_env_id=train_args["env_id"])


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
    action_mean, action_logstd, newvalue = agent.apply(params, obs)
    newlogprob, entropy = gaussian_logprob_entropy(action_mean, action_logstd, actions)
    logratio = newlogprob - old_logprobs
    ratio = jnp.exp(logratio)

    # http://joschu.net/blog/kl-approx.html
    old_approx_kl = masked_mean(-logratio, mask)
    approx_kl = masked_mean((ratio - 1) - logratio, mask)
    clipfrac = masked_mean((jnp.abs(ratio - 1.0) > args.clip_coef).astype(jnp.float32), mask)

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


class Normalizers(flax.struct.PyTreeNode):
    obs_rms: RunningMeanStd
    reward_scaler: RewardScaler
    value_rms: RunningMeanStd  # --norm-value: statistics of the valid returns


class Runner(NamedTuple):
    """What one jitted iteration hands to the next: arrays only, so the iteration compiles once."""

    train_state: TrainState  # params, optimiser state (its injected learning rate too), step count
    norms: Normalizers  # observation, return and value statistics
    handle: jax.Array  # EnvPool's XLA env handle
    next_obs: jax.Array  # (N, obs dim), normalised: what the next step acts on
    next_stale: jax.Array  # (N,) bool: the next step is stale (the reward scaler skips it)
    prev_episode_over: jax.Array  # (N,) bool: the last step ended an episode, so the next row 0 is stale
    episode_returns: jax.Array  # (N,) the raw return of each env's current episode so far
    key: jax.Array  # the JAX PRNG key


def make_train_iteration(args: Args, agent: Agent, step_env, action_low: np.ndarray, action_high: np.ndarray):
    """One jitted PPO iteration, `train_iteration(runner, iteration) -> (runner, logs)`: rollout (lax.scan over
    EnvPool's XLA step, normalisers updated on the way), GAE, update_epochs x num_minibatches gradient steps. Its
    arguments are arrays (a Runner), so it compiles once; `args` is read at trace time, in each process's first
    call, so a resumed run uses its new flags."""

    def value_stats(value_rms):  # --norm-value: value = critic output * value_std + value_mean (identity without it)
        return (value_rms.mean, jnp.sqrt(value_rms.var + 1e-8)) if args.norm_value else (0.0, 1.0)

    def rollout_step(carry, _):
        params, norms, handle, obs, stale, episode_returns, key = carry
        value_mean, value_std = value_stats(norms.value_rms)
        key, action_key = jax.random.split(key)
        action_mean, action_logstd, value = agent.apply(params, obs)
        noise = jax.random.normal(action_key, action_mean.shape, action_mean.dtype)
        action = action_mean + jnp.exp(action_logstd) * noise
        logprob, _ = gaussian_logprob_entropy(action_mean, action_logstd, action)
        # The env gets the action clipped to its bounds; the buffer keeps the unclipped sample whose log-prob was
        # stored. On a stale step (after a boundary) EnvPool ignores the action, returns the reset obs, reward 0.
        env_action = jnp.clip(action, action_low, action_high).astype(jnp.float64)  # MuJoCo speaks float64
        handle, (next_obs, reward, term, trunc, info) = step_env(handle, env_action)
        next_obs, reward = next_obs.astype(jnp.float32), reward.astype(jnp.float32)
        episode_over = term | trunc
        reward_scaler, scaled_reward = norms.reward_scaler.scale(reward, episode_over, stale, args.gamma, args.reward_clip)
        obs_rms = norms.obs_rms.update(next_obs)
        norms = norms.replace(obs_rms=obs_rms, reward_scaler=reward_scaler)
        # Episode length is EnvPool's elapsed_step, which does not count stale steps.
        episode_returns = episode_returns + reward
        row = dict(obs=obs, actions=action, logprobs=logprob, values=value * value_std + value_mean, rewards=scaled_reward)
        row |= dict(terminations=term, truncations=trunc, episode_over=episode_over, episode_return=episode_returns)
        row |= dict(episode_length=info["elapsed_step"])
        next_obs = normalize_obs(next_obs, obs_rms, args.obs_clip)
        episode_returns = jnp.where(episode_over, 0.0, episode_returns)
        return (params, norms, handle, next_obs, episode_over, episode_returns, key), row

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
        if args.kl_adaptive_lr is not None:
            epoch_kl = stats["approx_kl"].mean()
            lr = new_state.opt_state.hyperparams["learning_rate"]
            lr = jnp.where(epoch_kl > 2.0 * args.kl_adaptive_lr, jnp.maximum(lr / 1.5, 1e-6), lr)
            lr = jnp.where(epoch_kl < 0.5 * args.kl_adaptive_lr, jnp.minimum(lr * 1.5, 1e-2), lr)
            new_state.opt_state.hyperparams["learning_rate"] = lr
        if args.target_kl is None:
            return (new_state, batch, key, stop), (stats, ~stop)
        # early stop: once an epoch ends above target_kl, the later epochs change nothing
        new_state = jax.tree.map(lambda old, new: jnp.where(stop, old, new), train_state, new_state)
        done = stop | (stats["approx_kl"][-1] > args.target_kl)
        return (new_state, batch, key, done), (stats, ~stop)

    @partial(jax.jit, donate_argnums=(0,))
    def train_iteration(runner: Runner, iteration):
        train_state = runner.train_state
        if args.anneal_lr and args.kl_adaptive_lr is None:  # linearly, towards 0 after the last iteration
            lrnow = ((1.0 - (iteration - 1) / args.num_iterations) * args.learning_rate).astype(jnp.float32)
            train_state.opt_state.hyperparams["learning_rate"] = lrnow  # optax.inject_hyperparams

        params = train_state.params
        carry = (params, runner.norms, runner.handle, runner.next_obs, runner.next_stale, runner.episode_returns, runner.key)
        (_, norms, handle, next_obs, next_stale, episode_returns, key), rollout = jax.lax.scan(
            rollout_step, carry, length=args.num_steps
        )

        # bootstrap value and GAE (see compute_gae for the autoreset rules)
        value_mean, value_std = value_stats(norms.value_rms)
        next_value = agent.apply(train_state.params, next_obs)[2] * value_std + value_mean
        values = jnp.concatenate([rollout["values"], next_value[None]], axis=0)
        terminations, truncations = rollout["terminations"], rollout["truncations"]
        advantages, valid_mask = compute_gae(
            values, rollout["rewards"], terminations, truncations, runner.prev_episode_over, args.gamma, args.gae_lambda
        )
        returns = advantages + values[:-1]
        prev_episode_over = terminations[-1] | truncations[-1]
        if args.norm_value:
            norms = norms.replace(value_rms=norms.value_rms.update(returns, valid_mask))
            value_mean, value_std = value_stats(norms.value_rms)

        # flatten the batch, one named field per argument of the loss; the value loss works in the critic's output
        # space (identity without --norm-value)
        targets, old_critic = (returns - value_mean) / value_std, (values[:-1] - value_mean) / value_std
        flat = dict(obs=rollout["obs"], actions=rollout["actions"], old_logprobs=rollout["logprobs"])
        flat |= dict(advantages=advantages, returns=targets, old_values=old_critic, valid=valid_mask)
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

        b_returns, b_values, b_valid = returns.reshape(-1), values[:-1].reshape(-1), valid_mask.reshape(-1)
        var_y = masked_mean((b_returns - masked_mean(b_returns, b_valid)) ** 2, b_valid)
        residual = b_returns - b_values
        var_res = masked_mean((residual - masked_mean(residual, b_valid)) ** 2, b_valid)
        logs["explained_variance"] = jnp.where(var_y > 0, 1 - var_res / var_y, jnp.nan)
        logs["learning_rate"] = train_state.opt_state.hyperparams["learning_rate"]
        # for the divergence check: one flag comes back to the host, not a copy of every parameter
        logs["params_finite"] = jnp.stack([jnp.isfinite(p).all() for p in jax.tree.leaves(train_state.params)]).all()
        logs |= {name: rollout[name] for name in ("episode_over", "episode_return", "episode_length")}
        return Runner(train_state, norms, handle, next_obs, next_stale, prev_episode_over, episode_returns, key), logs

    return train_iteration


if __name__ == "__main__":
    args = tyro.cli(Args)
    keys = {"train_state": dict, "normalizers": dict, "key": np.ndarray}
    checkpoint = load_msgpack(args.resume, SCRIPT, keys) if args.resume else None
    if checkpoint:  # the saved args, with the flags of this command that may change on resume applied
        args = resume_args(Args, checkpoint, args.resume)
    validate_args(args)
    # EnvPool MuJoCo's XLA step takes and returns float64: enable it, and keep everything else float32
    jax.config.update("jax_enable_x64", True)
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

    # env setup (stepped inside the jitted iteration). EnvPool cannot snapshot episodes: a resumed run plays new ones.
    env_seed = resumed_env_seed(args.seed, checkpoint["iteration"] if checkpoint else 0)
    envs = make_env(args.env_id, args.num_envs, env_seed, args.max_episode_steps)
    handle, _, _, step_env = envs.xla()
    action_space = envs.single_action_space
    action_low, action_high = action_space.low.astype(np.float32), action_space.high.astype(np.float32)

    agent = Agent(int(np.prod(action_space.shape)))
    tx = optax.inject_hyperparams(
        lambda learning_rate: optax.chain(optax.clip_by_global_norm(args.max_grad_norm), optax.adam(learning_rate, eps=1e-5))
    )(learning_rate=jnp.asarray(args.learning_rate, jnp.float32))
    reset_obs = jnp.asarray(envs.reset()[0], jnp.float32)
    # One compiled call: op by op, initialising the network and Adam compiles every op, seconds of start-up on a CPU
    # (same values and types: a weakly typed step). The parameters depend on the input's shape only, not its values.
    create_train_state = jax.jit(lambda key, obs: TrainState.create(apply_fn=None, params=agent.init(key, obs), tx=tx))
    # the in-script normalisers, empty: observation and return statistics, --norm-value's value statistics
    obs_rms, value_rms = RunningMeanStd.create(reset_obs.shape[1:]), RunningMeanStd.create(())
    norms = Normalizers(obs_rms, RewardScaler.create(args.num_envs), value_rms)
    # On the device, a fresh state is also the template a checkpoint is restored into, leaf for leaf.
    state = jax.device_put({"train_state": create_train_state(agent_key, reset_obs), "normalizers": norms, "key": key})
    start_iteration, global_step = 1, 0
    if checkpoint:  # train state, normalisers, PRNG key and RNG states (one line if they do not fit); prints where it resumes
        state, start_iteration, global_step = restore_msgpack(args.resume, checkpoint, state, args.num_iterations)
        if args.learning_rate != checkpoint["args"]["learning_rate"]:  # a new --learning-rate: the rate from here on
            state["train_state"].opt_state.hyperparams["learning_rate"] = jnp.asarray(args.learning_rate, jnp.float32)
    writer = make_writer(args, run_name, run_dir, checkpoint["global_step"] if checkpoint else None)  # after every check

    # Normalisation, update-then-normalise: every observation EnvPool returns (reset, regular, an episode's last one,
    # the reset one of a stale step) enters the statistics once, on arrival, and is then normalised with the updated
    # statistics and stored normalised. On resume the running statistics carry on (--kl-adaptive-lr's adapted rate
    # too: it is in the optax state), and the reset observations of the restarted simulators are new observations:
    # they enter the *restored* statistics, like the torch twin's, and the first observation is normalised with
    # those, so the network sees inputs on the scale it was trained on. The reward scaler's per-env
    # discounted-return accumulators start at 0, like the envs they follow.
    norms = state["normalizers"]
    scaler = norms.reward_scaler.replace(returns=jnp.zeros_like(norms.reward_scaler.returns))
    norms = norms.replace(obs_rms=norms.obs_rms.update(reset_obs), reward_scaler=scaler)
    next_obs = normalize_obs(reset_obs, norms.obs_rms, args.obs_clip)
    # The step before the first one is not a boundary: row 0 of the first rollout is valid.
    no_env, no_return = np.zeros(args.num_envs, bool), np.zeros(args.num_envs, np.float32)
    runner = jax.device_put(Runner(state["train_state"], norms, handle, next_obs, no_env, no_env, no_return, state["key"]))
    train_iteration = make_train_iteration(args, agent, step_env, action_low, action_high)

    def model_file(path: str) -> str:
        """The `.cleanrl_model` evaluate reads, in flax msgpack: the torch twin's keys, flax params as "model_state_dict"."""
        to_state_dict, norms = flax.serialization.to_state_dict, runner.norms
        model = {
            **WRITTEN_BY,
            "model_state_dict": runner.train_state.params,
            "args": vars(args),
        }
        statistics = {"obs_rms": norms.obs_rms, "return_rms": norms.reward_scaler.return_rms, "value_rms": norms.value_rms}
        save_msgpack(path, model | {name: to_state_dict(value) for name, value in statistics.items()})
        return path

    def training_state(iteration: int) -> dict:
        counters = WRITTEN_BY | dict(run_name=run_name, args=vars(args), iteration=iteration, global_step=global_step)
        # TrainState: params, optax state (Adam moments, injected lr), step; normalisers: obs, reward scaler, value
        to_state_dict = flax.serialization.to_state_dict
        weights = dict(train_state=to_state_dict(runner.train_state), normalizers=to_state_dict(runner.norms), key=runner.key)
        return counters | weights | {"rng": msgpack_rng_states()}

    progress = ProgressLine(global_step, args.num_iterations * args.batch_size)  # and SPS from here
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

        # Episode statistics in raw (unscaled) reward units, gathered inside the scan.
        for step, env in zip(*np.nonzero(logs["episode_over"])):
            step_of_episode = global_step + (step + 1) * args.num_envs
            writer.add_scalar("charts/episodic_return", logs["episode_return"][step, env], step_of_episode)
            writer.add_scalar("charts/episodic_length", logs["episode_length"][step, env], step_of_episode)
            recent_returns.append(float(logs["episode_return"][step, env]))
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

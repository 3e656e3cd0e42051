"""Tests of cleanrl/ppo_atari_envpool_xla_jax.py: JAX compute_gae against the torch twin and brute
force, the matmul trunk against XLA's convolution, the loss ignoring stale rows, real short runs
(every tag, determinism, a single compilation), saved-model evaluation, learning on marked Pong frames (real EnvPool,
its XLA step calling back into the marking wrapper), bad input."""

import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from bad_input import test_bad_input_gives_one_clear_line_and_writes_nothing  # noqa: F401 (collected here)
from gae_reference import next_step_reference, random_next_step_rollout
from helpers import ATARI_TAGS, marked_frame_returns, only_run_dir, read_scalars, run_script
from test_ppo_atari_envpool import MARKED

from cleanrl.ppo_atari_envpool import compute_gae as compute_gae_torch
from cleanrl.ppo_atari_envpool_xla_jax import Agent, Args, compute_gae, ppo_loss

SCRIPT = "ppo_atari_envpool_xla_jax"


@jax.jit
def _gae_jit(values, rewards, terminations, truncations, prev_episode_over, gamma, gae_lambda):
    return compute_gae(values, rewards, terminations, truncations, prev_episode_over, gamma, gae_lambda)


def gae_jax(values, rewards, terminations, truncations, prev_episode_over, gamma=0.99, gae_lambda=0.95):
    """compute_gae under jit; gamma and lambda go in as arrays, so each shape compiles once."""
    advantages, valid = _gae_jit(
        jnp.asarray(values, jnp.float32),
        jnp.asarray(rewards, jnp.float32),
        jnp.asarray(terminations),
        jnp.asarray(truncations),
        jnp.asarray(prev_episode_over),
        jnp.float32(gamma),
        jnp.float32(gae_lambda),
    )
    return np.asarray(advantages), np.asarray(valid)


@pytest.mark.parametrize("gamma,gae_lambda", [(0.99, 0.95), (0.9, 1.0), (1.0, 0.0), (0.97, 0.5)])
def test_compute_gae_matches_torch_twin_and_brute_force(gamma, gae_lambda):
    rng = np.random.default_rng(int(gamma * 1000 + gae_lambda * 100) + 11)
    for i in range(100):
        num_steps, num_envs = [(1, 1), (2, 3), (23, 5)][i % 3]  # few shapes: few compilations
        rollout = random_next_step_rollout(rng, num_steps, num_envs, p_term=rng.uniform(0, 0.3), p_trunc=rng.uniform(0, 0.3))
        advantages, valid = gae_jax(*rollout, gamma, gae_lambda)
        torch_adv, torch_valid = compute_gae_torch(
            *(torch.as_tensor(np.asarray(x, np.float32) if x.dtype != bool else x) for x in rollout), gamma, gae_lambda
        )
        np.testing.assert_array_equal(valid, torch_valid.numpy())
        np.testing.assert_allclose(advantages, torch_adv.numpy(), rtol=1e-5, atol=1e-5)
        expected, expected_valid = next_step_reference(*rollout, gamma, gae_lambda)
        np.testing.assert_array_equal(valid, expected_valid)
        np.testing.assert_allclose(advantages[valid], expected[valid], rtol=1e-5, atol=1e-5)
        assert (advantages[~valid] == 0).all()


def test_compute_gae_row_after_truncation_is_the_bootstrap():
    """A truncation on row 0 bootstraps values[1] (V of the episode's real last obs); row 1 is stale."""
    values = np.array([[1.0], [5.0], [2.0]])
    rewards = np.array([[0.5], [9.0]])
    adv, valid = gae_jax(values, rewards, np.array([[False], [False]]), np.array([[True], [False]]), np.array([False]))
    assert adv[0, 0] == pytest.approx(0.5 + 0.99 * 5.0 - 1.0)
    assert valid.tolist() == [[True], [False]] and adv[1, 0] == 0


def test_matmul_trunk_equals_xla_convolution():
    """The default space-to-depth + matmul trunk computes the same function as lax.conv on the same
    parameters (so --xla-conv is only a speed switch), and bf16 stays close to fp32."""
    obs = jnp.asarray(np.random.default_rng(0).integers(0, 256, (5, 4, 84, 84), dtype=np.uint8))
    params = Agent(6).init(jax.random.PRNGKey(3), obs)

    def hidden(**kwargs):
        return jax.jit(lambda p, o: Agent(6, **kwargs).apply(p, o, method=Agent.hidden))(params, obs)

    matmul, conv, bf16 = hidden(), hidden(xla_conv=True), hidden(bf16=True)
    assert float(jnp.abs(matmul).max()) > 0.1 and float((matmul > 0).mean()) > 0.1
    np.testing.assert_allclose(matmul, conv, rtol=1e-4, atol=1e-4)
    assert bf16.dtype == jnp.float32
    assert float(jnp.abs(bf16 - matmul).max()) <= 0.05 * float(jnp.abs(matmul).max())


def test_loss_ignores_stale_rows():
    """Randomising everything on the masked rows changes neither the loss nor its gradient."""
    rng = np.random.default_rng(0)
    agent, args, batch = Agent(6), Args(), 16
    obs = rng.integers(0, 256, (batch, 4, 84, 84), dtype=np.uint8)
    params = agent.init(jax.random.PRNGKey(0), obs)
    valid = rng.random(batch) > 0.3
    tensors = [
        obs,
        rng.integers(0, 6, batch),
        rng.normal(size=batch) - 1.5,
        rng.normal(size=batch),
        rng.normal(size=batch),
        rng.normal(size=batch),
    ]
    grad_fn = jax.jit(jax.value_and_grad(lambda p, *batch: ppo_loss(p, agent, *batch, args), has_aux=True))

    def run(tensors, valid):
        (loss, stats), grads = grad_fn(params, *(jnp.asarray(t) for t in tensors), jnp.asarray(valid))
        return loss, stats, grads

    base = run(tensors, valid)
    changed = [t.copy() for t in tensors]
    n = int((~valid).sum())
    changed[0][~valid] = rng.integers(0, 256, (n, 4, 84, 84), dtype=np.uint8)
    changed[1][~valid] = rng.integers(0, 6, n)
    changed[2][~valid] = rng.normal(size=n) * 10  # old log-probs: as in the torch twin's test
    for i in range(3, 6):
        changed[i][~valid] = rng.normal(size=n) * 1e3
    new = run(changed, valid)
    np.testing.assert_allclose(new[0], base[0], rtol=1e-5, atol=1e-6)
    for key in base[1]:
        np.testing.assert_allclose(new[1][key], base[1][key], rtol=1e-5, atol=1e-6)
    for g, g0 in zip(jax.tree.leaves(new[2]), jax.tree.leaves(base[2])):
        np.testing.assert_allclose(g, g0, rtol=1e-4, atol=1e-6)
    everything = np.ones(batch, bool)
    assert float(run(changed, everything)[0]) != pytest.approx(float(run(tensors, everything)[0]))


# 3 iterations of 8 envs x 32 steps; a 30-step time limit so every env finishes games
SHORT_RUN = ["--env-id", "Pong-v5", "--total-timesteps", "768", "--num-steps", "32", "--max-episode-steps", "30"]


@pytest.fixture(scope="module")
def two_short_runs(tmp_path_factory):
    """The same seeded short Pong run twice."""
    runs = []
    for i in range(2):
        log_dir = tmp_path_factory.mktemp(f"pong_jax{i}")
        result = run_script(SCRIPT, *SHORT_RUN, "--seed", "5", "--log-dir", str(log_dir), "--save-model")
        assert result.returncode == 0, result.stderr[-3000:]
        runs.append((only_run_dir(log_dir), result.stdout))
    return runs


def test_short_pong_run_writes_every_tag(two_short_runs):
    scalars = read_scalars(two_short_runs[0][0])
    missing = ATARI_TAGS - set(scalars)
    assert not missing, missing
    # every env reaches the 30-step limit 3 times in 96 steps (games of Pong last longer): at its steps
    # 30, 61 and 92, the stale reset step after each limit counted in no game. Each game is logged at
    # the global step of its own last step (8 envs a step), not at the end of its iteration.
    game_steps = [step for step, _ in scalars["charts/episodic_return"]]
    assert game_steps == [8 * step for step in (30, 61, 92) for _ in range(8)], game_steps
    assert all(length == 30 for _, length in scalars["charts/episodic_length"])
    # Whole-game sums of the unclipped reward: 30 agent steps (120 frames) of Pong end before the
    # first point, so 0 exactly (a value, a length or a running sum across games would not be).
    assert all(ret == 0 for _, ret in scalars["charts/episodic_return"])
    assert [step for step, _ in scalars["losses/value_loss"]] == [256, 512, 768]
    lrs = [lr for _, lr in scalars["charts/learning_rate"]]
    np.testing.assert_allclose(lrs, [2.5e-4, 2.5e-4 * 2 / 3, 2.5e-4 / 3], rtol=1e-5)
    assert all(np.isfinite(v) for _, v in scalars["losses/value_loss"])


def test_same_seed_gives_identical_losses(two_short_runs):
    first, second = (read_scalars(d) for d, _ in two_short_runs)
    for tag in sorted(ATARI_TAGS - {"charts/SPS"}):
        assert first[tag] == second[tag], tag


def test_compiles_once(two_short_runs):
    """jax.monitoring counts backend compilations: one (or a few) for iteration 1, none afterwards."""
    match = re.search(r"XLA compilations: (\d+) in iteration 1 .* (\d+) in the 2 later iterations", two_short_runs[0][1])
    assert match, two_short_runs[0][1][-2000:]
    assert int(match.group(1)) >= 1 and int(match.group(2)) == 0


def test_saved_model_evaluates(two_short_runs):
    """The saved model holds the trained weights (the final checkpoint's, not the initial ones) and
    evaluates: whole games at the training run's 30-step limit."""
    from cleanrl_utils.evaluate import evaluate, load_checkpoint

    model_path = os.path.join(two_short_runs[0][0], f"{SCRIPT}.cleanrl_model")
    checkpoint = load_checkpoint(model_path)
    assert checkpoint["script"] == SCRIPT and checkpoint["args"]["env_id"] == "Pong-v5"
    assert checkpoint["args"]["max_episode_steps"] == 30 and checkpoint["args"]["target_kl"] is None
    final = load_checkpoint(os.path.join(two_short_runs[0][0], "checkpoint.msgpack"))  # its params, as evaluate reads them
    saved, trained = jax.tree.leaves(checkpoint["model_state_dict"]), jax.tree.leaves(final["model_state_dict"])
    assert len(saved) == len(trained) and all(np.array_equal(a, b) for a, b in zip(saved, trained))
    _, agent_key = jax.random.split(jax.random.PRNGKey(5))  # the script's, for --seed 5
    initial = jax.tree.leaves(Agent(6).init(agent_key, np.zeros((1, 4, 84, 84), np.uint8)))
    assert all(a.shape == b.shape and not np.array_equal(a, b) for a, b in zip(initial, saved))
    returns = evaluate(model_path, episodes=2, seed=1)
    assert returns == [0.0, 0.0]  # 30 agent steps of Pong end before the first point


# Marked Pong frames: the torch twin's settings (tests/test_ppo_atari_envpool.py). EnvPool's XLA step runs inside
# jax.jit, so tests/marked_frames.py gives this script a step that calls back into the marking wrapper (an ordered
# io_callback). Calibration (2026-12-06, 2-core Zen 3, 56-97 s): last-20-game means at 20,480 steps 38.45, 45.35,
# 46.45 on seeds 1, 2, 3 (first-20 means 11.25, 11.9, 9.8). With each step's actions stored one env over, seed 1
# stayed at 11.15.
def test_learns_to_read_the_newest_frame(tmp_path):
    returns = marked_frame_returns(SCRIPT, *MARKED, "--seed", "1", log_dir=tmp_path)
    assert np.mean(returns[:20]) < 16, returns[:20]  # random play first
    assert np.mean(returns[-20:]) > 32, returns[-20:]  # above any policy that cannot see the band


BAD_INPUT = [
    (["--env-id", "Pongg-v5"], ["'Pongg-v5'", "Pong-v5"]),
    (["--num-minibatches", "3"], ["--num-minibatches 3", "1024"]),
    (["--num-envs", "0"], ["--num-envs", "0"]),
    (["--total-timesteps", "100"], ["--total-timesteps 100"]),
]

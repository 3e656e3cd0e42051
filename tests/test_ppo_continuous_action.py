"""Tests of cleanrl/ppo_continuous_action.py (same-step autoreset, Gymnasium MuJoCo): its GAE against
brute force, the in-script normalisers, a short real Hopper run that writes every tag with both
terminations and truncations, sync == async, the saved model (weights + normaliser) evaluated, bad
input."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from gae_reference import random_same_step_rollout, same_step_reference
from helpers import ATARI_TAGS, assert_one_error_line, only_run_dir, read_scalars, run_script

from cleanrl.ppo_continuous_action import Agent, RewardScaler, RunningMeanStd, compute_gae_same_step, normalize_obs

SCRIPT = "ppo_continuous_action"


def test_compute_gae_same_step_matches_brute_force():
    rng = np.random.default_rng(5)
    for _ in range(200):
        num_steps, num_envs = int(rng.integers(1, 24)), int(rng.integers(1, 6))
        values, last_values, final_values, rewards, term, trunc = random_same_step_rollout(
            rng, num_steps, num_envs, rng.uniform(0, 0.3), rng.uniform(0, 0.3)
        )
        values_t, term_t, trunc_t = torch.as_tensor(values), torch.as_tensor(term), torch.as_tensor(trunc)
        next_values = torch.cat([values_t[1:], torch.as_tensor(last_values)[None]], dim=0)
        next_values = torch.where(trunc_t & ~term_t, torch.as_tensor(final_values), next_values)
        advantages = compute_gae_same_step(values_t, next_values, torch.as_tensor(rewards), term_t, trunc_t, 0.99, 0.95)
        expected = same_step_reference(values, last_values, final_values, rewards, term, trunc, 0.99, 0.95)
        np.testing.assert_allclose(advantages.numpy(), expected, rtol=1e-10, atol=1e-10)


def test_running_mean_std_equals_numpy_over_the_stream():
    rng = np.random.default_rng(0)
    rms = RunningMeanStd((3,))
    batches = [rng.normal(2.0, 3.0, size=(int(rng.integers(1, 50)), 3)) for _ in range(30)]
    for batch in batches:
        rms.update(batch)
    stream = np.concatenate(batches)
    np.testing.assert_allclose(rms.mean, stream.mean(0), rtol=1e-10)
    np.testing.assert_allclose(rms.var, stream.var(0), rtol=1e-10)
    assert rms.count == len(stream)
    restored = RunningMeanStd((3,))
    restored.load_state_dict(rms.state_dict())
    np.testing.assert_array_equal(restored.mean, rms.mean)
    np.testing.assert_array_equal(restored.var, rms.var)
    obs = rng.normal(2.0, 3.0, size=(1000, 3))
    normalized = normalize_obs(obs, rms, 10.0)
    assert normalized.dtype == np.float32
    assert np.abs(normalized.mean(0)).max() < 0.2 and np.abs(normalized.std(0) - 1).max() < 0.1
    assert np.abs(normalize_obs(obs * 100, rms, 10.0)).max() == 10.0


def test_reward_scaler_restarts_the_return_at_every_boundary():
    """Same-step: the boundary step's reward still belongs to the ending episode's return; the
    next step starts a fresh accumulator. The statistics see every step's return."""
    gamma = 0.9
    scaler = RewardScaler(2, gamma, clip=10.0)
    rewards = np.array([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0], [1.0, 2.0]])
    over = np.array([[False, False], [True, False], [False, False], [False, True]])
    seen = []
    expected_returns = np.zeros(2)
    for reward, episode_over in zip(rewards, over):
        expected_returns = expected_returns * gamma + reward
        seen.append(expected_returns.copy())
        scaled = scaler(reward, episode_over)
        np.testing.assert_allclose(scaled, reward / np.sqrt(np.concatenate(seen).var() + 1e-8), rtol=1e-6)
        expected_returns[episode_over] = 0.0
        np.testing.assert_array_equal(scaler.returns, expected_returns)
    assert scaler.return_rms.count == 8
    # clipping: after 1000 zero returns one huge reward is ~31 stds away, clipped to +-10
    big = RewardScaler(2, gamma, clip=10.0)
    for _ in range(500):
        big(np.zeros(2), np.ones(2, dtype=bool))
    np.testing.assert_array_equal(big(np.array([1e6, -1e6]), np.zeros(2, dtype=bool)), [10.0, -10.0])


def test_agent_shapes_and_log_probs():
    torch.manual_seed(0)
    agent = Agent(11, 3)
    obs = torch.randn(5, 11)
    action, logprob, entropy, value = agent.get_action_and_value(obs)
    assert action.shape == (5, 3) and logprob.shape == entropy.shape == value.shape == (5,)
    _, logprob2, _, _ = agent.get_action_and_value(obs, action)
    torch.testing.assert_close(logprob, logprob2)


# Hopper with a random policy falls within ~20-60 steps; a 50-step limit adds truncations.
SHORT_RUN = [
    "--env-id",
    "Hopper-v5",
    "--total-timesteps",
    "2048",
    "--num-envs",
    "4",
    "--num-steps",
    "128",
    "--max-episode-steps",
    "50",
    "--seed",
    "3",
]


@pytest.fixture(scope="module")
def sync_and_async_runs(tmp_path_factory):
    dirs = []
    for mode in ("sync", "async"):
        log_dir = tmp_path_factory.mktemp(mode)
        result = run_script(SCRIPT, *SHORT_RUN, "--vector-mode", mode, "--log-dir", str(log_dir), "--save-model")
        assert result.returncode == 0, result.stderr[-3000:]
        dirs.append(only_run_dir(log_dir))
    return dirs


def test_short_hopper_run_writes_every_tag(sync_and_async_runs):
    scalars = read_scalars(sync_and_async_runs[0])
    missing = ATARI_TAGS - set(scalars)
    assert not missing, missing
    lengths = [length for _, length in scalars["charts/episodic_length"]]
    assert all(1 <= length <= 50 for length in lengths)
    assert 50 in lengths and min(lengths) < 50  # truncations and terminations both happened
    assert len(scalars["losses/value_loss"]) == 4
    lrs = [lr for _, lr in scalars["charts/learning_rate"]]
    assert lrs[0] == pytest.approx(0.00295) and lrs == sorted(lrs, reverse=True)


def test_async_matches_sync(sync_and_async_runs):
    sync, async_ = (read_scalars(d) for d in sync_and_async_runs)
    for tag in sorted(ATARI_TAGS - {"charts/SPS"}):
        assert sync[tag] == async_[tag], tag


def test_saved_model_holds_the_normaliser_and_evaluates(sync_and_async_runs):
    from cleanrl_utils.evaluate import evaluate

    model_path = os.path.join(sync_and_async_runs[0], f"{SCRIPT}.cleanrl_model")
    checkpoint = torch.load(model_path, weights_only=True)
    assert checkpoint["script"] == SCRIPT
    assert checkpoint["obs_rms"]["mean"].shape == (11,) and checkpoint["obs_rms"]["count"] > 2048
    assert checkpoint["return_rms"]["count"] == 2048
    returns = evaluate(model_path, episodes=3, seed=1, greedy=True)
    assert len(returns) == 3 and all(np.isfinite(returns))
    result = subprocess.run(
        [sys.executable, "-m", "cleanrl_utils.evaluate", "--model-path", model_path, "--episodes", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "episode 1: return" in result.stdout and "mean return over 2 episodes" in result.stdout


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--env-id", "Hoper-v5"], ["'Hoper-v5'", "Hopper-v5"]),
        (["--env-id", "CartPole-v1"], ["'CartPole-v1'", "flat Box"]),
        (["--num-minibatches", "3"], ["--num-minibatches 3", "4096"]),
        (["--num-envs", "0"], ["--num-envs", "0"]),
        (["--total-timesteps", "100"], ["--total-timesteps 100"]),
        (["--obs-clip", "0"], ["--obs-clip", "0"]),
        (["--vector-mode", "Async"], ["--vector-mode", "'Async'"]),
        (["--checkpoint-every", "-1"], ["--checkpoint-every", "-1"]),
    ],
)
def test_bad_input_gives_one_clear_line(args, expected):
    assert_one_error_line(run_script(SCRIPT, *args, timeout=120), expected)

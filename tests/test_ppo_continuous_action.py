"""Tests of cleanrl/ppo_continuous_action.py (same-step autoreset, Gymnasium MuJoCo): its GAE against
brute force, its truncation bootstrap on a real Gymnasium truncation, the in-script normalisers
against numpy and explicit per-episode sums, a short real Hopper run that writes every tag with both
terminations and truncations, sync == async, the saved model (weights + normaliser) evaluated, a learning run on
InvertedPendulum, bad input."""

import os

import gymnasium as gym
import numpy as np
import pytest
import torch
from bad_input import test_bad_input_gives_one_clear_line_and_writes_nothing  # noqa: F401 (collected here)
from gae_reference import random_same_step_rollout, same_step_reference
from helpers import ATARI_TAGS, REPO, evaluate_cli_returns, only_run_dir, read_scalars, run_script

from cleanrl.ppo_continuous_action import (
    Agent,
    RewardScaler,
    RunningMeanStd,
    compute_gae_same_step,
    make_env,
    normalize_obs,
    truncation_values,
)

SCRIPT = "ppo_continuous_action"


def test_compute_gae_same_step_matches_brute_force():
    rng = np.random.default_rng(5)
    for _ in range(200):
        num_steps, num_envs = int(rng.integers(1, 24)), int(rng.integers(1, 6))
        rollout = random_same_step_rollout(rng, num_steps, num_envs, rng.uniform(0, 0.3), rng.uniform(0, 0.3))
        *parts, term, trunc = (torch.as_tensor(x) for x in rollout)
        advantages = compute_gae_same_step(*parts, term, trunc, 0.99, 0.95)
        expected = same_step_reference(*rollout, 0.99, 0.95)
        np.testing.assert_allclose(advantages.numpy(), expected, rtol=1e-10, atol=1e-10)


def test_truncation_bootstraps_the_value_of_the_real_final_observation():
    """The script's own wiring on real Hopper with a 20-step limit (falls terminate, the limit
    truncates), with the loop's normalisation: statistics updated with every observation on
    arrival, the observation normalised with them. Each sub-env is replayed on a plain env with the
    same seed, so the real last observation of every episode is known independently of
    info["final_obs"]; the brute-force reference bootstraps its value at truncations. A wiring that
    bootstrapped 0, or V(reset obs), there gives other advantages, and the test shows it."""
    num_envs, seed, limit, num_steps, clip = 3, 1, 20, 150, 10.0
    torch.manual_seed(0)
    agent = Agent(11, 3)
    obs_rms = RunningMeanStd((11,))

    def value_of(raw_obs):
        return agent.get_value(torch.from_numpy(normalize_obs(np.asarray(raw_obs), obs_rms, clip))).detach().numpy()

    envs = make_env("Hopper-v5", num_envs, "sync", max_episode_steps=limit)
    singles = [gym.make("Hopper-v5", max_episode_steps=limit) for _ in range(num_envs)]
    obs, _ = envs.reset(seed=seed)
    for i, env in enumerate(singles):
        env.reset(seed=seed + i)
    obs_rms.update(obs)
    rng = np.random.default_rng(0)
    values, rewards, terms, truncs, final_values = [], [], [], [], []
    real_final_values = np.zeros((num_steps, num_envs))
    for t in range(num_steps):
        values.append(value_of(obs))
        action = rng.uniform(-1, 1, (num_envs, 3)).astype(np.float32)
        obs, reward, term, trunc, info = envs.step(action)
        obs_rms.update(obs)
        final_values.append(truncation_values(agent, info, term, trunc, obs_rms, clip).numpy())
        for i, env in enumerate(singles):
            last_obs, _, _, _, _ = env.step(action[i])
            if term[i] or trunc[i]:
                real_final_values[t, i] = value_of(last_obs[None])[0]
                env.reset()
        rewards.append(reward)
        terms.append(term)
        truncs.append(trunc)
    last_values = value_of(obs)
    envs.close()
    values, rewards, terms, truncs = (np.array(x) for x in (values, rewards, terms, truncs))
    truncated = truncs & ~terms
    assert truncated.sum() >= 5 and terms.sum() >= 5, (truncated.sum(), terms.sum())
    final_values = np.array(final_values)
    np.testing.assert_allclose(final_values[truncated], real_final_values[truncated], rtol=1e-5, atol=1e-6)
    assert (final_values[~truncated] == 0).all()

    as_tensors = (torch.as_tensor(np.asarray(x)) for x in (values, last_values, final_values, rewards, terms, truncs))
    advantages = compute_gae_same_step(*as_tensors, 0.99, 0.95).numpy()
    expected = same_step_reference(values, last_values, real_final_values, rewards, terms, truncs, 0.99, 0.95)
    np.testing.assert_allclose(advantages, expected, rtol=1e-5, atol=1e-5)
    # what the two classic mistakes would give, at the truncated rows
    reset_values = np.concatenate([values[1:], last_values[None]])  # V(reset obs) after a truncation
    for wrong in (np.zeros_like(real_final_values), reset_values):
        wrong_advantages = same_step_reference(values, last_values, wrong, rewards, terms, truncs, 0.99, 0.95)
        assert np.abs(wrong_advantages - advantages)[truncated].min() > 1e-3
    # and the training loop calls this very wiring
    source = open(os.path.join(REPO, "cleanrl", f"{SCRIPT}.py")).read()
    assert "final_values[step] = truncation_values(agent, info, term, trunc, obs_rms, args.obs_clip)" in source
    assert "values, last_values, final_values, rewards, terminations, truncations, args.gamma" in source


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


def test_reward_scaler_matches_brute_force_discounted_returns():
    """The statistics are those of every step's per-env discounted return, each rebuilt from scratch
    as an explicit sum over its episode's rewards so far. Same-step: the boundary step's reward
    still belongs to the ending episode; the next step starts a new one. Rewards are divided by
    the std of those returns and clipped."""
    rng = np.random.default_rng(4)
    num_envs, num_steps, gamma, clip = 5, 400, 0.97, 10.0
    scaler = RewardScaler(num_envs, gamma, clip)
    accumulated = []  # brute force: every discounted return the statistics must have seen
    episode_rewards = [[] for _ in range(num_envs)]
    for _ in range(num_steps):
        over = rng.random(num_envs) < 0.05
        reward = rng.normal(2.0, 5.0, num_envs).astype(np.float32)
        scaled = scaler(reward, over)
        for env in range(num_envs):
            episode_rewards[env].append(float(reward[env]))
            rewards = episode_rewards[env]
            accumulated.append(sum(r * gamma ** (len(rewards) - 1 - k) for k, r in enumerate(rewards)))
            if over[env]:
                episode_rewards[env] = []
        std = np.sqrt(np.var(accumulated) + 1e-8)
        np.testing.assert_allclose(scaled, np.clip(reward / std, -clip, clip), rtol=1e-5, atol=1e-6)
    assert scaler.return_rms.count == len(accumulated) == num_envs * num_steps
    assert scaler.return_rms.mean == pytest.approx(np.mean(accumulated), rel=1e-9)
    assert scaler.return_rms.var == pytest.approx(np.var(accumulated), rel=1e-9)
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
    torch.testing.assert_close(logprob, logprob2, rtol=1e-5, atol=1e-5)


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


def test_saved_model_holds_the_normaliser_and_evaluates(sync_and_async_runs, tmp_path):
    from cleanrl_utils.evaluate import evaluate

    model_path = os.path.join(sync_and_async_runs[0], f"{SCRIPT}.cleanrl_model")
    checkpoint = torch.load(model_path, weights_only=True)
    assert checkpoint["script"] == SCRIPT
    assert checkpoint["obs_rms"]["mean"].shape == (11,) and checkpoint["obs_rms"]["count"] > 2048
    assert checkpoint["return_rms"]["count"] == 2048
    returns = evaluate(model_path, episodes=3, seed=1, greedy=True)
    assert len(returns) == 3 and all(np.isfinite(returns))
    # Greedy play is deterministic, and it sees observations through the saved statistics: the same
    # weights with identity statistics (an evaluator that forgot the normaliser) play differently.
    assert evaluate(model_path, episodes=3, seed=1, greedy=True) == returns
    identity = {"mean": torch.zeros(11, dtype=torch.float64), "var": torch.ones(11, dtype=torch.float64)}
    unnormalised_path = tmp_path / "unnormalised.cleanrl_model"
    torch.save(checkpoint | {"obs_rms": identity | {"count": checkpoint["obs_rms"]["count"]}}, unnormalised_path)
    assert evaluate(str(unnormalised_path), episodes=3, seed=1, greedy=True) != returns
    assert len(evaluate_cli_returns(model_path, "--episodes", "2")) == 2


BAD_INPUT = [
    (["--env-id", "CartPol-v1"], ["'CartPol-v1'", "; e.g. HalfCheetah-v4"]),  # trial 31: discrete ids are not suggested
    (["--env-id", "Pong-v5"], ["'Pong-v5' is an EnvPool Atari id", "_envpool"]),  # was: "did you mean Ant-v5?"
    (["--env-id", "Hoper-v5"], ["'Hoper-v5'", "Hopper-v5"]),
    (["--env-id", "CartPole-v1"], ["'CartPole-v1'", "flat Box"]),
    (["--num-minibatches", "3"], ["--num-minibatches 3", "4096"]),
    (["--num-envs", "0"], ["--num-envs", "0"]),
    (["--total-timesteps", "100"], ["--total-timesteps 100"]),
    (["--obs-clip", "0"], ["--obs-clip", "0"]),
    (["--vector-mode", "Async"], ["--vector-mode", "'Async'"]),
    (["--checkpoint-every", "-1"], ["--checkpoint-every", "-1"]),
    (["--capture-video", "--video-every", "0"], ["--video-every must be a positive integer, got 0"]),
]


# InvertedPendulum pays 1 a step for up to 1,000 steps. The EnvPool twin's learning run
# (tests/test_ppo_continuous_action_envpool.py): 16 envs x 128 steps, 98,304 steps, otherwise the defaults.
# Calibration (2026-12-06, 2-core Zen 3, two runs at once, 17-18 s each): last-20-game means 1,000 on seeds 1, 2, 3
# (first-20 means 6.4, 5.75, 6.15). With each step's actions stored one env over, seed 1 ended at 3.65.
def test_inverted_pendulum_learns(tmp_path):
    run = ["--env-id", "InvertedPendulum-v4", "--total-timesteps", "98304", "--num-envs", "16", "--num-steps", "128"]
    result = run_script(SCRIPT, *run, "--seed", "1", "--log-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    scalars = read_scalars(only_run_dir(tmp_path))
    returns = [value for _, value in scalars["charts/episodic_return"]]
    # raw-unit returns equal the lengths (scaled ones would not)
    np.testing.assert_allclose(returns, [value for _, value in scalars["charts/episodic_length"]], rtol=1e-5)
    assert np.mean(returns[:20]) < 50, returns[:20]
    assert np.mean(returns[-20:]) >= 700, returns[-40:]  # the EnvPool twin's threshold

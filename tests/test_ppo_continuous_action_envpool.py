"""Tests of cleanrl/ppo_continuous_action_envpool.py: GAE and masking against brute force and real
EnvPool MuJoCo, the normaliser and reward scaler against numpy, the loss ignoring stale rows, real
short runs, determinism, a learning run on InvertedPendulum and its saved-model evaluation, bad input."""

import os

import numpy as np
import pytest
import torch
from bad_input import test_bad_input_gives_one_clear_line_and_writes_nothing  # noqa: F401 (collected here)
from gae_reference import next_step_reference, random_next_step_rollout, script_gae
from helpers import ATARI_TAGS, assert_masked_rows_change_nothing, only_run_dir, read_scalars, run_script

from cleanrl.ppo_continuous_action_envpool import (
    Agent,
    Args,
    RewardScaler,
    RunningMeanStd,
    compute_gae,
    make_env,
    normalize_obs,
    ppo_loss,
)

SCRIPT = "ppo_continuous_action_envpool"
TAGS = ATARI_TAGS  # same logging tags in every PPO script


def gae_torch(*rollout, **gae):
    return script_gae(compute_gae, *rollout, **gae)


@pytest.mark.parametrize("gamma,gae_lambda", [(0.99, 0.95), (0.9, 1.0), (1.0, 0.0), (0.97, 0.5)])
def test_compute_gae_matches_brute_force_on_random_rollouts(gamma, gae_lambda):
    rng = np.random.default_rng(int(gamma * 1000 + gae_lambda * 100) + 1)
    for _ in range(200):
        num_steps, num_envs = int(rng.integers(1, 24)), int(rng.integers(1, 6))
        rollout = random_next_step_rollout(rng, num_steps, num_envs, p_term=rng.uniform(0, 0.3), p_trunc=rng.uniform(0, 0.3))
        expected, expected_valid = next_step_reference(*rollout, gamma, gae_lambda)
        advantages, valid = gae_torch(*rollout, gamma, gae_lambda)
        np.testing.assert_array_equal(valid, expected_valid)
        np.testing.assert_allclose(advantages[valid], expected[valid], rtol=1e-10, atol=1e-10)
        assert (advantages[~valid] == 0).all()


def test_real_envpool_mujoco_next_step_autoreset():
    """The EnvPool facts the script relies on, on real Hopper (terminations) with a 40-step limit
    (truncations): a step is stale exactly when elapsed_step drops to 0, which happens exactly on
    the step after a boundary; the stale step pays reward 0 and returns a fresh (reset) observation,
    while the boundary step returned the episode's real last one. The valid mask from compute_gae
    is False exactly on the stale steps."""
    num_envs, num_steps, rollouts = 4, 50, 6
    envs = make_env("Hopper-v4", num_envs, seed=3, max_episode_steps=40)  # the script's: exact at the limit
    obs, info = envs.reset()
    # Hopper resets to height 1.25, everything else 0, plus uniform noise of scale 0.005
    reset_pose = np.zeros(11)
    reset_pose[0] = 1.25
    np.testing.assert_array_less(np.abs(obs - reset_pose), 0.0051)
    rng = np.random.default_rng(0)
    prev_over = np.zeros(num_envs, dtype=bool)
    counts = {"termination": 0, "truncation": 0, "stale": 0}
    for _ in range(rollouts):
        term = np.zeros((num_steps, num_envs), dtype=bool)
        trunc = np.zeros((num_steps, num_envs), dtype=bool)
        stale = np.zeros((num_steps, num_envs), dtype=bool)
        for t in range(num_steps):
            obs, reward, term[t], trunc[t], info = envs.step(rng.uniform(-1, 1, (num_envs, 3)).astype(np.float32))
            stale[t] = info["elapsed_step"] == 0
            expected_stale = prev_over if t == 0 else term[t - 1] | trunc[t - 1]
            np.testing.assert_array_equal(stale[t], expected_stale)
            assert (reward[stale[t]] == 0).all()
            assert not (term[t] | trunc[t])[stale[t]].any()
            # the stale step returns a reset observation; the boundary step returned the real last one
            deviation = np.abs(obs - reset_pose).max(axis=1)
            assert (deviation[stale[t]] < 0.0051).all()
            assert (deviation[term[t] | trunc[t]] > 0.05).all()
            counts["termination"] += int(term[t].sum())
            counts["truncation"] += int((trunc[t] & ~term[t]).sum())
            counts["stale"] += int(stale[t].sum())
        _, valid = gae_torch(np.zeros((num_steps + 1, num_envs)), np.zeros((num_steps, num_envs)), term, trunc, prev_over)
        np.testing.assert_array_equal(valid, ~stale)
        prev_over = term[-1] | trunc[-1]
    assert np.all(info["elapsed_step"] <= 40)
    assert counts["termination"] > 5 and counts["truncation"] > 2 and counts["stale"] > 10, counts


def test_running_mean_std_equals_numpy_over_the_stream():
    rng = np.random.default_rng(1)
    rms = RunningMeanStd((5,))
    stream = []
    for _ in range(300):
        batch = rng.normal(loc=rng.uniform(-50, 50, 5), scale=rng.uniform(0.01, 30, 5), size=(int(rng.integers(0, 70)), 5))
        rms.update(batch)
        stream.append(batch)
        everything = np.concatenate(stream)
        assert rms.count == len(everything)
        if len(everything):
            np.testing.assert_allclose(rms.mean, everything.mean(axis=0), rtol=1e-10, atol=1e-10)
            np.testing.assert_allclose(rms.var, everything.var(axis=0), rtol=1e-9, atol=1e-10)
    scalar = RunningMeanStd(())
    values = rng.exponential(3.0, size=1000)
    for chunk in np.array_split(values, 37):
        scalar.update(chunk)
    assert scalar.mean == pytest.approx(values.mean(), rel=1e-12)
    assert scalar.var == pytest.approx(values.var(), rel=1e-10)


def test_running_mean_std_save_load_round_trip_is_exact(tmp_path):
    rng = np.random.default_rng(2)
    rms = RunningMeanStd((11,))
    for _ in range(20):
        rms.update(rng.normal(size=(64, 11)) * rng.uniform(0.1, 100, 11))
    path = tmp_path / "rms.pt"
    torch.save({"obs_rms": rms.state_dict()}, path)
    restored = RunningMeanStd((11,))
    restored.load_state_dict(torch.load(path, weights_only=True)["obs_rms"])
    np.testing.assert_array_equal(restored.mean, rms.mean)
    np.testing.assert_array_equal(restored.var, rms.var)
    assert restored.count == rms.count
    obs = rng.normal(size=(8, 11)) * 50
    np.testing.assert_array_equal(normalize_obs(obs, restored, 10.0), normalize_obs(obs, rms, 10.0))
    # the state is a copy: updating the original later does not move the restored one
    rms.update(rng.normal(size=(4, 11)))
    assert not np.array_equal(restored.mean, rms.mean)


def test_normalize_obs_standardises_and_clips():
    rng = np.random.default_rng(3)
    rms = RunningMeanStd((3,))
    data = rng.normal(loc=[1.0, -20.0, 300.0], scale=[0.5, 4.0, 80.0], size=(5000, 3))
    rms.update(data)
    normalised = normalize_obs(data, rms, 10.0)
    assert normalised.dtype == np.float32
    np.testing.assert_allclose(normalised.mean(axis=0), 0.0, atol=1e-3)
    np.testing.assert_allclose(normalised.std(axis=0), 1.0, atol=1e-3)
    far = normalize_obs(np.array([[1e6, -1e6, 300.0]]), rms, 10.0)
    assert far[0, 0] == 10.0 and far[0, 1] == -10.0


def test_reward_scaler_matches_brute_force_discounted_returns():
    """The statistics are those of the per-env discounted returns, accumulated within episodes only
    (reset at every termination or truncation) and leaving out stale steps; rewards are divided by
    their std and clipped."""
    rng = np.random.default_rng(4)
    num_envs, num_steps, gamma, clip = 5, 400, 0.97, 10.0
    scaler = RewardScaler(num_envs, gamma, clip)
    prev_over = np.zeros(num_envs, dtype=bool)
    accumulated = []  # brute force: rebuild each episode's discounted return from scratch
    episode_rewards = [[] for _ in range(num_envs)]
    for _ in range(num_steps):
        stale = prev_over
        over = (rng.random(num_envs) < 0.05) & ~stale
        reward = np.where(stale, 0.0, rng.normal(2.0, 5.0, num_envs)).astype(np.float32)
        scaled = scaler(reward, over, stale)
        for env in np.flatnonzero(~stale):
            episode_rewards[env].append(float(reward[env]))
            rewards = episode_rewards[env]
            accumulated.append(sum(r * gamma ** (len(rewards) - 1 - k) for k, r in enumerate(rewards)))
        for env in np.flatnonzero(over):
            episode_rewards[env] = []
        std = np.sqrt(np.var(accumulated) + 1e-8)
        np.testing.assert_allclose(scaled, np.clip(reward / std, -clip, clip), rtol=1e-5, atol=1e-6)
        assert (scaled[stale] == 0).all()
        prev_over = over
    assert scaler.return_rms.count == len(accumulated)
    assert scaler.return_rms.mean == pytest.approx(np.mean(accumulated), rel=1e-9)
    assert scaler.return_rms.var == pytest.approx(np.var(accumulated), rel=1e-9)


def test_agent_log_prob_is_of_the_unclipped_gaussian_sample():
    torch.manual_seed(0)
    agent = Agent(17, 6)
    with torch.no_grad():
        agent.actor_logstd.fill_(0.5)  # wide enough that many samples leave [-1, 1]
    obs = torch.randn(256, 17)
    action, logprob, entropy, value = agent.get_action_and_value(obs)
    assert (action.abs() > 1).any()
    mean = agent.actor_mean(obs)
    std = torch.full_like(mean, np.exp(0.5))
    expected = (-((action - mean) ** 2) / (2 * std**2) - std.log() - 0.5 * np.log(2 * np.pi)).sum(-1)
    torch.testing.assert_close(logprob, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        entropy, torch.full_like(entropy, 6 * (0.5 + 0.5 + 0.5 * np.log(2 * np.pi))), rtol=1e-5, atol=1e-5
    )
    assert value.shape == (256,)
    # re-evaluating the stored sample reproduces the stored log-prob (ratio 1 at the first epoch)
    _, logprob2, _, _ = agent.get_action_and_value(obs, action)
    torch.testing.assert_close(logprob2, logprob, rtol=1e-5, atol=1e-5)


def test_loss_ignores_stale_rows():
    """Randomising everything on the masked rows (obs, action, old log-prob, advantage, return, old
    value) changes neither the loss nor its gradient, nor any logged statistic."""
    torch.manual_seed(0)
    args, agent, batch = Args(), Agent(11, 3), 64
    valid = torch.rand(batch) > 0.3
    n = int((~valid).sum())
    tensors = [torch.randn(batch, 11), torch.randn(batch, 3), torch.randn(batch) - 3.0]
    tensors += [torch.randn(batch), torch.randn(batch), torch.randn(batch)]
    fresh = [torch.randn(n, 11) * 100, torch.randn(n, 3) * 10, torch.randn(n) * 10]
    fresh += [torch.randn(n) * 1e3, torch.randn(n) * 1e3, torch.randn(n) * 1e3]
    assert_masked_rows_change_nothing(lambda *x: ppo_loss(agent, *x, args), agent, tensors, fresh, valid)


SHORT_RUN = [
    "--env-id",
    "HalfCheetah-v4",
    "--total-timesteps",
    "2048",
    "--num-envs",
    "8",
    "--num-steps",
    "128",
    "--max-episode-steps",
    "50",
]


@pytest.fixture(scope="module")
def two_short_runs(tmp_path_factory):
    """The same seeded short HalfCheetah run twice, with a 50-step time limit so episodes end."""
    dirs = []
    for i in range(2):
        log_dir = tmp_path_factory.mktemp(f"cheetah{i}")
        result = run_script(SCRIPT, *SHORT_RUN, "--seed", "5", "--log-dir", str(log_dir), "--save-model")
        assert result.returncode == 0, result.stderr[-3000:]
        dirs.append(only_run_dir(log_dir))
    return dirs


@pytest.mark.parametrize("script", [SCRIPT, "rpo_continuous_action_envpool"])
def test_actor_logstd_init_is_the_policys_starting_log_std(script, tmp_path):
    """--actor-logstd-init reaches the trained agent: one rollout at a learning rate of 1e-9 (Adam moves each weight by
    about the rate per step, 4 steps here) saves the log-std it started from, -0.5 in every action dimension, not
    the default 0."""
    flags = ["--total-timesteps", "1024", "--num-envs", "8", "--num-steps", "128", "--update-epochs", "1"]
    flags += ["--learning-rate", "1e-9", "--actor-logstd-init", "-0.5", "--log-dir", str(tmp_path), "--save-model"]
    result = run_script(script, *flags)
    assert result.returncode == 0, result.stderr[-3000:]
    saved = torch.load(os.path.join(only_run_dir(tmp_path), f"{script}.cleanrl_model"), weights_only=True)
    logstd = saved["model_state_dict"]["actor_logstd"].numpy()
    assert logstd.shape == (1, 6)  # HalfCheetah's 6 actions
    np.testing.assert_allclose(logstd, -0.5, rtol=0, atol=1e-6)
    assert saved["args"]["actor_logstd_init"] == -0.5


def test_short_run_writes_every_tag(two_short_runs):
    scalars = read_scalars(two_short_runs[0])
    missing = TAGS - set(scalars)
    assert not missing, missing
    # 256 steps per env at a 50-step limit: 5 truncations per env
    assert len(scalars["charts/episodic_return"]) == 8 * 5
    assert all(length == 50 for _, length in scalars["charts/episodic_length"])
    assert len(scalars["losses/value_loss"]) == 2


def test_same_seed_gives_identical_losses(two_short_runs):
    first, second = (read_scalars(d) for d in two_short_runs)
    for tag in sorted(TAGS - {"charts/SPS"}):
        assert first[tag] == second[tag], tag


def test_checkpoint_holds_the_normaliser_state(two_short_runs):
    checkpoint = torch.load(os.path.join(two_short_runs[0], f"{SCRIPT}.cleanrl_model"), weights_only=True)
    assert checkpoint["script"] == SCRIPT and checkpoint["args"]["env_id"] == "HalfCheetah-v4"
    obs_rms = RunningMeanStd((17,))
    obs_rms.load_state_dict(checkpoint["obs_rms"])
    # every observation EnvPool returned enters once: the reset batch and one batch per step
    assert obs_rms.count == 8 * (2 * 128 + 1)
    assert (obs_rms.var > 0).all() and not np.allclose(obs_rms.mean, 0)
    # returns enter once per non-stale step: each env runs 5 cycles of 50 steps + 1 stale step,
    # then 1 more step, so 256 - 5 of its 256 steps count
    assert float(checkpoint["return_rms"]["count"]) == 8 * (256 - 5)


# Calibration (2026-12-06, 2-core Zen 3, three runs at once, 23-28 s each): last-20 means 1000, 1000, 1000 (the
# maximum) on seeds 1, 2, 3; first-20 means 5.7, 6.6, 6.15.
LEARNING_RUN = [
    "--env-id",
    "InvertedPendulum-v4",
    "--total-timesteps",
    "98304",
    "--num-envs",
    "16",
    "--num-steps",
    "128",
    "--seed",
    "1",
]
THRESHOLD = 700.0


def test_inverted_pendulum_learns(pendulum_run):
    scalars = read_scalars(pendulum_run)
    returns = [value for _, value in scalars["charts/episodic_return"]]
    lengths = [value for _, value in scalars["charts/episodic_length"]]
    # InvertedPendulum pays exactly 1 per step: raw-unit returns equal the lengths (scaled ones would not)
    np.testing.assert_allclose(returns, lengths, rtol=1e-5)
    assert np.mean(returns[:20]) < 50, returns[:20]
    final = np.mean(returns[-20:])
    assert final >= THRESHOLD, (final, returns[-40:])


def test_saved_model_evaluates_like_training(pendulum_run, monkeypatch, tmp_path):
    """The saved weights and normaliser statistics reproduce the training returns, sampled and
    greedy (Gaussian mean); evaluation reads the statistics and never updates them. On the same
    seeds, with the same saved statistics, the untrained network (the run's seed-1 initial
    weights) falls within a few dozen steps: the returns come from the trained weights."""
    import cleanrl.ppo_continuous_action_envpool as script
    from cleanrl_utils.evaluate import evaluate

    def frozen(self, batch):
        raise AssertionError("evaluation updated the normaliser")

    monkeypatch.setattr(script.RunningMeanStd, "update", frozen)
    model_path = os.path.join(pendulum_run, f"{SCRIPT}.cleanrl_model")
    train_final = np.mean([value for _, value in read_scalars(pendulum_run)["charts/episodic_return"]][-20:])
    sampled = evaluate(model_path, episodes=8, seed=123, cuda=False)
    greedy = evaluate(model_path, episodes=8, seed=123, greedy=True, cuda=False)
    assert len(sampled) == len(greedy) == 8
    assert np.mean(sampled) >= min(THRESHOLD, 0.8 * train_final), (sampled, train_final)
    assert np.mean(greedy) >= min(THRESHOLD, 0.8 * train_final), (greedy, train_final)
    assert evaluate(model_path, episodes=8, seed=123, greedy=True, cuda=False) == greedy  # deterministic

    saved = torch.load(model_path, weights_only=True)
    torch.manual_seed(1)  # the script's seed: its own initial weights
    untrained_path = str(tmp_path / "untrained.cleanrl_model")
    torch.save(saved | {"model_state_dict": Agent(4, 1).state_dict()}, untrained_path)
    untrained = evaluate(untrained_path, episodes=8, seed=123, greedy=True, cuda=False)
    assert np.mean(untrained) < 50 and np.mean(greedy) > 10 * np.mean(untrained), (untrained, greedy)


BAD_INPUT = [
    (["--env-id", "HalfCheetah-v9"], ["'HalfCheetah-v9'", "HalfCheetah-v4"]),
    (["--num-minibatches", "3"], ["--num-minibatches 3", "4096"]),
    (["--num-envs", "0"], ["--num-envs", "0"]),
    (["--capture-video", "--video-every", "0"], ["--video-every must be a positive integer, got 0"]),
]


@pytest.mark.parametrize(
    "overrides,expected",
    [
        ({"env_id": "Pong-v5"}, ["'Pong-v5'", "an EnvPool Atari environment", "MuJoCo ones, e.g. HalfCheetah-v4"]),
        ({"env_id": "hopper-v4"}, ["'hopper-v4'", "Hopper-v4"]),
        ({"num_steps": -5}, ["--num-steps", "-5"]),
        ({"update_epochs": 0}, ["--update-epochs", "0"]),
        ({"max_episode_steps": 0}, ["--max-episode-steps", "0"]),
        ({"total_timesteps": 100}, ["--total-timesteps 100"]),
        ({"learning_rate": 0.0}, ["--learning-rate", "0"]),
        ({"kl_adaptive_lr": -0.01}, ["--kl-adaptive-lr", "-0.01"]),
        ({"checkpoint_every": -1}, ["--checkpoint-every", "-1"]),
        ({"num_envs": 6, "num_steps": 5, "num_minibatches": 4}, ["--num-minibatches 4", "30"]),
        ({"num_envs": 1, "num_steps": 8, "num_minibatches": 8}, ["--num-minibatches 8", "at least 2 rows"]),
        ({"seed": -1}, ["--seed", "-1"]),
        ({"seed": 2**32}, ["--seed", "4294967296"]),
        ({"obs_clip": 0.0}, ["--obs-clip", "0"]),
        ({"actor_logstd_init": 6.0}, ["--actor-logstd-init must be in [-10, 5]", "got 6.0"]),
        ({"actor_logstd_init": -11.0}, ["--actor-logstd-init must be in [-10, 5]", "got -11.0"]),
        ({"num_steps": 10**9, "total_timesteps": 10**12}, ["rollout storage", "GiB", "--num-envs or --num-steps"]),
    ],
)
def test_validate_args_names_the_bad_value(overrides, expected):
    """The same checks in-process (the command line path is covered above): one line naming the value."""
    from cleanrl.ppo_continuous_action_envpool import validate_args

    with pytest.raises(SystemExit) as error:
        validate_args(Args(**overrides))
    message = str(error.value.code)
    assert message.startswith("error: ") and "\n" not in message
    for fragment in expected:
        assert fragment in message, (fragment, message)
    assert "Ant-v5" not in message  # an Atari id gets no MuJoCo "did you mean"
    validate_args(Args())  # the defaults pass


def test_runtime_fields_are_not_flags():
    import tyro

    for field in ("--batch-size", "--minibatch-size", "--num-iterations"):
        with pytest.raises(SystemExit):
            tyro.cli(Args, args=[field, "5"])


def test_one_step_rollouts_train_without_warnings(tmp_path):
    """Trial 31: at --num-steps 1 an iteration after an episode boundary holds one valid row, and the explained
    variance's var() of it printed torch's "degrees of freedom is <= 0" warning to the user; it is NaN, quietly."""
    flags = ["--env-id", "Hopper-v4", "--num-envs", "2", "--num-steps", "1", "--num-minibatches", "1"]
    result = run_script(SCRIPT, *flags, "--total-timesteps", "64", "--log-dir", str(tmp_path))
    assert result.returncode == 0 and "Warning" not in result.stderr, result.stderr

"""The tests TD3 and DDPG share (the same replay, exploration, clipping and resume code), written once. Each test
file imports them by name (pytest collects them there) with the `family` fixture, through which they read that
file's module: `SCRIPT`, `TAGS` and `RUN_DEFINING_FLAG` (a flag and value a resume must refuse). Also the networks with
known outputs that both files' targets and losses by hand are checked on, given the script's classes."""

import os
import shutil

import numpy as np
import pytest
import torch
from helpers import assert_one_error_line, only_run_dir, read_scalars, run_script


@pytest.fixture(scope="module")
def family(request):
    """The test module that imported these tests."""
    return request.module


# ---- networks with known outputs, for the targets and losses by hand ----


def linear_critics(QNetworks: type, obs_dim: int, action_dim: int, coefs: list[list[float]], biases: list[float]):
    """A script's QNetworks whose critic i is the linear function coefs[i] . [obs, action] + biases[i]: the first layer holds x
    and -x, ReLU keeps the positive one, the second layer passes both on, the last takes coefs . (relu(x) - relu(-x))."""
    n = obs_dim + action_dim
    critic = QNetworks(obs_dim, action_dim, num_critics=len(coefs))
    with torch.no_grad():
        for weight, bias in zip(critic.weights, critic.biases):
            weight.zero_()
            bias.zero_()
        critic.weights[0][:, :, :n] = torch.eye(n)
        critic.weights[0][:, :, n : 2 * n] = -torch.eye(n)
        critic.weights[1][:, : 2 * n, : 2 * n] = torch.eye(2 * n)
        for i, (coef, bias) in enumerate(zip(coefs, biases)):
            critic.weights[2][i, :n, 0] = torch.tensor(coef)
            critic.weights[2][i, n : 2 * n, 0] = -torch.tensor(coef)
            critic.biases[2][i, 0, 0] = bias
    return critic


def constant_actor(Actor: type, obs_dim: int, low: np.ndarray, high: np.ndarray, value: np.ndarray):
    """A script's Actor whose action is `value` for every observation: head weights 0, head bias atanh of the scaled value."""
    actor = Actor(obs_dim, low, high)
    with torch.no_grad():
        actor.fc_mu.weight.zero_()
        actor.fc_mu.bias.copy_(torch.atanh(torch.tensor((value - (high + low) / 2) / ((high - low) / 2))))
    return actor


# ---- short real runs: tags, determinism, exploration ----

# Pendulum with 100-step episodes, learning from step 300 to 1,000, with a huge exploration noise (std 5 half-ranges):
# almost every action the actor proposes lies outside the bounds and must be clipped before the env sees it.
SHORT = ["--env-id", "Pendulum-v1", "--max-episode-steps", "100", "--total-timesteps", "1000", "--learning-starts", "300"]
# a minibatch of 32, not 256: the update is most of a run's time, and these tests count steps, updates and rows
SHORT += ["--exploration-noise", "5.0", "--seed", "3", "--torch-threads", "1", "--batch-size", "32"]


@pytest.fixture(scope="module")
def short_runs(family, tmp_path_factory):
    """Two runs of SHORT, the first saving its model, the second its checkpoint without the buffer (flags that do not
    change training): (run folders, their scalars)."""
    run_dirs, scalars = [], []
    for i, flags in enumerate([["--save-model"], ["--no-checkpoint-buffer"]]):
        log_dir = tmp_path_factory.mktemp(f"short{i}")
        result = run_script(family.SCRIPT, *SHORT, *flags, "--log-dir", str(log_dir))
        assert result.returncode == 0, result.stderr[-3000:]
        run_dirs.append(only_run_dir(log_dir))
        scalars.append(read_scalars(run_dirs[-1]))
    return run_dirs, scalars


def test_same_seed_gives_identical_losses(family, short_runs):
    first, second = short_runs[1]
    for tag in sorted(family.TAGS - {"charts/SPS"}):
        assert first[tag] == second[tag], tag


def test_the_env_executes_the_stored_action_inside_the_bounds(short_runs):
    """Every stored action is inside [-2, 2], and Pendulum's dynamics (thdot' = thdot + (15 sin th + 3 u) 0.05,
    reward -(th^2 + 0.1 thdot^2 + 0.001 u^2)) hold with the stored u: the env ran exactly that action. EnvPool clips
    torques to [-2, 2] itself, so a buffer holding the unclipped action would break the dynamics here."""
    checkpoint = torch.load(os.path.join(short_runs[0][0], "checkpoint.pt"), weights_only=True)
    rows = checkpoint["replay_buffer"]["rows"].double().numpy()
    assert len(rows) >= 980  # 1,000 steps less the stale step after each of the 9 boundaries
    obs, actions, rewards, next_obs = rows[:, :3], rows[:, 3], rows[:, 4], rows[:, 5:8]
    assert np.all(np.abs(actions) <= 2.0)
    assert np.mean(np.abs(actions[400:]) == 2.0) > 0.8  # the noisy actor's actions, clipped to the bounds
    assert np.mean(np.abs(actions[:290]) == 2.0) < 0.05  # uniform random actions before learning starts
    theta = np.arctan2(obs[:, 1], obs[:, 0])
    predicted = obs[:, 2] + (15 * obs[:, 1] + 3 * actions) * 0.05
    free = np.abs(predicted) < 7.9  # the angular velocity is clipped at +-8
    assert free.sum() > 500
    np.testing.assert_allclose(next_obs[free, 2], predicted[free], atol=1e-4)
    np.testing.assert_allclose(rewards, -(theta**2 + 0.1 * obs[:, 2] ** 2 + 0.001 * actions**2), atol=1e-4)


# ---- checkpoint and resume ----


def adam_steps(optimizer_state: dict) -> int:
    return int(next(iter(optimizer_state["state"].values()))["step"])


def test_resume_with_the_buffer_continues_the_step_counter(family, short_runs, tmp_path):
    """The 1,000-step run resumed to 1,600: counters, buffer and both optimisers continue (600 more critic updates,
    300 actor updates), a new --learning-rate reaches both optimisers, and a run-defining flag cannot change."""
    run_dir = str(tmp_path / "run")
    shutil.copytree(short_runs[0][0], run_dir)
    path = os.path.join(run_dir, "checkpoint.pt")
    half = torch.load(path, weights_only=True)
    assert (half["iteration"], half["global_step"]) == (1000, 1000)
    assert adam_steps(half["q_optimizer_state_dict"]) == 700 and adam_steps(half["optimizer_state_dict"]) == 350
    for target, online in (("target_actor_state_dict", "model_state_dict"), ("target_critic_state_dict", "critic_state_dict")):
        moved = [name for name, value in half[target].items() if not torch.equal(value, half[online][name])]
        assert moved == [name for name in half[online] if "action_" not in name], target  # Polyak: near, not equal

    flag, value = family.RUN_DEFINING_FLAG
    assert_one_error_line(run_script(family.SCRIPT, "--resume", path, flag, value), [flag, "cannot change"])
    result = run_script(family.SCRIPT, "--resume", path, "--total-timesteps", "1600", "--learning-rate", "5e-4")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "at iteration 1000 (global step 1,000)" in result.stdout
    assert f"replay buffer: {len(half['replay_buffer']['rows']):,} transitions restored" in result.stdout
    final = torch.load(path, weights_only=True)
    assert (final["iteration"], final["global_step"], final["replay_buffer"]["env_steps"]) == (1600, 1600, 1600)
    assert adam_steps(final["q_optimizer_state_dict"]) == 1300 and adam_steps(final["optimizer_state_dict"]) == 650
    for optimizer in ("optimizer_state_dict", "q_optimizer_state_dict"):
        assert final[optimizer]["param_groups"][0]["lr"] == 5e-4, optimizer
    returns = read_scalars(run_dir)["charts/episodic_return"]
    assert any(step > 1000 for step, _ in returns) and all(step <= 1600 for step, _ in returns)


def test_resume_without_the_buffer_refills_it_first(family, short_runs, tmp_path):
    """--no-checkpoint-buffer saves an empty buffer; the resumed run refills --learning-starts (300) steps before it
    trains again: 1,000 -> 1,600 gives 300 critic updates, not 600."""
    run_dir = str(tmp_path / "run")
    shutil.copytree(short_runs[0][1], run_dir)
    path = os.path.join(run_dir, "checkpoint.pt")
    half = torch.load(path, weights_only=True)
    assert half["replay_buffer"] == {} and adam_steps(half["q_optimizer_state_dict"]) == 700
    result = run_script(family.SCRIPT, "--resume", path, "--total-timesteps", "1600")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "replay buffer: refilled from empty" in result.stdout
    final = torch.load(path, weights_only=True)
    assert (final["iteration"], final["global_step"], final["replay_buffer"]) == (1600, 1600, {})
    assert adam_steps(final["q_optimizer_state_dict"]) == 700 + 300

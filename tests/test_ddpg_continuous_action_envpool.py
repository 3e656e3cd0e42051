"""Tests of cleanrl/ddpg_continuous_action_envpool.py (DDPG through EnvPool): the target (one critic, no smoothing
noise) and the actor's loss by hand, exploration inside the bounds (the env executes the very action the buffer
stores, checked against Pendulum's dynamics), short real runs (tags, determinism), resume with and without the buffer,
the saved model played by cleanrl_utils.evaluate, and bad input."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import REPO, assert_one_error_line, one_line_exit, only_run_dir, read_scalars, run_script

from cleanrl.ddpg_continuous_action_envpool import (
    Actor,
    Args,
    QNetworks,
    actor_loss,
    critic_loss,
    make_env,
    td_target,
    validate_args,
)

SCRIPT = "ddpg_continuous_action_envpool"
TAGS = {"charts/episodic_return", "charts/episodic_length", "charts/SPS", "losses/actor_loss", "losses/qf_loss"}
TAGS |= {"losses/qf1_loss", "losses/qf1_values"}


# ---- the target and the losses by hand ----


def linear_critics(obs_dim: int, action_dim: int, coefs: list[list[float]], biases: list[float]) -> QNetworks:
    """QNetworks whose critic i is the linear function coefs[i] . [obs, action] + biases[i]: the first layer holds x
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


def constant_actor(obs_dim: int, low: np.ndarray, high: np.ndarray, value: np.ndarray) -> Actor:
    """An Actor whose action is `value` for every observation: head weights 0, head bias atanh of the scaled value."""
    actor = Actor(obs_dim, low, high)
    with torch.no_grad():
        actor.fc_mu.weight.zero_()
        actor.fc_mu.bias.copy_(torch.atanh(torch.tensor((value - (high + low) / 2) / ((high - low) / 2))))
    return actor


# Two observation dims, two action dims with asymmetric bounds (half-ranges 1 and 2.5, centres 0 and 0.5).
LOW, HIGH = np.array([-1.0, -2.0]), np.array([1.0, 3.0])
MU_NEXT = np.array([0.9, 2.0])  # the target actor's action
COEFS, BIASES = [[1.0, -1.0, 2.0, 0.5]], [0.25]  # Q' = s0 - s1 + 2 a0 + 0.5 a1 + 0.25
ONLINE_COEFS, ONLINE_BIASES = [[0.5, 0.0, 0.0, 1.0]], [1.0]


def tiny_batch():
    rng = np.random.default_rng(0)
    obs, next_obs = rng.uniform(-3, 3, (8, 2)), rng.uniform(-3, 3, (8, 2))
    actions, rewards = rng.uniform(LOW, HIGH, (8, 2)), rng.uniform(-2, 2, 8)
    dones = np.array([0, 1, 0, 0, 1, 0, 0, 0], dtype=np.float64)
    return obs, actions, rewards, next_obs, dones


def test_td_target_by_hand():
    """y = r + gamma (1 - done) Q'(s', mu'(s')): done = 1 gives the reward alone, done = 0 bootstraps from the target
    critic at the target actor's own action, and no noise is drawn (torch's RNG is untouched)."""
    obs, actions, rewards, next_obs, dones = tiny_batch()
    target_actor = constant_actor(2, LOW, HIGH, MU_NEXT)
    target_critic = linear_critics(2, 2, COEFS, BIASES)
    as_torch = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
    rng_state = torch.get_rng_state()
    with torch.no_grad():
        y = td_target(target_actor, target_critic, *map(as_torch, (rewards, next_obs, dones)), 0.9)
    assert torch.equal(torch.get_rng_state(), rng_state)
    q_next = np.concatenate([next_obs, np.broadcast_to(MU_NEXT, (8, 2))], 1) @ np.array(COEFS[0]) + BIASES[0]
    np.testing.assert_allclose(y.numpy(), rewards + 0.9 * (1 - dones) * q_next, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        y.numpy()[dones == 1], rewards[dones == 1], rtol=1e-5, atol=1e-6
    )  # no bootstrap at a termination
    assert np.all(np.abs(y.numpy() - rewards)[dones == 0] > 0.1)  # and a real one elsewhere


def test_critic_loss_regresses_the_critic_on_the_target():
    obs, actions, rewards, next_obs, dones = (torch.tensor(x, dtype=torch.float32) for x in tiny_batch())
    target_actor = constant_actor(2, LOW, HIGH, MU_NEXT)
    critic, target_critic = linear_critics(2, 2, ONLINE_COEFS, ONLINE_BIASES), linear_critics(2, 2, COEFS, BIASES)
    loss, stats = critic_loss(target_actor, critic, target_critic, (obs, actions, rewards, next_obs, dones), 0.9)
    with torch.no_grad():
        y = td_target(target_actor, target_critic, rewards, next_obs, dones, 0.9)
    q1 = torch.cat([obs, actions], 1).double() @ torch.tensor(ONLINE_COEFS[0]).double() + ONLINE_BIASES[0]
    qf1_loss = ((q1 - y) ** 2).mean().item()
    assert loss.item() == pytest.approx(qf1_loss, rel=1e-5)
    assert set(stats) == {"qf1_loss", "qf1_values"}
    assert stats["qf1_loss"].item() == pytest.approx(qf1_loss, rel=1e-5)
    assert stats["qf1_values"].item() == pytest.approx(q1.mean().item(), rel=1e-5)
    assert all(not value.requires_grad for value in stats.values())
    loss.backward()
    assert all(p.grad is not None for p in critic.parameters())
    assert all(p.grad is None for p in [*target_critic.parameters(), *target_actor.parameters()])  # the target is fixed


def test_actor_loss_is_minus_q_and_leaves_the_critic_alone():
    obs = torch.tensor(tiny_batch()[0], dtype=torch.float32)
    actor = constant_actor(2, LOW, HIGH, np.array([0.3, -1.0]))
    critic = linear_critics(2, 2, [[1.0, 0.0, 2.0, 0.0]], [10.0])
    loss = actor_loss(actor, critic, obs)
    assert loss.item() == pytest.approx(-(obs[:, 0] + 2 * 0.3 + 10.0).mean().item(), rel=1e-5)
    loss.backward()
    assert all(p.grad is None for p in critic.parameters())
    assert actor.fc_mu.bias.grad[0] < 0  # raising a0 raises Q = ... + 2 a0, so the loss falls


# ---- short real runs: tags, determinism, exploration ----

# Pendulum with 100-step episodes, learning from step 300 to 1,000, with a huge exploration noise (std 5 half-ranges):
# almost every action the actor proposes lies outside the bounds and must be clipped before the env sees it.
SHORT = ["--env-id", "Pendulum-v1", "--max-episode-steps", "100", "--total-timesteps", "1000", "--learning-starts", "300"]
SHORT += ["--exploration-noise", "5.0", "--seed", "3", "--torch-threads", "1"]


@pytest.fixture(scope="module")
def short_runs(tmp_path_factory):
    """Two runs of SHORT, the first saving its model, the second its checkpoint without the buffer (flags that do not
    change training): (run folders, their scalars)."""
    run_dirs, scalars = [], []
    for i, flags in enumerate([["--save-model"], ["--no-checkpoint-buffer"]]):
        log_dir = tmp_path_factory.mktemp(f"short{i}")
        result = run_script(SCRIPT, *SHORT, *flags, "--log-dir", str(log_dir))
        assert result.returncode == 0, result.stderr[-3000:]
        run_dirs.append(only_run_dir(log_dir))
        scalars.append(read_scalars(run_dirs[-1]))
    return run_dirs, scalars


def test_short_run_logs_every_tag(short_runs):
    scalars = short_runs[1][0]
    assert TAGS <= set(scalars), TAGS - set(scalars)
    assert [step for step, _ in scalars["losses/qf1_loss"]] == [1000]  # every 1,000 steps once training runs
    assert scalars["losses/qf_loss"] == scalars["losses/qf1_loss"]  # one critic
    assert not any("qf2" in tag for tag in scalars)
    assert all(length == 100 for _, length in scalars["charts/episodic_length"])  # Pendulum only truncates


def test_same_seed_gives_identical_losses(short_runs):
    first, second = short_runs[1]
    for tag in sorted(TAGS - {"charts/SPS"}):
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


def test_resume_with_the_buffer_continues_the_step_counter(short_runs, tmp_path):
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

    assert_one_error_line(run_script(SCRIPT, "--resume", path, "--gamma", "0.9"), ["--gamma", "cannot change"])
    result = run_script(SCRIPT, "--resume", path, "--total-timesteps", "1600", "--learning-rate", "5e-4")
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


def test_resume_without_the_buffer_refills_it_first(short_runs, tmp_path):
    """--no-checkpoint-buffer saves an empty buffer; the resumed run refills --learning-starts (300) steps before it
    trains again: 1,000 -> 1,600 gives 300 critic updates, not 600."""
    run_dir = str(tmp_path / "run")
    shutil.copytree(short_runs[0][1], run_dir)
    path = os.path.join(run_dir, "checkpoint.pt")
    half = torch.load(path, weights_only=True)
    assert half["replay_buffer"] == {} and adam_steps(half["q_optimizer_state_dict"]) == 700
    result = run_script(SCRIPT, "--resume", path, "--total-timesteps", "1600")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "replay buffer: refilled from empty" in result.stdout
    final = torch.load(path, weights_only=True)
    assert (final["iteration"], final["global_step"], final["replay_buffer"]) == (1600, 1600, {})
    assert adam_steps(final["q_optimizer_state_dict"]) == 700 + 300


# ---- the saved model ----


def test_saved_model_evaluates_the_actor_without_noise(short_runs):
    """The evaluator's command line works, and it plays the actor's own action: the same returns as a rollout of
    the saved actor by hand in make_env's envs (same seed, one episode per env)."""
    model_path = os.path.join(short_runs[0][0], f"{SCRIPT}.cleanrl_model")
    command = [sys.executable, "-m", "cleanrl_utils.evaluate", "--model-path", model_path, "--episodes", "2", "--seed", "5"]
    result = subprocess.run(
        [*command, "--no-cuda", "--torch-threads", "1"], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[2].startswith("mean return over 2 episodes: ")
    printed = [float(line.split("return ")[1]) for line in lines[:2]]

    checkpoint = torch.load(model_path, weights_only=True)
    envs = make_env("Pendulum-v1", 2, 5, checkpoint["args"]["max_episode_steps"])
    actor = Actor(3, envs.single_action_space.low, envs.single_action_space.high)
    actor.load_state_dict(checkpoint["model_state_dict"])
    obs, _ = envs.reset()
    returns, finished = np.zeros(2), np.zeros(2, dtype=bool)
    while not finished.all():
        with torch.no_grad():
            obs, rewards, terminations, truncations, _ = envs.step(actor(torch.as_tensor(obs, dtype=torch.float32)).numpy())
        returns += rewards * ~finished
        finished |= terminations | truncations
    envs.close()
    np.testing.assert_allclose(printed, returns, atol=0.01)  # printed with two decimals


# ---- learning ----

# TD3's learning-test settings (tests/test_td3_continuous_action_envpool.py): CleanRL's DDPG settings except
# --learning-starts 1000, --learning-rate 1e-3 and --batch-size 128, 10,000 steps (49 episodes), fp32 and one thread
# (as calibrated, on every CPU kind). Calibration on a 2-core AMD EPYC (Zen 4), 60 s each: last-10 training returns
# -454.2, -170.1, -173.1 on seeds 1, 2, 3 (first-5 means -1,430, -1,128, -1,347; random play about -1,400). DDPG
# without TD3's twin critics and delayed actor is the less steady learner: the bound passes every calibrated seed.
LEARN = ["--env-id", "Pendulum-v1", "--total-timesteps", "10000", "--learning-starts", "1000", "--learning-rate", "1e-3"]
LEARN += ["--batch-size", "128", "--torch-threads", "1", "--precision", "fp32"]


def test_pendulum_learns(tmp_path):
    result = run_script(SCRIPT, *LEARN, "--seed", "2", "--log-dir", str(tmp_path), timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    returns = [value for _, value in read_scalars(only_run_dir(tmp_path))["charts/episodic_return"]]
    assert np.mean(returns[:5]) < -800, returns[:5]  # random actions first
    assert np.mean(returns[-10:]) >= -500, returns[-10:]


# ---- bad input ----


def test_bad_env_id_on_the_command_line_gives_one_line_before_any_run_folder(tmp_path):
    result = run_script(SCRIPT, "--env-id", "Pong-v5", "--log-dir", str(tmp_path / "runs"), timeout=120)
    assert_one_error_line(result, ["'Pong-v5'", "Atari", "MuJoCo", "Pendulum-v1"])
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "flags,fragments",
    [
        (dict(exploration_noise=-0.5), ["--exploration-noise", "-0.5", ">= 0"]),
        (dict(batch_size=512, buffer_size=100), ["--batch-size 512", "--buffer-size 100"]),
        (dict(policy_frequency=0), ["--policy-frequency", "0"]),
        (dict(tau=1.5), ["--tau", "(0, 1]"]),
        (dict(env_id="Hoper-v4"), ["'Hoper-v4'", "Hopper-v4"]),
    ],
)
def test_bad_input_gives_one_line(flags, fragments):
    one_line_exit(lambda: validate_args(Args(**{"env_id": "Pendulum-v1", **flags})), *fragments)


def test_no_target_policy_smoothing_flags():
    assert not hasattr(Args(), "policy_noise") and not hasattr(Args(), "noise_clip")

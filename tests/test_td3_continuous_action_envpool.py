"""Tests of cleanrl/td3_continuous_action_envpool.py (TD3 through EnvPool): the clipped double-Q target with target
policy smoothing and the actor's loss by hand, exploration inside the bounds (the env executes the very action the
buffer stores, checked against Pendulum's dynamics), short real runs (tags, determinism), resume with and without
the buffer, a Pendulum learning run whose saved model evaluates, and bad input."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import REPO, assert_one_error_line, one_line_exit, only_run_dir, read_scalars, run_script

from cleanrl.td3_continuous_action_envpool import Actor, Args, QNetworks, actor_loss, critic_loss, td_target, validate_args

SCRIPT = "td3_continuous_action_envpool"
TAGS = {"charts/episodic_return", "charts/episodic_length", "charts/SPS", "losses/actor_loss", "losses/qf_loss"}
TAGS |= {"losses/qf1_loss", "losses/qf2_loss", "losses/qf1_values", "losses/qf2_values"}


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
MU_NEXT = np.array([0.9, 2.0])  # the target actor's action: noise pushes it past the upper bounds
COEFS, BIASES = [[1.0, 0.0, 2.0, 0.0], [0.0, 1.0, 0.0, -1.0]], [0.0, 4.0]  # Q1 = s0 + 2 a0, Q2 = s1 - a1 + 4
ONLINE_COEFS, ONLINE_BIASES = [[0.5, 0.0, 0.0, 1.0], [0.0, -1.0, 1.0, 0.0]], [1.0, -0.5]


def tiny_batch():
    rng = np.random.default_rng(0)
    obs, next_obs = rng.uniform(-3, 3, (8, 2)), rng.uniform(-3, 3, (8, 2))
    actions, rewards = rng.uniform(LOW, HIGH, (8, 2)), rng.uniform(-2, 2, 8)
    dones = np.array([0, 1, 0, 0, 1, 0, 0, 0], dtype=np.float64)
    return obs, actions, rewards, next_obs, dones


def expected_target(rewards, next_obs, dones, eps, gamma, policy_noise, noise_clip):
    """The TD3 target in float64 numpy, from the standard normal draws `eps` (8, 2)."""
    scale, noise = (HIGH - LOW) / 2, np.clip(eps * policy_noise, -noise_clip, noise_clip)
    next_actions = np.clip(MU_NEXT + noise * scale, LOW, HIGH)
    x = np.concatenate([next_obs, next_actions], 1)
    q1, q2 = x @ np.array(COEFS[0]) + BIASES[0], x @ np.array(COEFS[1]) + BIASES[1]
    return rewards + gamma * (1 - dones) * np.minimum(q1, q2), noise, next_actions, q1 < q2


@pytest.mark.parametrize("policy_noise,noise_clip", [(1.0, 0.5), (0.0, 0.5)])
def test_td_target_by_hand(policy_noise, noise_clip):
    """y = r + gamma (1 - done) min(Q1', Q2')(s', clamp(mu'(s') + clip(noise) * scale)): done = 1 gives the reward
    alone; the noise is clipped at noise_clip; the next action is clamped to the bounds; the smaller critic counts."""
    obs, actions, rewards, next_obs, dones = tiny_batch()
    target_actor = constant_actor(2, LOW, HIGH, MU_NEXT)
    target_critic = linear_critics(2, 2, COEFS, BIASES)
    as_torch = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
    torch.manual_seed(7)
    with torch.no_grad():
        y = td_target(target_actor, target_critic, *map(as_torch, (rewards, next_obs, dones)), 0.9, policy_noise, noise_clip)
    torch.manual_seed(7)
    eps = torch.randn(8, 2).double().numpy()  # the draws td_target made
    expected, noise, next_actions, q1_smaller = expected_target(rewards, next_obs, dones, eps, 0.9, policy_noise, noise_clip)
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y.numpy()[dones == 1], rewards[dones == 1], rtol=1e-6)  # no bootstrap at a termination
    assert q1_smaller.any() and not q1_smaller.all()  # the min picks either critic in this batch
    if policy_noise > 0:  # the batch exercises every clip: noise at +-noise_clip, actions at their upper bound
        assert (np.abs(noise) == noise_clip).any() and (np.abs(noise) < noise_clip).any()
        assert (next_actions == HIGH).any() and (next_actions < HIGH).any()
    else:
        np.testing.assert_allclose(next_actions, np.broadcast_to(MU_NEXT, (8, 2)))


def test_critic_loss_regresses_both_critics_on_one_target():
    obs, actions, rewards, next_obs, dones = (torch.tensor(x, dtype=torch.float32) for x in tiny_batch())
    target_actor = constant_actor(2, LOW, HIGH, MU_NEXT)
    critic, target_critic = linear_critics(2, 2, ONLINE_COEFS, ONLINE_BIASES), linear_critics(2, 2, COEFS, BIASES)
    torch.manual_seed(3)
    loss, stats = critic_loss(target_actor, critic, target_critic, (obs, actions, rewards, next_obs, dones), 0.9, 0.2, 0.5)
    torch.manual_seed(3)
    with torch.no_grad():
        y = td_target(target_actor, target_critic, rewards, next_obs, dones, 0.9, 0.2, 0.5)
    x = torch.cat([obs, actions], 1).double()
    q1 = x @ torch.tensor(ONLINE_COEFS[0]).double() + ONLINE_BIASES[0]
    q2 = x @ torch.tensor(ONLINE_COEFS[1]).double() + ONLINE_BIASES[1]
    qf1_loss, qf2_loss = ((q1 - y) ** 2).mean().item(), ((q2 - y) ** 2).mean().item()
    assert loss.item() == pytest.approx(qf1_loss + qf2_loss, rel=1e-5)
    assert stats["qf1_loss"].item() == pytest.approx(qf1_loss, rel=1e-5)
    assert stats["qf2_loss"].item() == pytest.approx(qf2_loss, rel=1e-5)
    assert stats["qf1_values"].item() == pytest.approx(q1.mean().item(), rel=1e-5)
    assert stats["qf2_values"].item() == pytest.approx(q2.mean().item(), rel=1e-5)
    assert all(not value.requires_grad for value in stats.values())
    loss.backward()
    assert all(p.grad is not None for p in critic.parameters())
    assert all(p.grad is None for p in [*target_critic.parameters(), *target_actor.parameters()])  # the target is fixed


def test_actor_loss_is_minus_q1_and_leaves_the_critic_alone():
    """-Q1(s, mu(s)), not the min of the critics (here Q2 < Q1 everywhere): the gradient reaches the actor only."""
    obs = torch.tensor(tiny_batch()[0], dtype=torch.float32)
    actor = constant_actor(2, LOW, HIGH, np.array([0.3, -1.0]))
    critic = linear_critics(2, 2, [[1.0, 0.0, 2.0, 0.0], [1.0, 0.0, 2.0, 0.0]], [10.0, 0.0])
    loss = actor_loss(actor, critic, obs)
    q1 = obs[:, 0] + 2 * 0.3 + 10.0
    assert loss.item() == pytest.approx(-q1.mean().item(), rel=1e-5)
    loss.backward()
    assert all(p.grad is None for p in critic.parameters())
    assert actor.fc_mu.bias.grad[0] < 0  # raising a0 raises Q1 = ... + 2 a0, so the loss falls


# ---- short real runs: tags, determinism, exploration ----

# Pendulum with 100-step episodes, learning from step 300 to 1,000, with a huge exploration noise (std 5 half-ranges):
# almost every action the actor proposes lies outside the bounds and must be clipped before the env sees it.
SHORT = ["--env-id", "Pendulum-v1", "--max-episode-steps", "100", "--total-timesteps", "1000", "--learning-starts", "300"]
SHORT += ["--exploration-noise", "5.0", "--seed", "3", "--torch-threads", "1"]


@pytest.fixture(scope="module")
def short_runs(tmp_path_factory):
    """Two runs of SHORT, the second saving its checkpoint without the buffer (a flag that does not change training):
    (run folders, their scalars)."""
    run_dirs, scalars = [], []
    for i, flags in enumerate([[], ["--no-checkpoint-buffer"]]):
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
    qf = dict(scalars["losses/qf_loss"])[1000]
    assert qf == pytest.approx((dict(scalars["losses/qf1_loss"])[1000] + dict(scalars["losses/qf2_loss"])[1000]) / 2)
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

    assert_one_error_line(run_script(SCRIPT, "--resume", path, "--noise-clip", "0.1"), ["--noise-clip", "cannot change"])
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


# ---- learning, and the saved model ----

# CleanRL's TD3 settings except --learning-starts 1000 (not 25,000), --learning-rate 1e-3 (not 3e-4) and --batch-size
# 128 (not 256; a quicker update), 10,000 steps (49 episodes). Seeds 1, 2, 3 (nice -n 19, one at a time, on a 2-core
# machine busy with other runs; 55 s each): last-10 training returns -130.5, -161.1, -172.8, where random play scores
# about -1,400. With CleanRL's 3e-4 and 256, seed 1 reached only -240 in 10,000 steps (72 s). Seed 1's saved actor
# evaluates (10 episodes, seed 10,000) to -199, its first two episodes to -132 and -338.
LEARN = ["--env-id", "Pendulum-v1", "--total-timesteps", "10000", "--learning-starts", "1000", "--learning-rate", "1e-3"]
LEARN += ["--batch-size", "128", "--torch-threads", "1", "--save-model", "--precision", "fp32"]  # fp32: as calibrated


@pytest.fixture(scope="module")
def pendulum_run(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("pendulum")
    result = run_script(SCRIPT, *LEARN, "--seed", "1", "--log-dir", str(log_dir), timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return only_run_dir(log_dir)


def test_pendulum_learns(pendulum_run):
    returns = [value for _, value in read_scalars(pendulum_run)["charts/episodic_return"]]
    assert np.mean(returns[:5]) < -800  # random actions first
    assert np.mean(returns[-10:]) >= -250, returns[-10:]


def test_saved_model_evaluates_deterministically(pendulum_run):
    model_path = os.path.join(pendulum_run, f"{SCRIPT}.cleanrl_model")
    command = [sys.executable, "-m", "cleanrl_utils.evaluate", "--model-path", model_path, "--episodes", "2"]
    result = subprocess.run(
        [*command, "--no-cuda", "--torch-threads", "1"], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("episode 0: return") and lines[1].startswith("episode 1: return")
    assert lines[2].startswith("mean return over 2 episodes: ")
    assert float(lines[2].split(": ")[1].split()[0]) > -700  # the learnt policy, without noise (random play: -1,400)


# ---- bad input ----


def test_bad_env_id_on_the_command_line_gives_one_line_before_any_run_folder(tmp_path):
    result = run_script(SCRIPT, "--env-id", "Pong-v5", "--log-dir", str(tmp_path / "runs"), timeout=120)
    assert_one_error_line(result, ["'Pong-v5'", "Atari", "MuJoCo", "Pendulum-v1"])
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "flags,fragments",
    [
        (dict(policy_noise=-0.1), ["--policy-noise", "-0.1", ">= 0"]),
        (dict(noise_clip=-1.0), ["--noise-clip", "-1.0", ">= 0"]),
        (dict(exploration_noise=-0.5), ["--exploration-noise", "-0.5", ">= 0"]),
        (dict(batch_size=512, buffer_size=100), ["--batch-size 512", "--buffer-size 100"]),
        (dict(policy_frequency=0), ["--policy-frequency", "0"]),
        (dict(learning_rate=0.0), ["--learning-rate", "0.0"]),
        (dict(env_id="Hoper-v4"), ["'Hoper-v4'", "Hopper-v4"]),
    ],
)
def test_bad_input_gives_one_line(flags, fragments):
    one_line_exit(lambda: validate_args(Args(**{"env_id": "Pendulum-v1", **flags})), *fragments)

"""Tests of cleanrl/td3_continuous_action_envpool.py (TD3 through EnvPool): the clipped double-Q target with target
policy smoothing and the actor's loss by hand, exploration inside the bounds (the env executes the very action the
buffer stores, checked against Pendulum's dynamics), short real runs (tags, determinism), resume with and without
the buffer, a Pendulum learning run whose saved model evaluates, and bad input."""

import os
import sys

import numpy as np
import pytest
import torch
from deterministic_actor_family import (  # noqa: F401 (shared tests and fixtures, collected here)
    SHORT,
    adam_steps,
    constant_actor,
    family,
    linear_critics,
    short_runs,
    test_resume_with_the_buffer_continues_the_step_counter,
    test_resume_without_the_buffer_refills_it_first,
    test_same_seed_gives_identical_losses,
    test_the_env_executes_the_stored_action_inside_the_bounds,
)
from helpers import assert_one_error_line, one_line_exit, read_scalars, run_python, run_script

from cleanrl.td3_continuous_action_envpool import Actor, Args, QNetworks, actor_loss, critic_loss, td_target, validate_args

SCRIPT = "td3_continuous_action_envpool"
TAGS = {"charts/episodic_return", "charts/episodic_length", "charts/SPS", "losses/actor_loss", "losses/qf_loss"}
TAGS |= {"losses/qf1_loss", "losses/qf2_loss", "losses/qf1_values", "losses/qf2_values"}


# ---- the target and the losses by hand (networks with known outputs: deterministic_actor_family.py) ----

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
    target_actor = constant_actor(Actor, 2, LOW, HIGH, MU_NEXT)
    target_critic = linear_critics(QNetworks, 2, 2, COEFS, BIASES)
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
    target_actor = constant_actor(Actor, 2, LOW, HIGH, MU_NEXT)
    critic, target_critic = (
        linear_critics(QNetworks, 2, 2, ONLINE_COEFS, ONLINE_BIASES),
        linear_critics(QNetworks, 2, 2, COEFS, BIASES),
    )
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
    actor = constant_actor(Actor, 2, LOW, HIGH, np.array([0.3, -1.0]))
    critic = linear_critics(QNetworks, 2, 2, [[1.0, 0.0, 2.0, 0.0], [1.0, 0.0, 2.0, 0.0]], [10.0, 0.0])
    loss = actor_loss(actor, critic, obs)
    q1 = obs[:, 0] + 2 * 0.3 + 10.0
    assert loss.item() == pytest.approx(-q1.mean().item(), rel=1e-5)
    loss.backward()
    assert all(p.grad is None for p in critic.parameters())
    assert actor.fc_mu.bias.grad[0] < 0  # raising a0 raises Q1 = ... + 2 a0, so the loss falls


# ---- short real runs: tags, determinism, exploration ----

# The short runs, determinism, clipping and resume tests: deterministic_actor_family.py
RUN_DEFINING_FLAG = ("--noise-clip", "0.1")  # a resume refuses to change it


def test_short_run_logs_every_tag(short_runs):
    scalars = short_runs[1][0]
    assert TAGS <= set(scalars), TAGS - set(scalars)
    assert [step for step, _ in scalars["losses/qf1_loss"]] == [1000]  # every 1,000 steps once training runs
    qf = dict(scalars["losses/qf_loss"])[1000]
    assert qf == pytest.approx((dict(scalars["losses/qf1_loss"])[1000] + dict(scalars["losses/qf2_loss"])[1000]) / 2)
    assert all(length == 100 for _, length in scalars["charts/episodic_length"])  # Pendulum only truncates


# ---- learning, and the saved model ----

# CleanRL's TD3 settings except --learning-starts 1000 (not 25,000), --learning-rate 1e-3 (not 3e-4) and --batch-size
# 128 (not 256; a quicker update), 10,000 steps (49 episodes). Seeds 1, 2, 3 (nice -n 19, one at a time, on a 2-core
# machine busy with other runs; 55 s each): last-10 training returns -130.5, -161.1, -172.8, where random play scores
# about -1,400. With CleanRL's 3e-4 and 256, seed 1 reached only -240 in 10,000 steps (72 s). Seed 1's saved actor
# evaluates (10 episodes, seed 10,000) to -199, its first two episodes to -132 and -338.
LEARNING_RUN = [
    "--env-id",
    "Pendulum-v1",
    "--total-timesteps",
    "10000",
    "--learning-starts",
    "1000",
    "--learning-rate",
    "1e-3",
]
LEARNING_RUN += ["--batch-size", "128", "--torch-threads", "1", "--precision", "fp32", "--seed", "1"]  # fp32: as calibrated


def test_pendulum_learns(pendulum_run):
    returns = [value for _, value in read_scalars(pendulum_run)["charts/episodic_return"]]
    assert np.mean(returns[:5]) < -800  # random actions first
    assert np.mean(returns[-10:]) >= -250, returns[-10:]


def test_saved_model_evaluates_deterministically(pendulum_run):
    model_path = os.path.join(pendulum_run, f"{SCRIPT}.cleanrl_model")
    command = [sys.executable, "-m", "cleanrl_utils.evaluate", "--model-path", model_path, "--episodes", "2"]
    result = run_python([*command[1:], "--no-cuda", "--torch-threads", "1"], timeout=300)
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

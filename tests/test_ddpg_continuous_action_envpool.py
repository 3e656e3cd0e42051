"""Tests of cleanrl/ddpg_continuous_action_envpool.py (DDPG through EnvPool): the target (one critic, no smoothing
noise) and the actor's loss by hand, exploration inside the bounds (the env executes the very action the buffer
stores, checked against Pendulum's dynamics), short real runs (tags, determinism), resume with and without the buffer,
the saved model played by cleanrl_utils.evaluate, and bad input."""

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
from helpers import assert_one_error_line, one_line_exit, only_run_dir, read_scalars, run_python, run_script

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


# ---- the target and the losses by hand (networks with known outputs: deterministic_actor_family.py) ----

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
    target_actor = constant_actor(Actor, 2, LOW, HIGH, MU_NEXT)
    target_critic = linear_critics(QNetworks, 2, 2, COEFS, BIASES)
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
    target_actor = constant_actor(Actor, 2, LOW, HIGH, MU_NEXT)
    critic, target_critic = (
        linear_critics(QNetworks, 2, 2, ONLINE_COEFS, ONLINE_BIASES),
        linear_critics(QNetworks, 2, 2, COEFS, BIASES),
    )
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
    actor = constant_actor(Actor, 2, LOW, HIGH, np.array([0.3, -1.0]))
    critic = linear_critics(QNetworks, 2, 2, [[1.0, 0.0, 2.0, 0.0]], [10.0])
    loss = actor_loss(actor, critic, obs)
    assert loss.item() == pytest.approx(-(obs[:, 0] + 2 * 0.3 + 10.0).mean().item(), rel=1e-5)
    loss.backward()
    assert all(p.grad is None for p in critic.parameters())
    assert actor.fc_mu.bias.grad[0] < 0  # raising a0 raises Q = ... + 2 a0, so the loss falls


# ---- short real runs: tags, determinism, exploration ----

# The short runs, determinism, clipping and resume tests: deterministic_actor_family.py
RUN_DEFINING_FLAG = ("--gamma", "0.9")  # a resume refuses to change it


def test_short_run_logs_every_tag(short_runs):
    scalars = short_runs[1][0]
    assert TAGS <= set(scalars), TAGS - set(scalars)
    assert [step for step, _ in scalars["losses/qf1_loss"]] == [1000]  # every 1,000 steps once training runs
    assert scalars["losses/qf_loss"] == scalars["losses/qf1_loss"]  # one critic
    assert not any("qf2" in tag for tag in scalars)
    assert all(length == 100 for _, length in scalars["charts/episodic_length"])  # Pendulum only truncates


# ---- the saved model ----


def test_saved_model_evaluates_the_actor_without_noise(short_runs):
    """The evaluator's command line works, and it plays the actor's own action: the same returns as a rollout of
    the saved actor by hand in make_env's envs (same seed, one episode per env)."""
    model_path = os.path.join(short_runs[0][0], f"{SCRIPT}.cleanrl_model")
    command = [sys.executable, "-m", "cleanrl_utils.evaluate", "--model-path", model_path, "--episodes", "2", "--seed", "5"]
    result = run_python([*command[1:], "--no-cuda", "--torch-threads", "1"], timeout=300)
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

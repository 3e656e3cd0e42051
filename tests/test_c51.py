"""cleanrl/c51.py: the projection of the target distribution against a per-atom brute force (rewards past both ends
of the support, done masks, atoms landing exactly), the loss against a hand computation, the same-step replay wiring,
learning, evaluation, a resumed extension equal to the uninterrupted run, and bad input."""

import os

import numpy as np
import pytest
import torch
from bad_input import test_bad_input_gives_one_clear_line_and_writes_nothing  # noqa: F401 (collected here)
from c51_reference import brute_force_projection
from helpers import REPO, evaluate_cli_returns, only_run_dir, read_scalars, run_script

from cleanrl.c51 import QNetwork, project_distribution, td_loss

SCRIPT = "c51"
TAGS = {"charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/epsilon"}
TAGS |= {"losses/td_loss", "losses/q_values"}


@pytest.mark.parametrize("gamma", [0.99, 1.0, 0.5])
def test_projection_matches_a_per_atom_brute_force(gamma):
    rng = np.random.default_rng(3)
    batch, n_atoms, v_min, v_max = 64, 11, -10.0, 10.0
    next_pmfs = rng.dirichlet(np.ones(n_atoms) * 0.5, size=batch)
    rewards = rng.normal(0, 8, batch)
    rewards[:6] = [25.0, -25.0, 10.0, -10.0, 4.0, -6.0]  # past both ends, the ends themselves, exactly on atoms
    dones = rng.random(batch) < 0.3
    dones[:6] = [False, False, True, True, True, True]
    target = project_distribution(
        torch.as_tensor(next_pmfs, dtype=torch.float32),
        torch.as_tensor(rewards, dtype=torch.float32),
        torch.as_tensor(dones, dtype=torch.float32),
        gamma,
        torch.linspace(v_min, v_max, n_atoms),
    ).numpy()
    expected = brute_force_projection(next_pmfs, rewards, dones, gamma, v_min, v_max)
    np.testing.assert_allclose(target, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(target.sum(axis=1), 1.0, rtol=1e-5)  # no mass lost at the ends
    assert target[0, -1] == pytest.approx(1.0) and target[1, 0] == pytest.approx(1.0)  # clipped to the ends
    assert target[4, 7] == pytest.approx(1.0) and target[5, 2] == pytest.approx(1.0)  # done: all on r's atom


def test_loss_is_the_cross_entropy_with_the_target_networks_greedy_next_distribution():
    """By hand for a batch of 3: the target network's greedy next action (by mean return), its distribution
    projected, and the cross-entropy with Q's distribution of the action taken."""
    torch.manual_seed(0)
    q_network, target_network = QNetwork(4, 3, 21, -5.0, 5.0), QNetwork(4, 3, 21, -5.0, 5.0)
    obs, next_obs = torch.randn(3, 4), torch.randn(3, 4)
    actions, rewards, dones = torch.tensor([0, 2, 1]), torch.tensor([1.0, -2.0, 0.5]), torch.tensor([0.0, 1.0, 0.0])
    loss, q_taken = td_loss(q_network, target_network, obs, actions, rewards, next_obs, dones, 0.9)
    expected_loss, expected_q = 0.0, []
    atoms = np.linspace(-5, 5, 21)
    for i in range(3):
        with torch.no_grad():
            next_all = target_network.pmfs(next_obs[i : i + 1])[0].numpy()
            taken = q_network.pmfs(obs[i : i + 1])[0, actions[i]].numpy()
        greedy = int(np.argmax(next_all @ atoms))
        projected = brute_force_projection(next_all[greedy][None], [rewards[i].item()], [bool(dones[i])], 0.9, -5, 5)[0]
        expected_loss += -(projected * np.log(np.clip(taken, 1e-5, 1 - 1e-5))).sum() / 3
        expected_q.append(float(taken @ atoms))
    assert loss.item() == pytest.approx(expected_loss, rel=1e-5)
    np.testing.assert_allclose(q_taken.numpy(), expected_q, rtol=1e-5, atol=1e-6)


def test_the_replay_stores_real_next_observations_and_terminations_only():
    """The replay rules are dqn.py's, proven in tests/test_dqn.py against per-episode reconstructions: the script
    stores real_next_obs (info["final_obs"] at boundaries) and `term` as done, so truncations bootstrap."""
    source = open(os.path.join(REPO, "cleanrl", f"{SCRIPT}.py")).read()
    assert "rb.add(obs, real_next_obs(next_obs, term, trunc, info), actions, rewards, term)" in source


# CleanRL's CartPole settings made quick, as tests/test_dqn.py's: 25k steps (not 500k), learning from 1k (not 10k), a
# gradient step every 2 env steps (not 10), lr 1e-3, target copied every 100 steps, epsilon down to 0.05 over 20%.
# Seeds 1-3: last-20 training returns 428.1, 465.0, 315.0, evaluated (10 episodes, epsilon 0.05, seed 1) 500.0, 415.8,
# 500.0; about 30 s each on the 2-core EPYC with other work running. A fresh network scores about 20.
LEARNING_RUN = [
    "--seed",
    "1",
    "--env-id",
    "CartPole-v1",
    "--total-timesteps",
    "25000",
    "--learning-starts",
    "1000",
    "--train-frequency",
    "2",
]
LEARNING_RUN += ["--learning-rate", "1e-3", "--target-network-frequency", "100", "--exploration-fraction", "0.2"]
LEARN_BAR, EVAL_BAR = 150, 150


def test_cartpole_learns(learning_run):
    scalars = read_scalars(learning_run)
    assert TAGS <= set(scalars), TAGS - set(scalars)
    returns = [value for _, value in scalars["charts/episodic_return"]]
    assert np.mean(returns[:20]) < 50  # it starts from scratch, acting at random
    assert np.mean(returns[-20:]) >= LEARN_BAR, returns[-20:]


def test_saved_model_evaluates_epsilon_greedy(learning_run):
    returns = evaluate_cli_returns(os.path.join(learning_run, f"{SCRIPT}.cleanrl_model"), "--episodes", "10", "--seed", "1")
    assert len(returns) == 10 and np.mean(returns) >= EVAL_BAR, returns


SHORT = ["--env-id", "CartPole-v1", "--max-episode-steps", "40", "--learning-starts", "500", "--train-frequency", "2"]
SHORT += ["--target-network-frequency", "100", "--buffer-size", "3000", "--seed", "6"]


def test_a_resumed_extension_continues_the_uninterrupted_run(tmp_path):
    """4,000 steps at once, and the same in two parts: 2,000 steps with the whole run's epsilon schedule, then a
    --resume extending it to 4,000. Envs, replay buffer, both networks, Adam and RNG states continue where they
    were, so every scalar after the checkpoint equals the uninterrupted run's."""
    whole = run_script(
        SCRIPT, *SHORT, "--total-timesteps", "4000", "--exploration-fraction", "0.5", "--log-dir", str(tmp_path / "whole")
    )
    assert whole.returncode == 0, whole.stderr[-3000:]
    expected = read_scalars(only_run_dir(tmp_path / "whole"))
    first = run_script(
        SCRIPT, *SHORT, "--total-timesteps", "2000", "--exploration-fraction", "1.0", "--log-dir", str(tmp_path / "parts")
    )
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "parts")
    resumed = run_script(SCRIPT, "--resume", os.path.join(run_dir, "checkpoint.pt"), "--total-timesteps", "4000")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    scalars = read_scalars(run_dir)
    assert len(expected["charts/episodic_length"]) > 50
    for tag in sorted(TAGS - {"charts/SPS"}):
        assert scalars[tag] == expected[tag], tag


BAD_INPUT = [
    (["--n-atoms", "1"], ["--n-atoms must be in [2, 10000], got 1"]),
    (["--n-atoms", "100000000"], ["--n-atoms must be in [2, 10000], got 100000000"]),  # trial 5, P1: a traceback
    (["--v-min", "10", "--v-max", "-10"], ["--v-min 10.0 and --v-max -10.0 must hold -1,000,000 <= v-min < v-max"]),
    (["--v-min", "-3e38", "--v-max", "3e38"], ["--v-min -3e+38 and --v-max 3e+38 must hold"]),  # trial 13, Q5
    (["--v-min", "5", "--v-max", "5.0000001"], ["too close for float32 at this scale"]),  # trial 14: atoms collapse
    (["--v-max", "nan"], ["--v-max must be a finite number, got nan"]),
    (["--env-id", "Pendulum-v1"], ["'Pendulum-v1'", "discrete"]),
    (["--env-id", "Pong-v5"], ["'Pong-v5'"]),
    (["--learning-starts", "600000"], ["--learning-starts 600000"]),
    (["--batch-size", "20000"], ["--batch-size 20000 is larger than --buffer-size 10000"]),
    (["--end-e", "0.5", "--start-e", "0.1"], ["--end-e 0.5 must be <= --start-e 0.1"]),
]

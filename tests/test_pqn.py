"""cleanrl/pqn.py: its Q(lambda) targets against a brute-force forward view over random same-step rollouts, the
truncation bootstrap on real CartPole against replayed single envs, the network, learning, evaluation, determinism,
resume and bad input."""

import os

import gymnasium as gym
import numpy as np
import pytest
import torch
from bad_input import test_bad_input_gives_one_clear_line_and_writes_nothing  # noqa: F401 (collected here)
from helpers import REPO, evaluate_cli_returns, only_run_dir, read_scalars, run_script
from q_lambda_reference import forward_view_returns

from cleanrl.pqn import QNetwork, make_env, q_lambda_returns_same_step, truncation_values

SCRIPT = "pqn"
TAGS = {"charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/epsilon", "charts/learning_rate"}
TAGS |= {"losses/td_loss", "losses/q_values"}


@pytest.mark.parametrize("gamma,q_lambda", [(0.99, 0.65), (0.9, 1.0), (0.99, 0.0), (1.0, 0.5)])
def test_q_lambda_returns_match_a_brute_force_forward_view(gamma, q_lambda):
    rng = np.random.default_rng(7)
    num_steps, num_envs = 40, 6
    flags = rng.random((num_steps, num_envs))
    terminated = flags < 0.08
    truncated = (flags >= 0.08) & (flags < 0.16)
    truncated |= terminated & (rng.random((num_steps, num_envs)) < 0.3)  # both flags sometimes: a termination
    next_values, rewards = rng.normal(size=(num_steps, num_envs)), rng.normal(size=(num_steps, num_envs))
    final_values = np.where(truncated & ~terminated, rng.normal(size=(num_steps, num_envs)) * 5, 0.0)
    assert terminated.sum() >= 10 and (truncated & ~terminated).sum() >= 10 and (terminated & truncated).any()
    as_tensor = lambda x: torch.as_tensor(x, dtype=torch.float32 if x.dtype != bool else torch.bool)  # noqa: E731
    returns = q_lambda_returns_same_step(
        *(as_tensor(x) for x in (next_values, final_values, rewards, terminated, truncated)), gamma=gamma, q_lambda=q_lambda
    )
    expected = forward_view_returns(next_values, final_values, rewards, terminated, truncated, gamma, q_lambda)
    np.testing.assert_allclose(returns.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_truncation_bootstraps_max_q_of_the_real_final_observation():
    """The script's own wiring on real CartPole with a 20-step limit: truncation_values on every step (what the loop
    calls). Each sub-env is replayed on a plain env with the same seed, so the real last observation of every
    episode is known independently of info["final_obs"]: on truncated rows the bootstrap is max Q of it, and 0
    elsewhere (a termination bootstraps nothing; max Q(reset obs) would be another episode's)."""
    num_envs, seed, limit, num_steps = 3, 2, 20, 120
    torch.manual_seed(0)
    q_network = QNetwork(4, 2)
    max_q = lambda obs: q_network(torch.as_tensor(np.asarray(obs), dtype=torch.float32)).max(dim=1).values.detach().numpy()  # noqa: E731
    envs = make_env("CartPole-v1", num_envs, "sync", max_episode_steps=limit)
    singles = [gym.make("CartPole-v1", max_episode_steps=limit) for _ in range(num_envs)]
    obs, _ = envs.reset(seed=seed)
    for i, env in enumerate(singles):
        env.reset(seed=seed + i)
    rng = np.random.default_rng(0)
    final_values, real_final_values, truncated_rows, terminated_rows = [], np.zeros((num_steps, num_envs)), [], []
    for t in range(num_steps):
        action = rng.integers(0, 2, num_envs)
        obs, _, term, trunc, info = envs.step(action)
        final_values.append(truncation_values(q_network, info, term, trunc).numpy())
        for i, env in enumerate(singles):
            last_obs, _, _, _, _ = env.step(int(action[i]))
            if term[i] or trunc[i]:
                real_final_values[t, i] = max_q(last_obs[None])[0]
                env.reset()
        truncated_rows.append(trunc & ~term)
        terminated_rows.append(term)
    envs.close()
    final_values, truncated = np.array(final_values), np.array(truncated_rows)
    assert truncated.sum() >= 5 and np.array(terminated_rows).sum() >= 5
    np.testing.assert_allclose(final_values[truncated], real_final_values[truncated], rtol=1e-5, atol=1e-6)
    assert (final_values[~truncated] == 0).all()
    source = open(os.path.join(REPO, "cleanrl", f"{SCRIPT}.py")).read()  # and the training loop calls this wiring
    assert "final_values[step] = truncation_values(q_network, info, term, trunc)" in source
    assert "next_values, final_values, rewards, terminations, truncations, args.gamma, args.q_lambda" in source


def test_q_network_is_cleanrls_120_84_relu_mlp_with_layernorm():
    network = QNetwork(4, 2).network
    kinds = [type(layer).__name__ for layer in network]
    assert kinds == ["Linear", "LayerNorm", "ReLU", "Linear", "LayerNorm", "ReLU", "Linear"]
    assert [network[i].out_features for i in (0, 3, 6)] == [120, 84, 2]


# CleanRL's pqn.py defaults on 200k steps instead of 500k (epsilon reaches 0.05 at 100k, the lr anneals to 0 over the
# run). Seeds 1-3 ended with last-20 training means 136.3, 243.3, 119.6 and greedy 10-episode evaluations 139.2,
# 317.0, 120.7 (random play: about 22); at 500k seed 1 reached 499.9 at 435k steps.
LEARN_BAR, EVAL_BAR = 90, 90
LEARNING_RUN = ["--seed", "1", "--env-id", "CartPole-v1", "--total-timesteps", "200000"]


def test_cartpole_learns(learning_run):
    scalars = read_scalars(learning_run)
    assert TAGS <= set(scalars), TAGS - set(scalars)
    returns = [value for _, value in scalars["charts/episodic_return"]]
    assert np.mean(returns[:20]) < 60  # it starts from scratch (epsilon 1: about 22)
    assert np.mean(returns[-20:]) >= LEARN_BAR, returns[-20:]
    epsilons = [value for _, value in scalars["charts/epsilon"]]
    assert epsilons[0] > 0.95 and epsilons[-1] == pytest.approx(0.05)


def test_saved_model_evaluates_greedy(learning_run):
    model_path = os.path.join(learning_run, f"{SCRIPT}.cleanrl_model")
    returns = evaluate_cli_returns(model_path, "--episodes", "5", "--greedy")
    assert len(returns) == 5 and np.mean(returns) >= EVAL_BAR, returns  # the trained network, not a fresh one (~10)


SHORT = ["--env-id", "Acrobot-v1", "--max-episode-steps", "60", "--num-envs", "4", "--num-steps", "32", "--seed", "4"]
SHORT += ["--no-anneal-lr"]


def test_same_seed_is_identical_and_a_resumed_extension_continues_the_uninterrupted_run(tmp_path):
    """Acrobot with a 60-step limit (truncations) for 16 iterations, twice: identical scalars. Then the same run in
    two parts: 8 iterations with the epsilon schedule of the whole (exploration over the same env steps), and a
    --resume that extends it to 16. The sync envs, RNG states and RAdam continue where they were: every scalar after
    the checkpoint equals the uninterrupted run's."""
    whole = [*SHORT, "--total-timesteps", "2048", "--exploration-fraction", "0.5"]
    scalars = []
    for i in range(2):
        result = run_script(SCRIPT, *whole, "--log-dir", str(tmp_path / f"whole{i}"))
        assert result.returncode == 0, result.stderr[-3000:]
        scalars.append(read_scalars(only_run_dir(tmp_path / f"whole{i}")))
    assert scalars[0]["charts/episodic_length"] and all(length <= 60 for _, length in scalars[0]["charts/episodic_length"])
    for tag in sorted(TAGS - {"charts/SPS"}):
        assert scalars[0][tag] == scalars[1][tag], tag

    first = [*SHORT, "--total-timesteps", "1024", "--exploration-fraction", "1.0"]  # 0.5 x 2048 env steps as well
    result = run_script(SCRIPT, *first, "--log-dir", str(tmp_path / "parts"))
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "parts")
    result = run_script(SCRIPT, "--resume", os.path.join(run_dir, "checkpoint.pt"), "--total-timesteps", "2048")
    assert result.returncode == 0, result.stderr[-3000:]
    resumed = read_scalars(run_dir)
    for tag in sorted(TAGS - {"charts/SPS"}):
        assert resumed[tag] == scalars[0][tag], tag


BAD_INPUT = [
    (["--env-id", "Hoper-v4"], ["'Hoper-v4'", "; e.g. CartPole-v1"]),  # trial 31: Box-action ids are not suggested
    (["--env-id", "Pendulum-v1"], ["'Pendulum-v1'", "discrete"]),
    (["--env-id", "CartPol-v1"], ["'CartPol-v1'", "CartPole-v1"]),
    (["--q-lambda", "1.5"], ["--q-lambda must be in [0, 1], got 1.5"]),
    (["--q-lambda", "nan"], ["--q-lambda must be a finite number, got nan"]),
    (["--end-e", "0.5", "--start-e", "0.1"], ["--end-e 0.5 must be <= --start-e 0.1"]),
    (["--exploration-fraction", "0"], ["--exploration-fraction must be in (0, 1], got 0"]),
    (["--max-grad-norm", "inf"], ["--max-grad-norm must be", "finite", "got inf"]),
    (["--learning-rate", "nan"], ["--learning-rate must be", "finite", "got nan"]),
    (["--num-minibatches", "3"], ["--num-minibatches 3", "512"]),
    (["--total-timesteps", "100"], ["--total-timesteps 100"]),
]

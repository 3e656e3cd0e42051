"""cleanrl/rpo_continuous_action_envpool.py: the perturbation is applied in the update only, and to the mean only;
the script differs from ppo_continuous_action_envpool.py by that change and its flag; learning, evaluation, bad
input."""

import difflib
import os

import numpy as np
import pytest
import torch
from bad_input import test_bad_input_gives_one_clear_line_and_writes_nothing  # noqa: F401 (collected here)
from helpers import REPO, evaluate_cli_returns, read_scalars
from torch.distributions import Normal

from cleanrl.rpo_continuous_action_envpool import Agent

SCRIPT = "rpo_continuous_action_envpool"


def agent_and_inputs(rpo_alpha: float):
    torch.manual_seed(0)
    agent = Agent(5, 3, rpo_alpha=rpo_alpha)
    with torch.no_grad():
        agent.actor_logstd.fill_(-0.7)
    return agent, torch.randn(64, 5), torch.randn(64, 3)


def test_acting_samples_from_the_unperturbed_gaussian():
    """With no action given (the rollout), the log-prob of the sampled action is that of N(mean, std) itself."""
    agent, obs, _ = agent_and_inputs(0.5)
    with torch.no_grad():
        action, logprob, entropy, value = agent.get_action_and_value(obs)
        gaussian = Normal(agent.actor_mean(obs), agent.actor_logstd.exp().expand(64, 3))
    np.testing.assert_allclose(logprob.numpy(), gaussian.log_prob(action).sum(-1).numpy(), rtol=1e-5, atol=1e-6)


def test_the_update_perturbs_the_mean_only_uniformly_within_alpha():
    """With actions given (the update), the log-probs are those of N(mean + z, std), z uniform in [-alpha, alpha] from
    torch's RNG: re-seeded, the same z reproduces them exactly. The std, the entropy and the value are untouched, and
    z covers the interval without leaving it."""
    alpha = 0.5
    agent, obs, actions = agent_and_inputs(alpha)
    torch.manual_seed(123)
    with torch.no_grad():
        _, logprob, entropy, value = agent.get_action_and_value(obs, actions)
    torch.manual_seed(123)
    z = torch.empty(64, 3).uniform_(-alpha, alpha)
    with torch.no_grad():
        mean, std = agent.actor_mean(obs), agent.actor_logstd.exp().expand(64, 3)
        expected = Normal(mean + z, std).log_prob(actions).sum(-1)
        unperturbed = Normal(mean, std)
    np.testing.assert_allclose(logprob.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(entropy.numpy(), unperturbed.entropy().sum(-1).numpy(), rtol=1e-6)
    np.testing.assert_allclose(value.numpy(), agent.get_value(obs).detach().numpy(), rtol=1e-6)
    assert z.abs().max() <= alpha and z.abs().max() > 0.9 * alpha
    assert not np.allclose(logprob.numpy(), unperturbed.log_prob(actions).sum(-1).numpy(), rtol=1e-3)
    # alpha 0 is PPO: the update sees the unperturbed Gaussian
    zero_alpha, *_ = agent_and_inputs(0.0)
    with torch.no_grad():
        plain = zero_alpha.get_action_and_value(obs, actions)[1]
    np.testing.assert_allclose(plain.numpy(), unperturbed.log_prob(actions).sum(-1).numpy(), rtol=1e-5, atol=1e-6)


def test_the_script_is_ppo_continuous_action_envpool_but_for_the_perturbation():
    """`diff` against the PPO script: only the header, the flag, its check and the perturbation differ."""
    read = lambda name: open(os.path.join(REPO, "cleanrl", f"{name}.py")).read().splitlines()  # noqa: E731
    diff = list(difflib.unified_diff(read("ppo_continuous_action_envpool"), read(SCRIPT), lineterm="", n=0))
    removed = [line[1:].strip() for line in diff if line.startswith("-") and not line.startswith("---")]
    added = [line[1:].strip() for line in diff if line.startswith("+") and not line.startswith("+++")]
    code = [line for line in removed[2:] + added if line and not line.startswith("#")]  # past the header's 2 lines
    assert removed[2:] == [
        "def __init__(self, obs_dim: int, action_dim: int, logstd_init: float = 0.0):",
        "agent = Agent(int(np.prod(obs_shape)), int(np.prod(action_shape)), logstd_init=args.actor_logstd_init).to(device)",
    ], removed
    # the constructor's call, split over lines for its extra argument, and the module the flag's check exits through
    syntax = {"agent = Agent(", ").to(device)", "import sys"}
    assert all("rpo_alpha" in line for line in code if line not in removed and line not in syntax), code


# InvertedPendulum-v4 as tests/test_ppo_continuous_action_envpool.py's check: 98,304 steps of 16 envs x 128 steps.
# Seeds 1-3 ended with last-20 means of 1000, 1000, 1000 (the maximum) in about 8 s each on the 2-core EPYC.
LEARNING_RUN = ["--env-id", "InvertedPendulum-v4", "--total-timesteps", "98304", "--num-envs", "16", "--num-steps", "128"]
LEARNING_RUN += ["--seed", "1"]


def test_inverted_pendulum_learns_and_evaluates(learning_run):
    returns = [value for _, value in read_scalars(learning_run)["charts/episodic_return"]]
    assert np.mean(returns[:20]) < 50, returns[:20]
    assert np.mean(returns[-20:]) >= 700, returns[-20:]
    evaluated = evaluate_cli_returns(os.path.join(learning_run, f"{SCRIPT}.cleanrl_model"), "--episodes", "3", "--greedy")
    assert np.mean(evaluated) >= 700, evaluated


BAD_INPUT = [
    (["--rpo-alpha", "-0.1"], ["--rpo-alpha must be in [0, 10]", "got -0.1"]),
    (["--rpo-alpha", "1e300"], ["--rpo-alpha must be in [0, 10]", "got 1e+300"]),  # trial 9 T2: was a traceback
    (["--rpo-alpha", "nan"], ["--rpo-alpha must be a finite number, got nan"]),
    (["--env-id", "Pong-v5"], ["Pong-v5"]),
]


@pytest.mark.parametrize("alpha", [0.0, 0.5])
def test_the_rollout_draws_no_perturbation_noise(alpha):
    """Acting consumes the same torch random numbers for any alpha: the perturbation's draws belong to the update."""
    agent, obs, _ = agent_and_inputs(alpha)
    torch.manual_seed(7)
    with torch.no_grad():
        action = agent.get_action_and_value(obs)[0]
    torch.manual_seed(7)
    reference, *_ = agent_and_inputs(0.0)
    torch.manual_seed(7)
    with torch.no_grad():
        expected = reference.get_action_and_value(obs)[0]
    np.testing.assert_array_equal(action.numpy(), expected.numpy())

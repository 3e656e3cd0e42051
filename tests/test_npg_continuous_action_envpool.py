"""Tests of cleanrl/npg_continuous_action_envpool.py: conjugate gradient against a direct solve, the Fisher-vector
product against the explicit Fisher matrix, the update ignoring stale rows, real runs (determinism, resume, a
learning run on InvertedPendulum and its saved-model evaluation through the command line) and bad input."""

import copy

import pytest
import torch
from bad_input import test_bad_input_gives_one_clear_line_and_writes_nothing  # noqa: F401 (collected here)
from helpers import ON_POLICY_TAGS, run_script
from natural_gradient_family import (  # noqa: F401 (shared tests and fixtures, collected here)
    family,
    random_batch,
    test_conjugate_gradient_solves_a_random_spd_system,
    test_fisher_vector_product_equals_the_explicit_fisher_matrix,
    test_inverted_pendulum_learns,
    test_resume_continues_the_step_counter_and_the_normalisers,
    test_same_seed_gives_identical_losses,
    test_saved_model_evaluates_from_the_command_line,
    two_short_runs,
)

import cleanrl.npg_continuous_action_envpool as script
from cleanrl.npg_continuous_action_envpool import (
    Args,
    actor_parameters,
    flat_grad,
    policy_update,
    surrogate_loss,
)

SCRIPT = "npg_continuous_action_envpool"
TAGS = ON_POLICY_TAGS | {"losses/kl"}


def test_policy_update_ignores_stale_rows_and_takes_the_natural_gradient_step():
    """Randomising everything on the stale rows changes neither the new parameters nor a statistic; the step is
    step_size x (F + damping I)^-1 (-g), up to conjugate gradient's accuracy, and lowers the surrogate."""
    agent, obs, actions, old_logprobs, advantages, valid = random_batch(script)
    args = Args()
    first, second = copy.deepcopy(agent), copy.deepcopy(agent)
    stats = policy_update(first, obs, actions, old_logprobs, advantages, valid, args)
    stale = ~valid
    n = int(stale.sum())
    changed = [x.clone() for x in (obs, actions, old_logprobs, advantages)]
    for x, fresh in zip(changed, (torch.randn(n, 5) * 100, torch.randn(n, 2) * 10, torch.randn(n) * 10, torch.randn(n) * 1e3)):
        x[stale] = fresh
    stats2 = policy_update(second, *changed, valid, args)
    for p, q in zip(first.parameters(), second.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    for key in stats:
        torch.testing.assert_close(stats[key], stats2[key], rtol=1e-5, atol=1e-6)

    # the step against an explicit solve, in float64 on the same batch
    agent64 = copy.deepcopy(agent).double()
    mask = valid.double()
    adv = advantages.double()[valid]
    adv = (advantages.double() - adv.mean()) / (adv.std() + 1e-8)
    params = actor_parameters(agent64)
    grad = flat_grad(surrogate_loss(agent64, obs.double(), actions.double(), old_logprobs.double(), adv, mask), params)
    # (F + damping I)^-1 g with the exact Gaussian Fisher F = U U^T (mean's parameters, U = J^T diag(1 / sigma^2 n)^1/2)
    # plus 2 I on the log-stds, by the Woodbury identity: no 4,676 x 4,676 matrix is formed
    sigma2 = (2 * agent64.actor_logstd.detach()).exp().reshape(-1)
    rows = []
    for row in torch.nonzero(valid).flatten():
        mean = agent64.actor_mean(obs.double()[row])
        for j in range(2):
            rows.append(
                flat_grad(mean[j], params, retain_graph=True, materialize_grads=True) / (sigma2[j] * valid.sum()).sqrt()
            )
    u, damping = torch.stack(rows).T, args.damping
    solution = (
        grad - u @ torch.linalg.solve(damping * torch.eye(u.shape[1], dtype=torch.float64) + u.T @ u, u.T @ grad)
    ) / damping
    solution[-2:] = grad[-2:] / (2 + damping)
    expected = -args.step_size * solution
    moved = torch.cat(
        [(p.detach() - q.detach()).reshape(-1) for p, q in zip(actor_parameters(first), actor_parameters(agent))]
    )
    cosine = torch.nn.functional.cosine_similarity(moved.double(), expected, dim=0)
    assert cosine > 0.95 and 0.7 < moved.norm() / expected.norm() < 1.3, (cosine, moved.norm(), expected.norm())
    assert stats["policy_loss"] < 0 and stats["kl"] > 0  # the surrogate improved on 0 (its value at pi_old)
    for p, q in zip(first.critic.parameters(), agent.critic.parameters()):
        assert torch.equal(p, q)  # the natural gradient moves the actor only


# InvertedPendulum learning run of the shared tests (natural_gradient_family.py)
LEARNING_RUN = ["--env-id", "InvertedPendulum-v4", "--total-timesteps", "65536", "--seed", "1"]
THRESHOLD = 900.0


BAD_INPUT = [
    (["--env-id", "HalfCheetah-v9"], ["'HalfCheetah-v9'", "HalfCheetah-v4"]),
    (["--step-size", "0"], ["--step-size", "0"]),
    (["--cg-iterations", "0"], ["--cg-iterations", "0"]),
    (["--num-envs", "0"], ["--num-envs", "0"]),
]


@pytest.mark.parametrize(
    "overrides,expected",
    [
        ({"damping": -0.1}, ["--damping", "-0.1"]),
        ({"critic_iterations": 0}, ["--critic-iterations", "0"]),
        ({"env_id": "Pong-v5"}, ["'Pong-v5'", "MuJoCo"]),
        ({"total_timesteps": 100}, ["--total-timesteps 100"]),
    ],
)
def test_validate_args_names_the_bad_value(overrides, expected):
    with pytest.raises(SystemExit) as error:
        script.validate_args(Args(**overrides))
    message = str(error.value.code)
    assert message.startswith("error: ") and "\n" not in message
    for fragment in expected:
        assert fragment in message, (fragment, message)
    script.validate_args(Args())  # the defaults pass


def test_a_diverged_policy_step_names_the_step_size(tmp_path):
    """Trial 31: a natural-gradient step of 1e12 diverged at once, and the line said "try a lower --learning-rate",
    the critic's flag, not the one that moved the policy."""
    flags = ["--env-id", "Hopper-v4", "--num-envs", "2", "--num-steps", "64", "--total-timesteps", "512"]
    result = run_script(SCRIPT, *flags, "--step-size", "1e12", "--log-dir", str(tmp_path))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "no checkpoint was written; try a lower --step-size (the policy's natural-gradient step) or --learning-rate (the critic's)"
        )
    ), result.stderr

"""The tests NPG and TRPO share: the same conjugate gradient, Fisher-vector product, normalisers, resume and
learning bar, written once. Each test file imports them by name (pytest collects them there) together with the
`family` fixture, through which they read that file's module: `script` (the script imported), `SCRIPT`, `TAGS`,
`LEARNING_RUN` (its learning run) and `THRESHOLD`."""

import os
import shutil

import numpy as np
import pytest
import torch
from helpers import evaluate_cli_returns, only_run_dir, read_scalars, run_script


@pytest.fixture(scope="module")
def family(request):
    """The test module that imported these tests."""
    return request.module


def test_conjugate_gradient_solves_a_random_spd_system(family):
    conjugate_gradient = family.script.conjugate_gradient
    rng = np.random.default_rng(0)
    n = 30
    m = rng.normal(size=(n, n))
    a = torch.tensor(m @ m.T + 0.5 * np.eye(n))  # symmetric positive definite, condition number in the hundreds
    b = torch.tensor(rng.normal(size=n))
    expected = torch.linalg.solve(a, b)
    x = conjugate_gradient(lambda v: a @ v, b, iterations=4 * n, residual_tol=1e-20)
    torch.testing.assert_close(x, expected, rtol=1e-8, atol=1e-8)
    # fewer iterations: a partial solve whose residual is smaller than b's, but not yet zero
    partial = conjugate_gradient(lambda v: a @ v, b, iterations=5)
    assert 1e-6 < torch.linalg.norm(a @ partial - b) < torch.linalg.norm(b)
    # the early stop: an easy system (A = 2 I) is solved in one iteration, the later ones skipped
    calls = []
    x = conjugate_gradient(lambda v: calls.append(1) or 2.0 * v, b, iterations=10)
    torch.testing.assert_close(x, b / 2)
    assert len(calls) == 1


def tiny_policy_batch(script, seed: int = 0, obs_dim: int = 3, action_dim: int = 2, rows: int = 12):
    torch.manual_seed(seed)
    agent = script.Agent(obs_dim, action_dim).double()
    with torch.no_grad():  # move away from the initial (near-zero) output layer and log-std, for a generic test
        for p in agent.actor_mean.parameters():
            p.add_(0.3 * torch.randn_like(p))
        agent.actor_logstd.copy_(torch.tensor([[-0.3, 0.4]]))
    obs = torch.randn(rows, obs_dim, dtype=torch.float64)
    valid = torch.ones(rows, dtype=torch.bool)
    valid[[2, 7, 8]] = False
    return agent, obs, valid


def test_fisher_vector_product_equals_the_explicit_fisher_matrix(family):
    """The exact Fisher matrix of a Gaussian policy with state-independent log-std, averaged over the valid rows:
    J_mu^T diag(1 / sigma^2) J_mu for the mean's parameters and 2 I for the log-stds (no cross terms). It equals the
    Hessian of the mean KL at pi = pi_old (checked too), and the double-backprop product equals (F + damping I) v."""
    script = family.script
    agent, obs, valid = tiny_policy_batch(script)
    params = script.actor_parameters(agent)
    sizes = [p.numel() for p in params]
    n_params, action_dim = sum(sizes), 2
    sigma2 = (2 * agent.actor_logstd.detach()).exp().reshape(-1)
    fisher = torch.zeros(n_params, n_params, dtype=torch.float64)
    for row in torch.nonzero(valid).flatten():
        mean = agent.actor_mean(obs[row])
        jacobian = torch.stack(
            [script.flat_grad(mean[j], params, retain_graph=True, materialize_grads=True) for j in range(2)]
        )
        fisher += jacobian.T @ torch.diag(1 / sigma2) @ jacobian
    fisher /= valid.sum()
    fisher[-action_dim:, -action_dim:] += 2 * torch.eye(action_dim, dtype=torch.float64)

    with torch.no_grad():
        old_mean, old_logstd = agent.actor_mean(obs), agent.actor_logstd.clone()
    mask = valid.double()
    old_flat = torch.cat([p.detach().reshape(-1) for p in params])

    # Hessian of the mean KL by autograd, column by column (double backprop through the real mean_kl)
    kl_grad = script.flat_grad(script.mean_kl(agent, obs, old_mean, old_logstd, mask), params, create_graph=True)
    hessian = torch.stack([script.flat_grad(kl_grad[i], params, retain_graph=True) for i in range(n_params)])
    torch.testing.assert_close(hessian, fisher, rtol=1e-9, atol=1e-10)

    rng = torch.Generator().manual_seed(1)
    for damping in (0.0, 0.1):
        vector = torch.randn(n_params, dtype=torch.float64, generator=rng)
        product = script.fisher_vector_product(kl_grad, params, vector, damping)
        torch.testing.assert_close(product, fisher @ vector + damping * vector, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(torch.cat([p.detach().reshape(-1) for p in params]), old_flat)  # nothing moved


def random_batch(script, rows: int = 64, obs_dim: int = 5, action_dim: int = 2, seed: int = 0):
    """A random update batch for `script`'s Agent, a quarter of its rows stale."""
    torch.manual_seed(seed)
    agent = script.Agent(obs_dim, action_dim)
    obs, actions = torch.randn(rows, obs_dim), torch.randn(rows, action_dim)
    with torch.no_grad():
        _, old_logprobs, _, _ = agent.get_action_and_value(obs, actions)
    advantages = torch.randn(rows) + actions[:, 0]  # the first action dimension pays: a direction to learn
    valid = torch.rand(rows) > 0.25
    return agent, obs, actions, old_logprobs, advantages, valid


SHORT_RUN = ["--env-id", "HalfCheetah-v4", "--num-envs", "4", "--num-steps", "32", "--max-episode-steps", "50"]
SHORT_BATCH = 4 * 32


@pytest.fixture(scope="module")
def two_short_runs(family, tmp_path_factory):
    """The same seeded short HalfCheetah run (6 iterations) twice, with a 50-step time limit so episodes end."""
    dirs = []
    for i in range(2):
        log_dir = tmp_path_factory.mktemp(f"cheetah{i}")
        result = run_script(
            family.SCRIPT, *SHORT_RUN, "--total-timesteps", str(6 * SHORT_BATCH), "--seed", "5", "--log-dir", str(log_dir)
        )
        assert result.returncode == 0, result.stderr[-3000:]
        dirs.append(only_run_dir(log_dir))
    return dirs


def test_same_seed_gives_identical_losses(family, two_short_runs):
    first, second = (read_scalars(d) for d in two_short_runs)
    missing = family.TAGS - set(first)
    assert not missing, missing
    assert len(first["losses/kl"]) == 6
    for tag in sorted(family.TAGS - {"charts/SPS"}):
        assert first[tag] == second[tag], tag


def test_resume_continues_the_step_counter_and_the_normalisers(family, two_short_runs, tmp_path):
    """Resume the 6-iteration run to 10: same folder, global step and iteration continue, the critic's learning-rate
    schedule is recomputed for the new length, and the normalisers carry on from their saved counts."""
    SCRIPT = family.SCRIPT
    run_dir = str(tmp_path / "run")
    shutil.copytree(two_short_runs[0], run_dir)
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
    saved = torch.load(checkpoint_path, weights_only=True)
    assert saved["script"] == SCRIPT and saved["iteration"] == 6 and saved["global_step"] == 6 * SHORT_BATCH
    assert float(saved["obs_rms"]["count"]) == 4 * (1 + 6 * 32)  # the reset batch and one batch per step
    assert set(saved) >= {"model_state_dict", "optimizer_state_dict", "obs_rms", "return_rms", "value_rms", "learning_rate"}
    result = run_script(SCRIPT, "--resume", checkpoint_path, "--total-timesteps", str(10 * SHORT_BATCH), "--save-model")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"at iteration 6 (global step {6 * SHORT_BATCH:,})" in result.stdout
    final = torch.load(checkpoint_path, weights_only=True)
    assert final["iteration"] == 10 and final["global_step"] == 10 * SHORT_BATCH
    # the resumed run's envs reset once more: one more reset batch
    assert float(final["obs_rms"]["count"]) == 4 * (1 + 6 * 32) + 4 * (1 + 4 * 32)
    assert float(final["return_rms"]["count"]) > float(saved["return_rms"]["count"])
    steps = [step for step, _ in read_scalars(run_dir)["losses/kl"]]
    assert steps == [i * SHORT_BATCH for i in range(1, 11)]
    lrs = [lr for _, lr in read_scalars(run_dir)["charts/learning_rate"]]
    assert lrs[6] == pytest.approx(1e-3 * (1 - 6 / 10), rel=1e-5)  # the schedule of a 10-iteration run
    model = torch.load(os.path.join(run_dir, f"{SCRIPT}.cleanrl_model"), weights_only=True)
    assert set(model) >= {"script", "args", "model_state_dict", "obs_rms", "return_rms", "value_rms"}


def test_inverted_pendulum_learns(family, pendulum_run):
    scalars = read_scalars(pendulum_run)
    returns = [value for _, value in scalars["charts/episodic_return"]]
    assert np.mean(returns[:20]) < 50, returns[:20]
    final = np.mean(returns[-20:])
    assert final >= family.THRESHOLD, (final, returns[-40:])


def test_saved_model_evaluates_from_the_command_line(family, pendulum_run):
    model_path = os.path.join(pendulum_run, f"{family.SCRIPT}.cleanrl_model")
    returns = evaluate_cli_returns(model_path, "--episodes", "2")
    assert len(returns) == 2 and np.mean(returns) >= 0.8 * family.THRESHOLD, returns
    obs_rms = family.script.RunningMeanStd((4,))
    obs_rms.load_state_dict(torch.load(model_path, weights_only=True)["obs_rms"])
    assert obs_rms.count == 16 + int(family.LEARNING_RUN[3])  # the reset batch and every step of the 16 envs

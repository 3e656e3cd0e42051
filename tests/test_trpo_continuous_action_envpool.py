"""Tests of cleanrl/trpo_continuous_action_envpool.py: conjugate gradient against a direct solve, the Fisher-vector
product against the explicit Fisher matrix, the line search and the KL bound (a violating step forced), the update
ignoring stale rows, real runs (determinism, resume, a
learning run on InvertedPendulum and its saved-model evaluation through the command line) and bad input."""

import copy

import pytest
import torch
from bad_input import test_bad_input_gives_one_clear_line_and_writes_nothing  # noqa: F401 (collected here)
from helpers import ON_POLICY_TAGS
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

import cleanrl.trpo_continuous_action_envpool as script
from cleanrl.trpo_continuous_action_envpool import (
    Agent,
    Args,
    line_search,
    policy_update,
)

SCRIPT = "trpo_continuous_action_envpool"
TAGS = ON_POLICY_TAGS | {"losses/kl", "losses/step_size", "losses/backtracks"}


def test_policy_update_ignores_stale_rows_and_keeps_the_kl_bound():
    """Randomising everything on the stale rows changes neither the new parameters nor a statistic; the accepted
    step's real mean KL (computed here from the two policies) is at most max_kl and the surrogate improved."""
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
        torch.testing.assert_close(stats[key], stats2[key], rtol=1e-5, atol=1e-7)
    kl = independent_kl(agent, first, obs[valid])
    assert 0.1 * args.max_kl < kl <= args.max_kl, kl  # a real step, inside the trust region
    assert stats["policy_loss"] < 0 and stats["step_size"] > 0
    for p, q in zip(first.critic.parameters(), agent.critic.parameters()):
        assert torch.equal(p, q)  # the natural gradient moves the actor only


def independent_kl(old: Agent, new: Agent, obs: torch.Tensor) -> float:
    """Mean KL(old || new) of two Gaussian policies, by the closed form, not by the script's mean_kl."""
    with torch.no_grad():
        m0, m1 = old.actor_mean(obs), new.actor_mean(obs)
        s0, s1 = old.actor_logstd.exp(), new.actor_logstd.exp()
        kl = (s1 / s0).log() + (s0**2 + (m0 - m1) ** 2) / (2 * s1**2) - 0.5
    return float(kl.sum(-1).mean())


@pytest.mark.parametrize("shrink,rejected", [(0.25, False), (0.01, True)])
def test_a_step_beyond_the_trust_region_is_shrunk_or_rejected(monkeypatch, shrink, rejected):
    """Forced: a Fisher-vector product understated by `shrink` makes the full step 1 / sqrt(shrink) times too long
    (2x: about 4x max_kl; 10x: about 100x). The line search shrinks the 2x step until its real KL fits, and rejects
    the 10x one (0.8^9 = 0.13 cannot bring 100x max_kl under the bound): then the policy does not move at all."""
    agent, obs, actions, old_logprobs, advantages, valid = random_batch(script)
    args = Args()
    honest = copy.deepcopy(agent)
    policy_update(honest, obs, actions, old_logprobs, advantages, valid, args)
    real_fvp = script.fisher_vector_product
    monkeypatch.setattr(script, "fisher_vector_product", lambda *a: shrink * real_fvp(*a))
    forced = copy.deepcopy(agent)
    stats = policy_update(forced, obs, actions, old_logprobs, advantages, valid, args)
    if rejected:
        assert stats["backtracks"] == args.max_backtracks and stats["step_size"] == 0 and stats["kl"] == 0
        for p, q in zip(forced.parameters(), agent.parameters()):
            assert torch.equal(p, q)
    else:
        assert 1 <= stats["backtracks"] < args.max_backtracks, stats
        kl = independent_kl(agent, forced, obs[valid])
        assert kl <= args.max_kl and stats["kl"] == pytest.approx(kl, rel=1e-4), (kl, stats)
        # backtracks >= 1: the full step failed the checks; the honest update, for comparison, is a real step too
        assert independent_kl(agent, honest, obs[valid]) > 0.1 * args.max_kl


def test_line_search_checks_the_real_kl_and_the_improvement():
    """On a toy problem with known KL (|x|^2) and loss (-x[0]): the first trial inside both tests is returned, with
    its index; a step that improves nothing or never fits is rejected, returning the old parameters."""
    old = torch.zeros(3)

    def toy(flat):
        return float(-flat[0]), float(flat @ flat)

    flat, i = line_search(toy, old, torch.tensor([1.0, 0.5, 0.0]), 0.0, max_kl=0.2, coeff=0.5, max_backtracks=10)
    assert i == 2 and torch.equal(flat, torch.tensor([0.25, 0.125, 0.0]))  # KL 1.25, 0.31, then 0.078
    flat, i = line_search(toy, old, torch.tensor([-1.0, 0.0, 0.0]), 0.0, max_kl=0.2, coeff=0.5, max_backtracks=10)
    assert i is None and torch.equal(flat, old)  # inside the bound from i = 3 on, but the loss only gets worse
    flat, i = line_search(toy, old, torch.tensor([10.0, 0.0, 0.0]), 0.0, max_kl=1e-6, coeff=0.8, max_backtracks=10)
    assert i is None and torch.equal(flat, old)  # improves, but 0.8^9 x 10 is far outside the bound


# InvertedPendulum learning run of the shared tests (natural_gradient_family.py)
LEARNING_RUN = ["--env-id", "InvertedPendulum-v4", "--total-timesteps", "51200", "--seed", "1"]
THRESHOLD = 900.0


BAD_INPUT = [
    (["--env-id", "HalfCheetah-v9"], ["'HalfCheetah-v9'", "HalfCheetah-v4"]),
    (["--max-kl", "0"], ["--max-kl", "0"]),
    (["--backtrack-coeff", "1.5"], ["--backtrack-coeff", "1.5"]),
    (["--cg-iterations", "0"], ["--cg-iterations", "0"]),
    (["--num-envs", "0"], ["--num-envs", "0"]),
    (["--max-kl", "nan"], ["--max-kl must be", "finite", "got nan"]),  # was: trained nothing and exited 0
    (["--damping", "nan"], ["--damping must be", "finite", "got nan"]),
]


@pytest.mark.parametrize(
    "overrides,expected",
    [
        ({"damping": -0.1}, ["--damping", "-0.1"]),
        ({"critic_iterations": 0}, ["--critic-iterations", "0"]),
        ({"max_backtracks": 0}, ["--max-backtracks", "0"]),
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


def test_a_mujoco_v3_run_that_gymnasium_cannot_film_is_refused_in_one_line(tmp_path):
    """Trial 17, U6: EnvPool trains Hopper-v3, but Gymnasium 1.x, which films the EnvPool MuJoCo runs, moved its v3
    ids out. `--capture-video` trained on with every video failing, exit 0; evaluating the model with
    --capture-video ended in an ImportError traceback after playing, an empty videos/ left. Now one line each, before
    training or playing, and nothing written."""
    import os
    import subprocess
    import sys

    from helpers import REPO, assert_one_error_line

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    train = [sys.executable, os.path.join(REPO, "cleanrl", f"{SCRIPT}.py"), "--env-id", "Hopper-v3", "--num-envs", "1"]
    train += ["--num-steps", "1024", "--total-timesteps", "1024", "--torch-threads", "1", "--log-dir", str(tmp_path)]
    refused = "--capture-video films Hopper-v3 in Gymnasium's env of that id, which Gymnasium cannot make here"
    result = subprocess.run([*train, "--capture-video"], capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert_one_error_line(result, [refused, "train on a v4 or v5 id to film"])
    assert os.listdir(tmp_path) == []
    result = subprocess.run([*train, "--save-model"], capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    (run_dir,) = [os.path.join(tmp_path, name) for name in os.listdir(tmp_path)]
    evaluate = [
        sys.executable,
        "-m",
        "cleanrl_utils.evaluate",
        "--model-path",
        os.path.join(run_dir, f"{SCRIPT}.cleanrl_model"),
    ]
    result = subprocess.run(
        [*evaluate, "--episodes", "1", "--capture-video", "--torch-threads", "1"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )
    assert_one_error_line(result, [refused], ignore_warnings=True)
    assert not os.path.exists(os.path.join(run_dir, "videos")) and "return" not in result.stdout

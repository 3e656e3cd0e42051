"""A2C, NPG and TRPO on EnvPool MuJoCo each carry their own GAE (single-file scripts): each against the brute-force
per-episode sums of gae_reference, on random next-step-autoreset rollouts with terminations, truncations and stale
rows (issue 25: a truncation bootstrapped with 0, or a valid mask left all-true, went uncaught)."""

import importlib

import numpy as np
import pytest
import torch
from gae_reference import next_step_reference, random_next_step_rollout

SCRIPTS = ["a2c_continuous_action_envpool", "npg_continuous_action_envpool", "trpo_continuous_action_envpool"]


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("gamma,gae_lambda", [(0.99, 0.95), (0.9, 1.0), (1.0, 0.0)])
def test_compute_gae_matches_brute_force_on_random_rollouts(script, gamma, gae_lambda):
    compute_gae = importlib.import_module(f"cleanrl.{script}").compute_gae
    rng = np.random.default_rng(7)
    for _ in range(100):
        num_steps, num_envs = int(rng.integers(1, 24)), int(rng.integers(1, 6))
        rollout = random_next_step_rollout(rng, num_steps, num_envs, p_term=rng.uniform(0, 0.3), p_trunc=rng.uniform(0, 0.3))
        expected, expected_valid = next_step_reference(*rollout, gamma, gae_lambda)
        values, rewards, terminations, truncations, prev_episode_over = (torch.as_tensor(x) for x in rollout)
        advantages, valid = compute_gae(values, rewards, terminations, truncations, prev_episode_over, gamma, gae_lambda)
        np.testing.assert_array_equal(valid.numpy(), expected_valid)
        np.testing.assert_allclose(advantages.numpy()[expected_valid], expected[expected_valid], rtol=1e-9, atol=1e-9)
        assert (advantages.numpy()[~expected_valid] == 0).all()

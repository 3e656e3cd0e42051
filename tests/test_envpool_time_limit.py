"""EnvPool's time-limit step, on real envs: an episode that terminates on exactly its limit step must come out
terminated (bootstrap 0), not truncated, as EnvPool alone reports it; one that reaches the limit alive comes out
truncated; the step after either is the usual next-step-autoreset stale step. Checked through every EnvPool
script's own make_env."""

import importlib

import envpool
import numpy as np
import pytest

from cleanrl_utils.envpool_time_limit import make_envpool

MUJOCO_SCRIPTS = [
    f"{name}_continuous_action_envpool" for name in ("ppo", "reinforce", "a2c", "npg", "trpo", "sac", "td3", "ddpg")
]
ATARI_SCRIPTS = ["ppo_atari_envpool", "dqn_atari_envpool", "ppo_atari_envpool_distributed"]
NUM_ENVS, SEED = 4, 1


def play(envs, steps: int, action_shape=(3,)) -> list[tuple]:
    """(obs, reward, terminated, truncated, elapsed_step) of each step under a fixed stream of random actions."""
    rng = np.random.default_rng(0)
    envs.reset()
    record = []
    for _ in range(steps):
        obs, reward, term, trunc, info = envs.step(rng.uniform(-1, 1, (NUM_ENVS,) + action_shape).astype(np.float32))
        record.append((obs.copy(), reward.copy(), term.copy(), trunc.copy(), info["elapsed_step"].copy()))
    return record


def first_termination(record) -> tuple[int, int]:
    """(env, step) of the earliest termination in an episode that ran with no limit in reach."""
    steps = [next((t + 1 for t, row in enumerate(record) if row[2][i]), 10**9) for i in range(NUM_ENVS)]
    env = int(np.argmin(steps))
    return env, steps[env]


@pytest.fixture(scope="module")
def unlimited():
    """Hopper-v4 under its own 1,000-step limit: the hoppers fall (terminate) within a few dozen random steps."""
    record = play(envpool.make("Hopper-v4", env_type="gymnasium", num_envs=NUM_ENVS, seed=SEED), 60)
    env, k = first_termination(record)
    assert 5 < k < 60 and not record[k - 1][3].any()
    return record, env, k


def test_envpool_alone_reports_a_termination_on_the_limit_step_as_truncated(unlimited):
    """The upstream flaw this module exists for: with the limit at k, the fall at step k comes out truncated."""
    record, env, k = unlimited
    plain = play(envpool.make("Hopper-v4", env_type="gymnasium", num_envs=NUM_ENVS, seed=SEED, max_episode_steps=k), k)
    assert plain[k - 1][3][env] and not plain[k - 1][2][env]


@pytest.mark.parametrize("name", MUJOCO_SCRIPTS)
def test_termination_on_the_limit_step_stays_a_termination(name, unlimited):
    """Limit k = the step the first hopper falls: that env is terminated (not truncated) at k, the others (alive at
    k) truncated (not terminated); every env's step k + 1 is stale (reward 0, not done, elapsed 0, the reset
    observation), and step k + 2 is the first of the new episode. Up to step k, nothing but step k's truncation
    flags differs from the run under EnvPool's own 1,000-step limit."""
    record, env, k = unlimited
    script = importlib.import_module(f"cleanrl.{name}")
    limited = play(script.make_env("Hopper-v4", NUM_ENVS, SEED, k), k + 2)
    for t in range(k):  # the same steps, only the truncation flags of step k differ
        for field in (0, 1, 2, 4) if t == k - 1 else range(5):
            np.testing.assert_array_equal(limited[t][field], record[t][field])
    _, _, term, trunc, elapsed = limited[k - 1]
    alive = np.arange(NUM_ENVS) != env
    assert term[env] and not trunc[env]
    assert trunc[alive].all() and not term[alive].any()
    np.testing.assert_array_equal(elapsed, k)
    obs, reward, term, trunc, elapsed = limited[k]  # the stale step
    np.testing.assert_array_equal(reward, 0)
    assert not (term | trunc).any()
    np.testing.assert_array_equal(elapsed, 0)
    reset_obs, _ = envpool.make("Hopper-v4", env_type="gymnasium", num_envs=NUM_ENVS, seed=SEED).reset()
    assert np.abs(obs - reset_obs).max() < 0.05  # a fresh start (reset noise 5e-3), not where the episodes were
    assert np.abs(limited[k - 1][0] - reset_obs).max() > 0.05
    np.testing.assert_array_equal(limited[k + 1][4], 1)
    assert limited[k + 1][1].all()  # real rewards again


def test_the_default_limit_is_the_envs_own():
    envs = make_envpool("Hopper-v4", None, env_type="gymnasium", num_envs=1, seed=SEED)
    assert envs.limit == 1000 and envs.config["max_episode_steps"] == 1001


@pytest.mark.parametrize("name", ATARI_SCRIPTS)
def test_atari_games_are_truncated_at_the_limit_and_reset_next_step(name):
    """Pong with a 10-step limit: no game ends, so step 10 is truncated (not terminated, not game over) and step
    11 is the stale step of a fresh game (reward 0, not done, elapsed 0, `info["reward"]` 0)."""
    script = importlib.import_module(f"cleanrl.{name}")
    envs = script.make_env("Pong-v5", 2, SEED, 10)
    envs.reset()
    for step in range(1, 13):
        _, reward, term, trunc, info = envs.step(np.ones(2, dtype=np.int32))
        assert not term.any() and not info["terminated"].any()
        assert trunc.all() == (step == 10) and trunc.any() == (step == 10)
        np.testing.assert_array_equal(info["elapsed_step"], [step, step] if step <= 10 else [0, 0] if step == 11 else [1, 1])
        if step == 11:
            np.testing.assert_array_equal(reward, 0)
            np.testing.assert_array_equal(info["reward"], 0)

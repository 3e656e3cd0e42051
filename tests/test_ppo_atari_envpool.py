"""Tests of cleanrl/ppo_atari_envpool.py: GAE and masking against brute force and real EnvPool,
the loss ignoring stale rows, real short runs, determinism, saved-model evaluation, learning on marked Pong frames
(real EnvPool), bad input."""

import os

import envpool
import numpy as np
import pytest
import torch
from bad_input import test_bad_input_gives_one_clear_line_and_writes_nothing  # noqa: F401 (collected here)
from gae_reference import next_step_reference, random_next_step_rollout, script_gae
from helpers import (
    ATARI_TAGS,
    assert_masked_rows_change_nothing,
    evaluate_cli_returns,
    marked_frame_returns,
    only_run_dir,
    read_scalars,
    run_script,
)

from cleanrl.ppo_atari_envpool import Agent, Args, compute_gae, ppo_loss

SCRIPT = "ppo_atari_envpool"


def gae_torch(*rollout, **gae):
    return script_gae(compute_gae, *rollout, **gae)


@pytest.mark.parametrize("gamma,gae_lambda", [(0.99, 0.95), (0.9, 1.0), (1.0, 0.0), (0.97, 0.5)])
def test_compute_gae_matches_brute_force_on_random_rollouts(gamma, gae_lambda):
    rng = np.random.default_rng(int(gamma * 1000 + gae_lambda * 100))
    for _ in range(200):
        num_steps, num_envs = int(rng.integers(1, 24)), int(rng.integers(1, 6))
        rollout = random_next_step_rollout(rng, num_steps, num_envs, p_term=rng.uniform(0, 0.3), p_trunc=rng.uniform(0, 0.3))
        expected, expected_valid = next_step_reference(*rollout, gamma, gae_lambda)
        advantages, valid = gae_torch(*rollout, gamma, gae_lambda)
        np.testing.assert_array_equal(valid, expected_valid)
        np.testing.assert_allclose(advantages[valid], expected[valid], rtol=1e-10, atol=1e-10)
        assert (advantages[~valid] == 0).all()


def test_compute_gae_boundaries_at_rollout_edges():
    """Hand-made cases: a termination on the last row bootstraps 0, a truncation on the last row
    bootstraps values[T], a boundary before row 0 makes row 0 stale, a boundary on row 0."""
    gamma, lam = 0.9, 0.8
    values = np.array([[1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0], [3.0, 3.0, 3.0, 3.0]])
    rewards = np.array([[0.5, 0.5, 0.5, 0.5], [1.0, 1.0, 1.0, 1.0]])
    term = np.array([[False, False, False, True], [True, False, False, False]])
    trunc = np.array([[False, False, False, False], [False, True, False, False]])
    prev_over = np.array([False, False, True, False])
    adv, valid = gae_torch(values, rewards, term, trunc, prev_over, gamma, lam)
    # env 0: row 1 terminates -> delta1 = 1 - 2; row 0 continues into it
    d1 = 1.0 - 2.0
    assert adv[1, 0] == pytest.approx(d1)
    assert adv[0, 0] == pytest.approx(0.5 + gamma * 2.0 - 1.0 + gamma * lam * d1)
    # env 1: row 1 truncates -> bootstrap V(obs_2) = 3
    d1 = 1.0 + gamma * 3.0 - 2.0
    assert adv[1, 1] == pytest.approx(d1)
    # env 2: row 0 is stale, row 1 bootstraps from values[T]
    assert not valid[0, 2] and valid[1, 2]
    assert adv[1, 2] == pytest.approx(1.0 + gamma * 3.0 - 2.0)
    # env 3: row 0 terminates (bootstrap 0), so row 1 is stale
    assert adv[0, 3] == pytest.approx(0.5 - 1.0)
    assert valid[0, 3] and not valid[1, 3]


def test_stale_rows_only_matter_as_truncation_bootstrap():
    """Changing a stale row's reward or value leaves every valid advantage unchanged, except the
    value of the row right after a truncation, which is V(last obs): the bootstrap itself."""
    rng = np.random.default_rng(7)
    checked_term = checked_trunc = 0
    for _ in range(100):
        values, rewards, term, trunc, prev_over = random_next_step_rollout(rng, 16, 4, 0.15, 0.15)
        base, valid = gae_torch(values, rewards, term, trunc, prev_over)
        for t, env in zip(*np.nonzero(~valid)):
            changed_rewards = rewards.copy()
            changed_rewards[t, env] += 100.0
            adv, _ = gae_torch(values, changed_rewards, term, trunc, prev_over)
            np.testing.assert_array_equal(adv[valid], base[valid])
            changed_values = values.copy()
            changed_values[t, env] += 100.0
            adv, _ = gae_torch(changed_values, rewards, term, trunc, prev_over)
            if t > 0 and trunc[t - 1, env] and not term[t - 1, env]:
                assert adv[t - 1, env] != pytest.approx(base[t - 1, env])
                checked_trunc += 1
            else:
                np.testing.assert_array_equal(adv[valid], base[valid])
                checked_term += 1
    assert checked_term > 50 and checked_trunc > 50


def test_valid_mask_is_false_exactly_on_real_envpool_stale_steps():
    """Real Breakout under episodic_life, with a short time limit so truncations happen too. A step
    is stale when EnvPool did not advance the game: elapsed_step unchanged (after a life loss) or
    back to 0 (after game over or truncation). That signal is independent of the flags."""
    num_envs, num_steps, rollouts = 4, 64, 6
    envs = envpool.make(
        "Breakout-v5",
        env_type="gymnasium",
        num_envs=num_envs,
        seed=3,
        episodic_life=True,
        reward_clip=True,
        max_episode_steps=150,
    )
    _, info = envs.reset()
    elapsed_before = info["elapsed_step"].copy()
    rng = np.random.default_rng(0)
    prev_over = np.zeros(num_envs, dtype=bool)
    counts = {"life_loss": 0, "game_over_or_truncation": 0, "truncation": 0}
    for _ in range(rollouts):
        term = np.zeros((num_steps, num_envs), dtype=bool)
        trunc = np.zeros((num_steps, num_envs), dtype=bool)
        stale = np.zeros((num_steps, num_envs), dtype=bool)
        for t in range(num_steps):
            _, _, term[t], trunc[t], info = envs.step(rng.integers(0, 4, num_envs))
            elapsed = info["elapsed_step"]
            stale[t] = (elapsed == elapsed_before) | (elapsed == 0)
            counts["life_loss"] += int(((elapsed == elapsed_before) & (elapsed > 0)).sum())
            counts["game_over_or_truncation"] += int((elapsed == 0).sum())
            counts["truncation"] += int(trunc[t].sum())
            elapsed_before = elapsed.copy()
        _, valid = gae_torch(np.zeros((num_steps + 1, num_envs)), np.zeros((num_steps, num_envs)), term, trunc, prev_over)
        np.testing.assert_array_equal(valid, ~stale)
        prev_over = term[-1] | trunc[-1]
    assert counts["life_loss"] > 5 and counts["game_over_or_truncation"] > 2 and counts["truncation"] > 0, counts


def test_loss_ignores_stale_rows():
    """Randomising everything on the masked rows (obs, action, old log-prob, advantage, return, old
    value) changes neither the loss nor its gradient, nor any logged statistic."""
    torch.manual_seed(0)
    args, agent, batch = Args(), Agent(6, bf16=False, channels_last=False), 32
    valid = torch.rand(batch) > 0.3
    n = int((~valid).sum())
    obs, fresh_obs = (torch.randint(0, 256, (rows, 4, 84, 84), dtype=torch.uint8) for rows in (batch, n))
    actions, fresh_actions = torch.randint(0, 6, (batch,)), torch.randint(0, 6, (n,))
    tensors = [obs, actions, torch.randn(batch) - 1.5, torch.randn(batch), torch.randn(batch), torch.randn(batch)]
    fresh = [fresh_obs, fresh_actions, torch.randn(n) * 10, torch.randn(n) * 1e3, torch.randn(n) * 1e3, torch.randn(n) * 1e3]
    assert_masked_rows_change_nothing(lambda *x: ppo_loss(agent, *x, args), agent, tensors, fresh, valid)


def test_bf16_network_stays_close_to_fp32():
    """The bf16 lever changes numerics, not the function: same weights, close outputs."""
    torch.manual_seed(0)
    fp32 = Agent(6, bf16=False, channels_last=False)
    fast = Agent(6, bf16=True, channels_last=True)
    fast.load_state_dict(fp32.state_dict())
    obs = torch.randint(0, 256, (16, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        h32, h16 = fp32.hidden(obs), fast.hidden(obs)
    assert h16.dtype == torch.float32
    assert (h16 - h32).abs().max() <= 0.05 * h32.abs().max()


@pytest.mark.parametrize("channels_last", [False, True])
def test_trunk_is_the_nature_cnn_on_obs_over_255(channels_last):
    """The trunk folds x / 255 into conv1's weight and reads channels-last minibatches: its outputs and every
    parameter's gradient must be those of the plain Nature CNN applied to obs / 255, written out here layer
    by layer with the same weights."""
    torch.manual_seed(1)
    agent = Agent(6, channels_last=channels_last)
    obs = torch.randint(0, 256, (12, 4, 84, 84), dtype=torch.uint8)
    if channels_last:  # as the rollout storage hands a minibatch over
        obs = obs.contiguous(memory_format=torch.channels_last)
    conv1, conv2, conv3, linear = (agent.network[i] for i in (0, 2, 4, 7))
    x = obs.float().contiguous() / 255.0
    x = torch.relu(torch.nn.functional.conv2d(x, conv1.weight.contiguous(), conv1.bias, stride=4))
    x = torch.relu(torch.nn.functional.conv2d(x, conv2.weight.contiguous(), conv2.bias, stride=2))
    x = torch.relu(torch.nn.functional.conv2d(x, conv3.weight.contiguous(), conv3.bias, stride=1))
    expected = torch.relu(x.reshape(12, -1) @ linear.weight.T + linear.bias)
    expected_grads = torch.autograd.grad(expected.square().sum(), list(agent.network.parameters()))
    hidden = agent.hidden(obs)
    grads = torch.autograd.grad(hidden.square().sum(), list(agent.network.parameters()))
    torch.testing.assert_close(hidden, expected, rtol=1e-4, atol=1e-5)
    for grad, expected_grad in zip(grads, expected_grads):
        torch.testing.assert_close(grad, expected_grad, rtol=1e-4, atol=1e-4 * expected_grad.abs().max().item())


SHORT_RUN = [
    "--env-id",
    "Pong-v5",
    "--total-timesteps",
    "3072",
    "--num-envs",
    "8",
    "--num-steps",
    "128",
    "--max-episode-steps",
    "100",
    "--torch-threads",  # fixed: auto threads follow the load, and float sums differ in the last bits by thread count
    "2",
    "--update-epochs",  # the update is most of a run's time; these tests check tags, files and determinism
    "1",
]


@pytest.fixture(scope="module")
def two_short_runs(tmp_path_factory):
    """The same seeded short Pong run twice, with a 100-step time limit so games are logged."""
    dirs = []
    for i in range(2):
        log_dir = tmp_path_factory.mktemp(f"pong{i}")
        result = run_script(SCRIPT, *SHORT_RUN, "--seed", "5", "--log-dir", str(log_dir), "--save-model")
        assert result.returncode == 0, result.stderr[-3000:]
        dirs.append(only_run_dir(log_dir))
    return dirs


def test_short_pong_run_writes_every_tag(two_short_runs):
    scalars = read_scalars(two_short_runs[0])
    missing = ATARI_TAGS - set(scalars)
    assert not missing, missing
    # every env truncated at least twice in 384 steps at a 100-step limit
    assert len(scalars["charts/episodic_return"]) >= 16
    assert all(length == 100 for _, length in scalars["charts/episodic_length"])
    # Whole-game returns from the unclipped reward, reset at every game: integer point differences, and a
    # near-random policy loses points within 100 steps (400 frames). A script that logged the last step's
    # reward, or never reset the sum, would log zeros or ever larger losses.
    game_returns = [ret for _, ret in scalars["charts/episodic_return"]]
    assert all(ret == int(ret) and -10 <= ret <= 3 for ret in game_returns), game_returns
    assert sum(ret < 0 for ret in game_returns) >= len(game_returns) // 2, game_returns
    assert len(scalars["losses/value_loss"]) == 3


def test_same_seed_gives_identical_losses(two_short_runs):
    first, second = (read_scalars(d) for d in two_short_runs)
    for tag in sorted(ATARI_TAGS - {"charts/SPS"}):
        assert first[tag] == second[tag], tag


def test_saved_model_evaluates(two_short_runs):
    from cleanrl_utils.evaluate import evaluate

    model_path = os.path.join(two_short_runs[0], f"{SCRIPT}.cleanrl_model")
    returns = evaluate(model_path, episodes=3, seed=1)
    assert len(returns) == 3
    # whole games at the training run's 100-step limit: integer point differences, points lost
    assert all(r == int(r) and -10 <= r <= 3 for r in returns) and min(returns) < 0, returns


def test_evaluate_cli_reports_per_game_returns(two_short_runs):
    model_path = os.path.join(two_short_runs[0], f"{SCRIPT}.cleanrl_model")
    assert len(evaluate_cli_returns(model_path, "--episodes", "2")) == 2


# Marked Pong frames (tests/marked_frames.py): +1 for RIGHT on a white band, LEFT on a black one. Random play earns
# 64/6 = 10.7 in a 64-step game, a policy that ignores the band at most 32. The settings of the async script's test:
# the defaults except the game length, --update-epochs 2 and fp32. Calibration (2026-12-06, 2-core Zen 3, one thread,
# two runs at once beside other runs, 112-119 s each): last-20-game means at 20,480 steps 48.1, 46.1, 48.3 on seeds
# 1, 2, 3 (first-20 means 9.75, 10.65, 11.25). With each step's actions stored one env over (`action.roll(1)`), seed 1
# stayed at 10.55.
MARKED = ["--env-id", "Pong-v5", "--max-episode-steps", "64", "--total-timesteps", "20480", "--update-epochs", "2"]
MARKED += ["--precision", "fp32"]


def test_learns_to_read_the_newest_frame(tmp_path):
    returns = marked_frame_returns(SCRIPT, *MARKED, "--seed", "1", log_dir=tmp_path)
    assert np.mean(returns[:20]) < 16, returns[:20]  # random play first
    assert np.mean(returns[-20:]) > 32, returns[-20:]  # above any policy that cannot see the band


def test_wandb_offline_tracking(tmp_path):
    result = run_script(
        SCRIPT,
        *SHORT_RUN[:2],
        "--total-timesteps",
        "1024",
        "--track",
        "--log-dir",
        str(tmp_path / "runs"),
        env={"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    offline_runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(offline_runs) == 1
    assert list(offline_runs[0].glob("*.wandb"))


BAD_INPUT = [
    (["--env-id", "Pongg-v5"], ["'Pongg-v5'", "Pong-v5"]),
    (["--env-id", "CartPole-v1"], ["'CartPole-v1'", "Atari"]),
    (["--num-minibatches", "3"], ["--num-minibatches 3", "1024"]),
    (["--num-envs", "0"], ["--num-envs", "0"]),
    (["--num-steps", "-5"], ["--num-steps", "-5"]),
    (["--total-timesteps", "100"], ["--total-timesteps 100"]),
    (["--learning-rate", "0"], ["--learning-rate", "0"]),
    (["--capture-video", "--video-every", "0"], ["--video-every must be a positive integer, got 0"]),
    (["--seed", "-1"], ["--seed", "-1"]),
    (["--seed", "4294967296"], ["--seed", "4294967296"]),
    (["--env-id", "HalfCheetah-v4"], ["'HalfCheetah-v4'", "MuJoCo", "Atari"]),
    (["--num-envs", "1", "--num-steps", "8", "--num-minibatches", "8"], ["--num-minibatches 8", "at least 2 rows"]),
    (["--num-steps", "100000000", "--total-timesteps", "10000000000"], ["rollout storage", "GiB"]),
]


def test_missing_model_path_gives_one_clear_line(tmp_path):
    import subprocess
    import sys

    for path, fragment in [
        (tmp_path / "nope.cleanrl_model", "does not exist"),
        (tmp_path / "junk.cleanrl_model", "is not readable as a model file"),
    ]:
        if "junk" in str(path):
            path.write_bytes(b"not a checkpoint")
        result = subprocess.run(
            [sys.executable, "-m", "cleanrl_utils.evaluate", "--model-path", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode != 0 and "Traceback" not in result.stderr
        assert fragment in result.stderr and str(path) in result.stderr
